"""Memory the network keeps (docs/bot.md): real ``buzz run`` processes, a real LocalRelay, the
demo agent; everything counted from outside (events on the relay, the bot's diagnostics file).

* A stranger floods the bot with gift-wrapped ``!allow`` messages, then a relay that lost the
  owner's newer ``!budget daily_usd 0.5`` serves the older ``!budget daily_usd 100`` again: it
  is not obeyed, and the turn the newer cap holds stays held.
* A state directory wiped (deleted) or emptied (its tables emptied) seconds after public
  mentions and private messages were answered: nothing is answered twice after the restart,
  and what was sent while the bot was down is answered once.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.bot import replay as replay_module
from nostr_buzz.bot.state import STATE_DB
from nostr_buzz.core.reply import chat_reply_tags
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from tests.support.bot_world import Recorder, World
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    answered_ids,
    fetch_all,
    mention,
    publish,
    write_config,
)
from tests.support.relays import RunningRelay, start_relay

WAIT = 30.0


class Bot:
    """``buzz run`` with the demo agent on one relay, and its diagnostics."""

    def __init__(self, tmp: Path, cast: Cast, url: str, *args: str) -> None:
        self.directory = tmp / "bot"
        config = write_config(self.directory, cast, [url], agent_args=("--turn-cost", "1"))
        self.process = BotProcess(config, tmp / "bot.log", *args)
        self.state = self.directory / "state"
        self.tail = DiagnosticsTail(self.state / "diagnostics.jsonl")

    async def start(self) -> None:
        self.tail = DiagnosticsTail(self.state / "diagnostics.jsonl")  # the file may be new
        await self.process.start()
        await self.record("replay_completed", lambda p: True, 0)

    async def record(
        self, kind: str, match: Callable[[dict[str, Any]], bool], after: int | None = None
    ) -> dict[str, Any]:
        def wanted(record: dict[str, Any]) -> bool:
            return record.get("kind") == kind and match(record.get("payload") or {})

        try:
            return await self.tail.next_record(wanted, WAIT, kind, after)
        except AssertionError:
            raise AssertionError(f"no {kind}; the bot's log:\n{self.process.log_tail()}") from None

    def rejected(self, reason: str) -> set[str]:
        records = self.tail.of("event_rejected")
        return {
            r["payload"].get("eventId")
            for r in records
            if (r.get("payload") or {}).get("reason") == reason
        }


async def relay_with(port: int, events: list[Event]) -> RunningRelay:
    """A relay on ``port`` (once the old one let it go) that holds ``events`` only."""
    deadline = time.monotonic() + 15
    while True:
        try:
            relay = await start_relay(port=port)
            break
        except Exception:  # "Address already in use" until the port is free
            assert time.monotonic() < deadline, "the port was not freed"
            await asyncio.sleep(0.05)
    await publish([relay.url], events)
    return relay


def dated(world: World, content: str, created_at: int, channel: str) -> Event:
    """The owner's mention of the agent in ``channel``, dated ``created_at``."""
    tags = [["h", channel], ["p", world.agent.public_key.hex]]
    return sign_event(world.owner, kind=9, content=content, tags=tags, created_at=created_at)


def private_message(cast: Cast, author: SecretKey, text: str) -> tuple[str, Event]:
    """A NIP-17 message to the agent: the rumor's id and its gift wrap."""
    now = int(time.time())
    rumor = nip17.message(author.public_key.hex, [cast.agent.public_key.hex], text, created_at=now)
    return rumor.id, nip59.gift_wrap(author, cast.agent.public_key, rumor, now=now)


async def test_an_older_budget_served_again_after_a_stranger_flood_is_not_obeyed(
    tmp_path: Path,
) -> None:
    cast = Cast.generate()
    relay = await start_relay()
    bot = Bot(tmp_path, cast, relay.url, "--budget-daily-usd", "0.01", "--budget-action", "stop")
    try:
        await bot.start()
        now = int(time.time())
        older = mention(
            cast, cast.owner, "!budget daily_usd 100", channel="ops", created_at=now - 2
        )
        first = mention(cast, cast.friend, "spend 1 USD", channel="room-a")
        newer = mention(cast, cast.owner, "!budget daily_usd 0.5", channel="ops")
        held = mention(cast, cast.friend, "past the cap", channel="room-b")
        steps: list[tuple[Event, str, Callable[[dict[str, Any]], bool]]] = [
            (older, "budget_changed", lambda p: p.get("value") == 100.0),
            (first, "metric_queued", lambda p: True),  # 1 USD spent
            (newer, "budget_changed", lambda p: p.get("value") == 0.5),
            (held, "budget_stopped", lambda p: held.id in p["eventIds"]),
        ]
        for event, kind, match in steps:
            mark = bot.tail.mark()
            await publish([relay.url], [event])
            await bot.record(kind, match, mark)

        # A stranger's 100 gift-wrapped !allow messages: each one a command the bot sees.
        flood = [private_message(cast, cast.stranger, f"!allow C{i:03d}")[1] for i in range(100)]
        mark = bot.tail.mark()
        await publish([relay.url], flood)
        deadline = time.monotonic() + WAIT
        while len(bot.tail.of("approval_refused")) < 100:
            assert time.monotonic() < deadline, "the stranger's !allow messages were not seen"
            await asyncio.sleep(0.1)

        # The relay comes back without the newer !budget, and serves the older one again.
        kept = await fetch_all([relay.url], {})
        await relay.close()
        relay = await relay_with(relay.port, [e for e in kept if e.id != newer.id])
        await bot.record("replay_completed", lambda p: p["events"] > 0, mark)
        await bot.tail.quiet(1.0, 10)
    finally:
        await bot.process.stop()
        relay.stop()
    changes = [r["payload"].get("value") for r in bot.tail.of("budget_changed")]
    assert changes == [100.0, 0.5], changes  # the older cap was obeyed once, in its time
    assert older.id in bot.rejected("command_not_newer")
    started = [i for r in bot.tail.of("turn_started") for i in r["payload"]["triggeringEventIds"]]
    assert held.id not in started  # the held turn stays held
    with sqlite3.connect(bot.state / STATE_DB) as db:
        cap = db.execute("SELECT value FROM budget_notes WHERE name = 'cap:daily_usd'").fetchone()
    assert cap == ("0.5",)


def empty_database(state: Path) -> None:
    """Every table of the state database emptied (the file and its schema stay)."""
    with sqlite3.connect(state / STATE_DB) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            if not table.startswith("sqlite_"):
                db.execute(f'DELETE FROM "{table}"')


def wipe(state: Path) -> None:
    shutil.rmtree(state)


async def answers(cast: Cast, url: str) -> Counter[str]:
    """How many times the agent answered each event: public replies by their ``e`` tags,
    private answers opened as the person they went to."""
    counts: Counter[str] = Counter()
    agent = cast.agent.public_key.hex
    for reply in await fetch_all([url], {"kinds": [9], "authors": [agent]}):
        counts.update(set(reply.tag_values("e")))
    wraps = await fetch_all([url], {"kinds": [1059], "#p": [cast.friend.public_key.hex]})
    for wrap in wraps:
        rumor = nip59.open_gift_wrap(cast.friend, wrap).rumor
        answered = nip17.replied_to(rumor)
        if rumor.pubkey == agent and answered is not None:
            counts[answered] += 1
    return counts


async def turns(counter: Counter44200) -> Counter[str]:
    """How many turns that succeeded took each event (by the metrics, opened as the owner)."""
    counts: Counter[str] = Counter()
    for metric in await counter.metrics():
        if metric.outcome == "success":
            counts.update(answered_ids(metric))
    return counts


async def all_answered(cast: Cast, url: str, ids: list[str], batched: list[str]) -> None:
    """Wait until each of ``ids`` has an answer, and each of ``batched`` a turn."""
    counter = Counter44200(cast, [url])
    deadline = time.monotonic() + WAIT
    while True:
        counts, taken = await answers(cast, url), await turns(counter)
        missing = [i for i in ids if not counts[i]] + [i for i in batched if not taken[i]]
        if not missing:
            return
        assert time.monotonic() < deadline, f"unanswered: {missing}"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("forget", [wipe, empty_database], ids=["wiped", "emptied"])
async def test_a_forgetful_state_directory_answers_nothing_twice(
    tmp_path: Path, forget: Callable[[Path], None]
) -> None:
    cast = Cast.generate()
    relay = await start_relay()
    bot = Bot(tmp_path, cast, relay.url)
    try:
        await bot.start()
        public = [mention(cast, cast.friend, f"public {i}", channel=f"room-{i}") for i in range(3)]
        # Three at once in one thread: one turn, whose reply names the root and the newest only.
        root = mention(cast, cast.friend, "one of three", channel="room-p")
        batch = [root] + [
            mention(cast, cast.friend, f"{i} of three", channel="room-p", root=root)
            for i in ("two", "three")
        ]
        private = [private_message(cast, cast.friend, f"private {i}") for i in range(3)]
        await publish([relay.url], [*public, *batch, *(wrap for _, wrap in private)])
        earlier = [e.id for e in public] + [rumor for rumor, _ in private]
        await all_answered(cast, relay.url, earlier, [e.id for e in batch])
        await bot.tail.quiet(1.0, 10)  # the answers' own copies and metrics are out
        await bot.process.stop()
        before = await turns(Counter44200(cast, [relay.url]))
        metrics = await Counter44200(cast, [relay.url]).metrics()
        assert any({e.id for e in batch} <= answered_ids(m) for m in metrics)  # one turn took all

        forget(bot.state)
        down_public = mention(cast, cast.friend, "sent while the bot was down", channel="room-d")
        down_private, down_wrap = private_message(cast, cast.friend, "also sent while down")
        await publish([relay.url], [down_public, down_wrap])
        await bot.start()
        down = [down_public.id, down_private]
        await all_answered(cast, relay.url, down, [])
        everything = earlier + [e.id for e in batch]
        deadline = time.monotonic() + WAIT
        while not set(everything) <= bot.rejected("answered_before"):
            if time.monotonic() > deadline:
                break  # counted below: what is missing was answered again
            await asyncio.sleep(0.1)
        await bot.tail.quiet(2.0, 15)
        counts = await answers(cast, relay.url)
        after = await turns(Counter44200(cast, [relay.url]))
    finally:
        await bot.process.stop()
        relay.stop()
    assert {i: counts[i] for i in earlier + down} == {i: 1 for i in earlier + down}
    assert {i: after[i] for i in everything} == {i: before[i] for i in everything}
    assert all(before[i] == 1 for i in everything)
    assert set(everything) <= bot.rejected("answered_before")


async def test_answers_are_looked_up_once_per_replay_page_and_never_after_the_start(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """25 mentions an earlier run answered (its replies on the relay), 3 it did not, and a
    fresh state: the 25 are recorded as handled, the 3 answered, with one look-up per page of
    10 events; a mention dated after the start is never looked up."""
    monkeypatch.setattr(replay_module, "REPLAY_PAGE", 10)
    base = int(time.time()) - 60
    agent = world.agent
    answered = [dated(world, f"answered {i}", base + i, f"a{i}") for i in range(25)]
    replies = [
        sign_event(
            agent,
            kind=9,
            content="done",
            tags=chat_reply_tags(m, agent.public_key.hex),
            created_at=m.created_at + 1,
        )
        for m in answered
    ]
    waiting = [dated(world, f"not yet {i}", base + 30 + i, f"w{i}") for i in range(3)]
    await world.publish(*answered, *replies, *waiting)

    rec = Recorder()
    plugin = BuzzPlugin(world.config(), on_diagnostic=rec)
    await plugin.start()  # the recall's pool shares the kept connections from now on
    queries: list[int] = []
    ask = plugin.recall.pool.query

    async def counted(filters: Any, **kwargs: Any) -> Any:
        queries.append(len(filters))
        return await ask(filters, **kwargs)

    monkeypatch.setattr(plugin.recall.pool, "query", counted)
    runner = asyncio.create_task(plugin.run())
    try:
        for event in waiting:
            await rec.wait(lambda r, e=event: r.started_with(e.id), WAIT, "the unanswered ones")
        later = dated(world, "after the start", int(time.time()) + 1, "late")
        looked = len(queries)
        await world.publish(later)
        await rec.wait(lambda r: r.started_with(later.id), WAIT, "the new one")
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
    handled = {r.payload["eventId"] for r in rec.of("event_rejected")}
    assert handled == {m.id for m in answered}
    assert all(r.payload["reason"] == "answered_before" for r in rec.of("event_rejected"))
    assert not any(rec.started_with(m.id) for m in answered)
    assert len(queries) == looked == 3  # 28 events, pages of 10: three look-ups, none later
