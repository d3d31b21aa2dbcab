"""Floods against the bot: a real LocalRelay, the real demo ACP agent, the bot subscribed.

The attackers: strangers who flood the owner's channel (to push the owner's pending mention out
of the queue) and open a channel each (to grow the queue without bound) in ``anyone`` mode; and
senders of gift wraps the bot refuses, which every replay would otherwise open again.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.bot.state import STATE_DB
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from tests.support.bot_world import WAIT, Recorder, World
from tests.support.fault_harness import publish
from tests.support.relays import local_relay, restart_relay


@asynccontextmanager
async def serving(
    config: PluginConfig,
    rec: Recorder,
    observe: Callable[[BuzzPlugin], None] | None = None,
) -> AsyncIterator[BuzzPlugin]:
    """The bot subscribed to its relays (``BuzzPlugin.run``) until the block ends, its records
    in ``rec``; ``observe`` sees the bot at each record, from inside it."""

    def record(r: DiagnosticRecord) -> None:
        rec(r)
        if observe is not None:
            observe(plugin)

    plugin = BuzzPlugin(config, on_diagnostic=record)
    runner = asyncio.create_task(plugin.run())
    try:
        await rec.kind("agent_started")
        await rec.kind("replay_completed")
        yield plugin
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)


def stranger_channels(plugin: BuzzPlugin) -> set[str]:
    """The queue channels in which someone other than the owner has an event queued."""
    owner, queue = plugin.config.owner.hex, plugin.queue
    states = (queue.channel_state(name) for name in queue.channel_names())
    return {
        s.name
        for s in states
        if s is not None and any(e.queued.event.pubkey != owner for e in [*s.pending, *s.cancelled])
    }


def queued_rows(state: Path) -> list[tuple[str, str]]:
    """(channel, author) of every queued row, as another process reads the state database."""
    db = sqlite3.connect(state / STATE_DB)
    try:
        rows = db.execute("SELECT channel, event FROM queued").fetchall()
    finally:
        db.close()
    return [(str(channel), json.loads(event)["pubkey"]) for channel, event in rows]


def rejected(rec: Recorder, reason: str) -> list[str]:
    return [r.payload["eventId"] for r in rec.of("event_rejected") if r.payload["reason"] == reason]


async def test_in_anyone_mode_a_strangers_flood_neither_evicts_the_owner_nor_grows_the_queue(
    world: World,
) -> None:
    cap, rooms = 4, 12
    lobby_keys = [SecretKey.generate() for _ in range(10)]
    room_keys = [SecretKey.generate() for _ in range(rooms)]
    # A long coalescing window: nothing is flushed while the flood arrives, so the owner's
    # mention waits in the queue under 520 strangers' mentions of its channel (the cap is 500).
    config = world.config(gate="anyone", max_stranger_channels=cap, coalesce_window=2.0)
    rec = Recorder()
    held: list[int] = []
    mine = world.message(world.owner, "owner: are you still there?", channel="lobby")
    flood = [world.message(lobby_keys[i % 10], f"noise {i}", channel="lobby") for i in range(520)]
    openers = [
        world.message(key, f"a room of my own {i}", channel=f"room{i}")
        for i, key in enumerate(room_keys)
    ]
    async with serving(config, rec, lambda bot: held.append(len(stranger_channels(bot)))):
        # The owner's first (the relay forwards in that order), then the flood: well within the
        # window, so the owner's mention is pending, received earliest, when the lobby fills.
        await publish([world.relay.url], [mine])
        await publish([world.relay.url], [*flood, *openers])
        reply = await rec.wait(
            lambda r: [x for x in r.of("reply_published") if x.payload["inReplyTo"] == mine.id],
            timeout=60,
            what="the reply to the owner's mention",
        )
        assert reply
        refused = rejected(rec, "queue_channels_full")
        dropped = rejected(rec, "queue_full_dropped")
        rows = queued_rows(world.tmp / "state")
    # The lobby overflowed: strangers' mentions were dropped, never the owner's.
    assert len(dropped) >= 20 and mine.id not in dropped
    assert set(dropped) <= {e.id for e in flood}
    # Strangers never held more than the cap of channels, and the rest were refused.
    assert 0 < max(held) <= cap
    assert refused and set(refused) <= {e.id for e in openers}
    admitted_rooms = {c for c, author in rows if c.startswith("room")}
    assert len(admitted_rooms) + 1 <= cap  # the lobby is a stranger channel too
    assert len({c for c, author in rows if author != world.owner.public_key.hex}) <= cap
    # A refused room was never answered, the owner's mention was (exactly once).
    started = [set(r.payload["triggeringEventIds"]) for r in rec.of("turn_started")]
    assert not any(set(refused) & ids for ids in started)
    assert sum(mine.id in ids for ids in started) == 1


def _unopenable_wrap(to: SecretKey) -> Event:
    """A gift wrap addressed to ``to`` whose content is no NIP-44 payload at all."""
    return sign_event(
        SecretKey.generate(),
        kind=nip59.GIFT_WRAP_KIND,
        content="not an encrypted seal",
        tags=[["p", to.public_key.hex]],
        created_at=int(time.time()),
    )


async def test_a_refused_gift_wrap_is_opened_once_not_again_on_reconnect_or_restart(
    tmp_path: Path,
) -> None:
    async with local_relay(db_path=tmp_path / "relay-db") as first_relay:
        relay = first_relay
        world = World(relay, *(SecretKey.generate() for _ in range(3)), tmp_path)
        agent = world.agent.public_key.hex
        now = int(time.time())
        stranger = nip17.message(world.human.public_key.hex, [agent], "let me in", created_at=now)
        refused_wrap = nip59.gift_wrap(world.human, agent, stranger, now=now)
        broken = _unopenable_wrap(world.agent)
        asked = nip17.message(world.owner.public_key.hex, [agent], "owner asks", created_at=now)
        owners = nip59.gift_wrap(world.owner, agent, asked, now=now)
        rec = Recorder()
        config = world.config()
        try:
            async with serving(config, rec):
                await publish([relay.url], [refused_wrap, broken, owners])
                await rec.kind("reply_published")  # the owner's: its copy to the agent too
                await rec.wait(lambda r: len(rejected(r, "own_event")) >= 1, what="own copy")
                # Once the bot is quiet: a LocalRelay connection busy when the relay stops
                # outlives the stop (docs/cli.md), and the bot keeps one connection.
                await rec.kind("metric_published")
                relay = await restart_relay(relay)  # the bot reconnects and replays
                await rec.kind("replay_completed", 2, timeout=30)
            rec2 = Recorder()
            async with serving(config, rec2):  # a restart on the same state: another replay
                replayed = rec2.of("replay_completed")[0].payload["events"]
        finally:
            await relay.close()
    # The replays saw every wrap again (the two refused, the owner's, the agent's own copy)...
    assert replayed >= 4
    # ...but opened none of the refused ones: each refusal was reported once, not per replay.
    both = [*rec.records, *rec2.records]
    reasons = [
        (r.payload["reason"], r.payload.get("eventId")) for r in both if r.kind == "event_rejected"
    ]
    [(why, _)] = [x for x in reasons if x[1] == broken.id]
    assert why.startswith("gift_wrap_")
    assert [x for x in reasons if x[1] == stranger.id] == [("author_not_owner", stranger.id)]
    assert sum(1 for reason, _ in reasons if reason == "own_event") == 1
    # The owner's message was answered once, in the first run only.
    assert len(rec.of("turn_started")) == 1 and rec2.of("turn_started") == []


async def test_a_flood_costs_the_worker_a_look_per_window_not_one_per_event(world: World) -> None:
    # Each mention arrives on its own (its own step of the bot's loop), well within the window
    # of the one before: each holds the channel past the look the worker has planned, so the
    # worker is not woken for it (docs/queue.md, "Cost at depth"); the burst is still one turn.
    config = world.config(coalesce_window=1.5)
    rec = Recorder()
    root = world.message(world.owner, "a thread")
    burst = [world.message(world.owner, f"part {i}", reply_to=root) for i in range(40)]
    looks = 0
    async with serving(config, rec) as plugin:
        flush_next = plugin.queue.flush_next

        def counted(now: float, *, settle: float = 0.0) -> object:
            nonlocal looks
            looks += 1
            return flush_next(now, settle=settle)

        plugin.queue.flush_next = counted  # type: ignore[method-assign,assignment]
        for event in burst:  # 20 ms apart: one at a time, 0.8 s in all, well within the window
            await publish([world.relay.url], [event])
            await asyncio.sleep(0.02)
        started = await rec.wait(lambda r: r.of("turn_started"), timeout=60, what="the turn")
        until_turn = looks
    assert set(started[0].payload["triggeringEventIds"]) == {e.id for e in burst}
    assert until_turn < len(burst) / 2  # a look per planned wake (every 0.5 s at most)
