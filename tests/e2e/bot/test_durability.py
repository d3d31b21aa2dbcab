"""The bot's answers are durable: replies and metrics stored with the turn's outcome, sent and
retried until a relay takes them, split when too large; failures are never silent.

Real LocalRelays on 127.0.0.1, the real demo agent or a scripted ACP agent as subprocesses.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.bot.state import STATE_DB
from nostr_buzz.nips import nip10
from tests.support.bot_world import WAIT, Recorder, World
from tests.support.relays import free_port, local_relay
from tests.support.scripted_agent import USAGE, Scripted, chunk


def _db_counts(state: Path) -> tuple[int, int]:
    """(queued rows, outbox rows) as another process would see them."""
    db = sqlite3.connect(state / STATE_DB)
    try:
        queued = db.execute("SELECT count(*) FROM queued").fetchone()[0]
        outbox = db.execute("SELECT count(*) FROM outbox").fetchone()[0]
    finally:
        db.close()
    return int(queued), int(outbox)


async def test_reply_and_metric_outlive_a_dead_write_relay_and_a_restart(world: World) -> None:
    port = free_port()
    dead = f"ws://127.0.0.1:{port}"
    rec = Recorder()
    config = world.config(write_relays=(dead,))
    mention = world.message(world.owner, "answer me even if the relay is down")
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(mention)
        await rec.kind("turn_completed")
        failed = await rec.kind("reply_failed")
        # The outcome, the reply and the metric were committed together: nothing is queued
        # any more, and both events wait in the outbox.
        assert _db_counts(world.tmp / "state") == (0, 2)
    assert failed.payload["refusals"][dead]  # the reason reaches the diagnostic
    assert failed.payload["inReplyTo"] == mention.id
    assert rec.of("reply_published") == [] and rec.of("metric_published") == []

    async with local_relay(port=port) as write_relay:
        rec2 = Recorder()
        async with BuzzPlugin(config, on_diagnostic=rec2):
            await rec2.kind("reply_published", timeout=WAIT)
            await rec2.kind("metric_published", timeout=WAIT)
        assert rec2.of("turn_started") == []  # the turn did not run again
        pool_world = World(write_relay, world.owner, world.agent, world.human, world.tmp)
        replies = await pool_world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
        assert [nip10.thread_ref(r).root for r in replies] == [mention.id]
        [metric] = await pool_world.metrics()
        assert metric.triggering_event_ids == (mention.id,)
    assert _db_counts(world.tmp / "state") == (0, 0)


async def test_a_reply_too_large_for_the_relay_is_split_into_ordered_parts(world: World) -> None:
    paragraphs = [f"paragraph {i}: " + "word " * 2_000 for i in range(10)]  # ~100 kB
    text = "\n\n".join(paragraphs)
    agent = Scripted(world.tmp, {"turns": [{"updates": [chunk(text)], "usage": USAGE}]})
    rec = Recorder()
    mention = world.message(world.owner, "write a long essay")
    async with BuzzPlugin(world.config(agent_args=agent.args), on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(mention)
        split = await rec.kind("reply_split")
        parts = split.payload["parts"]
        await rec.kind("reply_published", len(parts))
    refused = rec.of("reply_failed")[0].payload["refusals"][world.relay.url]
    assert "exceeds" in refused
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert sorted(r.id for r in replies) == sorted(parts)
    ordered = sorted(replies, key=lambda r: r.created_at)
    total = len(ordered)
    assert total >= 2
    bodies = []
    for k, reply in enumerate(ordered, start=1):
        head, body = reply.content.split("\n", 1)
        assert head == f"[{k}/{total}]"
        assert len(reply.to_json().encode()) < 65_536
        assert nip10.thread_ref(reply).root == mention.id
        bodies.append(body)
    assert "".join(bodies) == text


async def test_a_failed_turn_reports_why_and_a_dead_letter_gets_a_notice(world: World) -> None:
    rec = Recorder()
    config = world.config("--crash-on", "CRASH", max_attempts=1)
    doomed = world.message(world.owner, "CRASH please")
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(doomed)
        failed = await rec.kind("turn_failed")
        await rec.kind("event_dead_lettered")
        await rec.kind("reply_published")
    assert failed.payload["error"] and failed.payload["terminalEvidence"] == "agent_exit"
    assert world.agent.hex not in str(failed.payload)
    [notice] = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert nip10.thread_ref(notice).root == doomed.id
    assert "could not answer" in notice.content
    assert _db_counts(world.tmp / "state") == (0, 0)


async def test_a_turn_cut_off_by_a_close_runs_again_and_is_answered_once(world: World) -> None:
    rec = Recorder()
    mention = world.message(world.owner, "slow work")
    async with BuzzPlugin(world.config("--delay", "30"), on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(mention)
        await rec.kind("prompt_context_delivery")
    # Closed mid-turn: nothing was published, the event is still queued.
    assert _db_counts(world.tmp / "state") == (1, 0)
    rec2 = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec2):
        await rec2.kind("reply_published")
        await rec2.kind("metric_published")
    assert [r.payload["triggeringEventIds"] for r in rec2.of("turn_started")] == [[mention.id]]
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert len(replies) == 1 and len(await world.metrics()) == 1


async def test_a_private_answer_is_stored_as_its_wraps_and_delivered_after_a_restart(
    world: World,
) -> None:
    import time

    from nostr_buzz.nips import nip17, nip59

    port = free_port()
    dead = f"ws://127.0.0.1:{port}"
    config = world.config(write_relays=(dead,))
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    now = int(time.time())
    message = nip17.message(owner, [agent], "privately: status?", created_at=now)
    rec = Recorder()
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        for _, wrap in nip17.wrap_for_room(world.owner, message, now=now):
            await plugin.handle_event(wrap)
        await rec.kind("turn_completed")
        failed = await rec.kind("reply_failed")
        # The answer's two wraps (to the owner, the agent's own copy) and the metric.
        assert _db_counts(world.tmp / "state") == (0, 3)
    assert failed.payload["private"] is True and failed.payload["inReplyTo"] == message.id
    assert "privately" not in str(rec.records)  # never the text

    async with local_relay(port=port) as write_relay:
        rec2 = Recorder()
        async with BuzzPlugin(config, on_diagnostic=rec2):
            published = await rec2.kind("reply_published", timeout=WAIT)
            await rec2.kind("metric_published", timeout=WAIT)
            # The agent's own copy is reported only when it fails: wait for its row to go.
            deadline = time.monotonic() + WAIT
            while _db_counts(world.tmp / "state")[1] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        assert rec2.of("turn_started") == []
        assert published.payload["private"] is True
        there = World(write_relay, world.owner, world.agent, world.human, world.tmp)
        wraps = await there.query({"kinds": [1059], "#p": [owner]})
        [opened] = [nip59.open_gift_wrap(world.owner, w) for w in wraps]
        assert opened.sender == agent and nip17.replied_to(opened.rumor) == message.id
    assert _db_counts(world.tmp / "state") == (0, 0)


async def test_when_a_relay_comes_back_what_waits_is_sent_without_waiting_out_the_backoff(
    world: World,
) -> None:
    port = free_port()
    config = world.config(write_relays=(f"ws://127.0.0.1:{port}",))
    rec = Recorder()
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(world.message(world.owner, "answer me"))
        await rec.kind("reply_failed")
        await rec.kind("turn_completed")
        assert plugin.store is not None and plugin.delivery is not None
        now = time.time()
        assert all(e.next_attempt > now for e in plugin.store.outbox.entries())  # backing off
        async with local_relay(port=port):
            plugin.delivery.nudge()  # what a reconnect of the relay does
            nudged = await rec.kind("outbox_nudged")
            await rec.kind("reply_published")
            await rec.kind("metric_published")
    assert nudged.payload["waiting"] == 2
