"""Delivery to every relay, not to the fastest: a real ``buzz run`` with two real relays on
127.0.0.1, one reached straight and one behind a front that delays every byte by 0.25 s each
way (tests/support/wan.py), so it answers every OK and EOSE 0.5 s after the other.

Over 6 turns, every reply and every metric is also on the slower, honest relay — counted
there, by asking that relay itself — exactly once per mention and per turn; the outbox holds
nothing once the relays have them; and the slower relay is never backed off for being second
(a ``relay_backing_off`` naming it may only say it was left behind by a read, which delivery
ignores).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from nostr_buzz.bot.state import STATE_DB
from nostr_buzz.event import Event
from tests.support.fault_harness import Cast, Counter44200, mention, publish, start_bot
from tests.support.relays import free_port, local_relay, start_relay
from tests.support.wan import Front

WAIT = 30.0
TURNS = 6
#: Each way: the slower relay answers 0.5 s after the other.
LAG = 0.25


async def _counted(
    counter: Counter44200, posted: list[Event], deadline: float, turns: int = TURNS
) -> str:
    """Wait (bounded) until the relay holds a reply and a metric for every mention, each
    once; the tally."""
    while True:
        tally = await counter.tally(posted)
        if tally.ok and tally.replies == turns and tally.turns == turns:
            return tally.summary()
        if time.monotonic() >= deadline:
            raise AssertionError(f"on the slower relay: {tally.summary()}")
        await asyncio.sleep(0.5)


async def test_every_reply_and_metric_also_reaches_the_slower_honest_relay(tmp_path: Path) -> None:
    cast = Cast.generate()
    state = tmp_path / "state"
    async with local_relay() as fast, local_relay() as honest:
        front = await Front(int(honest.url.rsplit(":", 1)[1]), delay=LAG).start()
        slow = f"ws://127.0.0.1:{front.port}"
        try:
            bot, tail = await start_bot(tmp_path, cast, [fast.url, slow])
            try:
                posted: list[Event] = []
                for n in range(TURNS):
                    task = mention(cast, cast.owner, f"task {n}", channel="eng")
                    mark = tail.mark()
                    await publish([fast.url, honest.url], [task])
                    posted.append(task)
                    await tail.next_record(
                        lambda r: r["kind"] == "metric_published", WAIT, f"metric {n}", mark
                    )
                # Counted on the honest relay itself (straight, not through the front).
                on_honest = Counter44200(cast, [honest.url])
                summary = await _counted(on_honest, posted, time.monotonic() + WAIT)
                on_fast = await Counter44200(cast, [fast.url]).tally(posted)
                assert on_fast.ok and on_fast.replies == TURNS, on_fast.summary()
                # Nothing owed once every relay has everything (the outbox's per-relay rows).
                deadline = time.monotonic() + WAIT
                while _waiting(state) and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                assert _waiting(state) == 0, summary
            finally:
                await bot.stop()
        finally:
            await front.close()
    backoffs = [
        r["payload"] for r in tail.of("relay_backing_off") if r["payload"].get("relay") == slow
    ]
    # Slower than the other is no failure: never backed off for delivery.
    assert all(b.get("scope") == "reads" for b in backoffs), backoffs
    assert tail.of("outbox_given_up") == []


def _waiting(state: Path) -> int:
    """Outbox entries some relay still has to take."""
    with sqlite3.connect(state / STATE_DB) as db:
        return int(db.execute("SELECT count(*) FROM outbox").fetchone()[0])


async def test_what_a_relay_down_is_owed_survives_a_sigkill_and_reaches_it_once(
    tmp_path: Path,
) -> None:
    """One write relay is down while the bot answers 3 mentions; the bot is SIGKILLed with the
    replies and metrics still owed to it; the relay comes up and the bot starts again: it
    sends each of them there, exactly one reply per mention and one metric per turn, and
    nothing to the relay that already had them is ever a second reply or metric."""
    cast = Cast.generate()
    state = tmp_path / "state"
    port = free_port()
    down = f"ws://127.0.0.1:{port}"
    turns = 3
    async with local_relay() as up:
        bot, tail = await start_bot(tmp_path, cast, [up.url, down])
        posted: list[Event] = []
        try:
            for n in range(turns):
                task = mention(cast, cast.owner, f"task {n}", channel=f"c{n}")
                mark = tail.mark()
                await publish([up.url], [task])
                posted.append(task)
                await tail.next_record(
                    lambda r: r["kind"] == "metric_published", WAIT, f"metric {n}", mark
                )
            assert _waiting(state) == 2 * turns  # each reply and metric, owed to the relay down
            await bot.kill()
            revived = await start_relay(port=port)
            try:
                await bot.start()
                on_revived = Counter44200(cast, [revived.url])
                await _counted(on_revived, posted, time.monotonic() + WAIT, turns)
                deadline = time.monotonic() + WAIT
                while _waiting(state) and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                assert _waiting(state) == 0
                on_up = await Counter44200(cast, [up.url]).tally(posted)
                assert on_up.ok and (on_up.replies, on_up.turns) == (turns, turns), on_up.summary()
            finally:
                await bot.stop()
                revived.stop()
        finally:
            if bot.running:
                await bot.stop()
