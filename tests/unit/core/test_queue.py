"""Dispatch queue (docs/queue.md): one test per rule, a random-operation state machine, then the
conformance cases written from the text alone, with a reference model driven side by side."""

from __future__ import annotations

import ast
import collections
import json
import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import nostr_buzz.core.queue as queue_module
from nostr_buzz.core.queue import (
    REMEMBERED_IDS,
    Batch,
    DeadLetter,
    DispatchQueue,
    PushResult,
    QueuedEvent,
)
from nostr_buzz.errors import BuzzError, QueueError
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from tests.support.events import chat
from tests.support.keys import ALICE, BOB, CAROL, OWNER

AUX = b"\x00" * 32
ROOT_1 = "a1" * 32
ROOT_2 = "b2" * 32
ROOM = "room"


def ids(items: list[QueuedEvent]) -> list[str]:
    return [q.event.id for q in items]


class CountingRng:
    """A seeded ``random.Random`` that records every ``uniform`` draw."""

    def __init__(self, seed: int = 7) -> None:
        self.inner = random.Random(seed)
        self.draws: list[float] = []

    def uniform(self, a: float, b: float) -> float:
        assert (a, b) == (0.8, 1.2)
        value = self.inner.uniform(a, b)
        self.draws.append(value)
        return value


def plain(b: Batch | None) -> Any:
    """A batch's contents, for comparing batches of two runs (batches compare by identity)."""
    if b is None:
        return None
    return (b.channel, b.events, b.cancelled_events, b.cancel_reason, b.attempt)


def flush(q: DispatchQueue, now: float) -> Batch:
    b = q.flush_next(now)
    assert b is not None
    return b


# --- routing and batching -------------------------------------------------------------------


def test_two_actors_in_one_thread_are_two_batches() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a, b = chat(ALICE, 10, thread=ROOT_1), chat(BOB, 11, thread=ROOT_1)
    q.push(a, now=1)
    q.push(b, now=2)
    first = flush(q, 3)
    assert ids(first.events) == [a.id] and first.attempt == 1 and first.channel == ROOM
    assert q.in_flight(ROOM)
    assert q.flush_next(3) is None  # one batch per channel in flight
    q.complete(first)
    assert not q.in_flight(ROOM)
    assert ids(flush(q, 4).events) == [b.id]


def test_one_actor_in_two_threads_is_two_batches() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a, b = chat(ALICE, 10, thread=ROOT_1), chat(ALICE, 11, thread=ROOT_2)
    q.push(a, now=1)
    q.push(b, now=2)
    first = flush(q, 3)
    q.complete(first)
    assert [ids(first.events), ids(flush(q, 4).events)] == [[a.id], [b.id]]


def test_two_top_level_messages_are_two_batches() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a, b = chat(ALICE, 10), chat(ALICE, 11)
    q.push(a, now=1)
    q.push(b, now=2)
    first = flush(q, 3)
    q.complete(first)
    assert [ids(first.events), ids(flush(q, 4).events)] == [[a.id], [b.id]]


def test_a_reply_burst_is_one_batch_ordered_by_created_at_stably() -> None:
    q = DispatchQueue(rng=random.Random(1))
    # Pushed out of created_at order; two share created_at 20 and keep push order.
    burst = [
        chat(ALICE, 30, thread=ROOT_1),
        chat(ALICE, 20, thread=ROOT_1, content="x"),
        chat(ALICE, 10, thread=ROOT_1),
        chat(ALICE, 20, thread=ROOT_1, content="y"),
    ]
    for i, ev in enumerate(burst):
        q.push(ev, prompt_tag="@reply", now=i)
    b = flush(q, 10)
    assert ids(b.events) == [burst[2].id, burst[1].id, burst[3].id, burst[0].id]
    assert [e.prompt_tag for e in b.events] == ["@reply"] * 4
    assert [e.received_at for e in b.events] == [2, 1, 3, 0]
    assert b.cancelled_events == [] and b.cancel_reason is None
    assert q.pending(ROOM) == 0


def test_only_the_contiguous_prefix_with_the_heads_key_is_taken() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a1, a2 = chat(ALICE, 1, thread=ROOT_1), chat(ALICE, 2, thread=ROOT_1)
    b1, a3 = chat(BOB, 3, thread=ROOT_1), chat(ALICE, 4, thread=ROOT_1)
    for i, ev in enumerate([a1, a2, b1, a3]):
        q.push(ev, now=i)
    got = []
    for t in range(3):
        batch = flush(q, 10 + t)
        got.append(ids(batch.events))
        q.complete(batch)
    assert got == [[a1.id, a2.id], [b1.id], [a3.id]]
    assert q.flush_next(20) is None


def test_channels_run_concurrently_and_the_longest_waiting_goes_first() -> None:
    q = DispatchQueue(rng=random.Random(1))
    # Received order decides, not created_at and not channel name.
    x = chat(ALICE, 50, channel="zeta")
    y = chat(ALICE, 10, channel="alpha")
    z = chat(BOB, 5, channel="mid")
    q.push(x, now=1.0)
    q.push(y, now=2.0)
    q.push(z, now=2.0)  # same received_at as y: push order breaks the tie
    order = [flush(q, 5).channel for _ in range(3)]
    assert order == ["zeta", "alpha", "mid"]
    assert all(q.in_flight(c) for c in order)
    assert q.flush_next(6) is None


def test_a_channels_wait_is_its_head_events_receipt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(chat(ALICE, 1, channel="one"), now=1)
    q.push(chat(BOB, 2, channel="one"), now=10)
    q.push(chat(ALICE, 3, channel="two"), now=5)
    assert [flush(q, 11).channel, flush(q, 11).channel] == ["one", "two"]


def test_a_later_received_head_waits_behind_an_earlier_one() -> None:
    q = DispatchQueue(rng=random.Random(1))
    late = chat(ALICE, 1, channel="late")
    early = chat(ALICE, 2, channel="early")
    q.push(late, now=9)
    q.push(early, now=3)  # callers may report an earlier receive time
    assert flush(q, 10).channel == "early"


# --- limits ---------------------------------------------------------------------------------


def test_the_cap_drops_the_earliest_received_pending_event_and_reports_it() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(1))
    events = [chat(ALICE, i, thread=ROOT_1) for i in range(4)]
    results = [q.push(ev, now=10 + i) for i, ev in enumerate(events)]
    assert results[:3] == [PushResult(True, False, [])] * 3
    assert results[3] == PushResult(accepted=True, duplicate=False, dropped=[events[0].id])
    assert q.pending(ROOM) == 3
    # The dropped event is gone: the batch holds the three others.
    assert ids(flush(q, 20).events) == [e.id for e in events[1:]]


def test_the_cap_ties_are_broken_by_push_order() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(1))
    a, b, c = chat(ALICE, 1), chat(BOB, 2), chat(CAROL, 3)
    q.push(a, now=5)
    q.push(b, now=5)
    assert q.push(c, now=5).dropped == [a.id]


def test_events_returned_by_fail_may_exceed_the_cap_until_the_next_push() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(1))
    a1, a2 = chat(ALICE, 1, thread=ROOT_1), chat(ALICE, 2, thread=ROOT_1)
    q.push(a1, now=1)
    q.push(a2, now=2)
    batch = flush(q, 3)
    b1, b2 = chat(BOB, 4), chat(BOB, 5)
    q.push(b1, now=4)
    q.push(b2, now=5)
    assert q.fail(batch, 6) is None
    assert q.pending(ROOM) == 4
    late = chat(CAROL, 6)
    r = q.push(late, now=7)
    # Back to the cap: the three earliest received go, in the order they were received.
    assert r == PushResult(True, False, [a1.id, a2.id, b1.id])
    assert q.pending(ROOM) == 2


# --- duplicates -----------------------------------------------------------------------------


def _is_duplicate(q: DispatchQueue, ev: Event, now: float = 1000) -> bool:
    r = q.push(ev, now=now)
    if r.duplicate:
        assert r == PushResult(accepted=False, duplicate=True, dropped=[])
    return r.duplicate


def test_a_duplicate_is_pending_in_flight_stored_delivered_or_dead_lettered() -> None:
    q = DispatchQueue(max_attempts=1, rng=random.Random(1))
    pending, flying, stored = (
        chat(ALICE, 1),
        chat(ALICE, 2, channel="f"),
        chat(ALICE, 3, channel="s"),
    )
    q.push(pending, now=100)  # received last: flushed last
    assert _is_duplicate(q, pending)
    assert q.pending(ROOM) == 1  # not queued twice
    q.push(flying, now=0)
    b = flush(q, 2)
    assert b.channel == "f" and _is_duplicate(q, flying)
    q.push(stored, now=0.5)
    s = flush(q, 3)
    q.requeue_cancelled(s, "interrupt")
    assert _is_duplicate(q, stored)
    # Riding with a new batch as cancelled events: still in flight.
    fresh = chat(BOB, 4, channel="s")
    q.push(fresh, now=4)
    carry = flush(q, 5)
    assert carry.channel == "s" and ids(carry.cancelled_events) == [stored.id]
    assert _is_duplicate(q, stored) and _is_duplicate(q, fresh)
    q.complete(carry)
    assert _is_duplicate(q, stored) and _is_duplicate(q, fresh)  # delivered
    q.complete(b)
    assert _is_duplicate(q, flying)
    dead = q.fail(flush(q, 6), 7)  # max_attempts=1: the first failure dead-letters
    assert isinstance(dead, DeadLetter) and ids(dead.events) == [pending.id]
    assert _is_duplicate(q, pending)


def test_the_last_10000_settled_ids_are_remembered() -> None:
    n = REMEMBERED_IDS + 1
    q = DispatchQueue(max_batch=n, max_pending=n, rng=random.Random(1))
    events = [chat(ALICE, i, thread=ROOT_1) for i in range(n)]
    for ev in events:
        q.push(ev, now=0)
    q.complete(flush(q, 1))
    assert not _is_duplicate(q, events[0])  # forgotten: it was the oldest of 10,001
    assert _is_duplicate(q, events[1])


def test_a_dropped_event_is_not_remembered() -> None:
    # Choice: docs/queue.md's duplicate memory does not hold dropped events.
    q = DispatchQueue(max_pending=1, rng=random.Random(1))
    a, b = chat(ALICE, 1), chat(ALICE, 2)
    q.push(a, now=1)
    assert q.push(b, now=2).dropped == [a.id]
    assert q.push(a, now=3) == PushResult(True, False, [b.id])


# --- failure: backoff and dead letter -------------------------------------------------------


def test_backoff_delay_is_exponential_capped_and_jittered_with_one_draw_per_fail() -> None:
    rng = CountingRng(3)
    q = DispatchQueue(max_attempts=20, rng=rng)
    a = chat(ALICE, 1)
    q.push(a, now=0)
    now = 0.0
    for attempt in range(1, 12):
        b = flush(q, now)
        assert b.attempt == attempt and ids(b.events) == [a.id]
        assert q.fail(b, now) is None
        assert len(rng.draws) == attempt
        delay = min(5 * 2 ** (attempt - 1), 300) * rng.draws[-1]
        base = min(5 * 2 ** (attempt - 1), 300)
        assert 0.8 * base <= delay <= 1.2 * base
        assert not q.in_flight(ROOM)
        # Not flushed before now + delay; flushed at it.
        assert q.flush_next(now + delay - 1e-6) is None
        now += delay
    assert len(rng.draws) == 11
    # A stale fail draws nothing.
    b = flush(q, now)
    q.complete(b)
    assert q.fail(b, now) is None and len(rng.draws) == 11


def test_backoff_bounds_hold_for_many_seeds() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        q = DispatchQueue(rng=rng)
        q.push(chat(ALICE, 1), now=0)
        assert q.fail(flush(q, 0), 100) is None
        # Attempt 1: 5 s × [0.8, 1.2].
        assert q.flush_next(100 + 4 - 1e-9) is None
        assert q.flush_next(100 + 6) is not None


def test_a_dead_letter_carries_the_cancelled_events() -> None:
    q = DispatchQueue(max_attempts=2, rng=random.Random(1))
    old, new = chat(ALICE, 1), chat(BOB, 2)
    q.push(old, now=0)
    q.requeue_cancelled(flush(q, 0), "steer")
    q.push(new, now=1)
    q.fail(flush(q, 1), 1)
    b = flush(q, 100)
    assert b.attempt == 2 and ids(b.cancelled_events) == [old.id]
    dead = q.fail(b, 100)
    assert dead is not None
    assert (ids(dead.events), ids(dead.cancelled_events), dead.attempts) == ([new.id], [old.id], 2)
    assert _is_duplicate(q, old) and _is_duplicate(q, new)


def test_a_failed_batch_is_retried_with_exactly_its_events_at_the_front() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a1, a2 = chat(ALICE, 2, thread=ROOT_1), chat(ALICE, 1, thread=ROOT_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    assert ids(b.events) == [a2.id, a1.id]
    a3 = chat(ALICE, 3, thread=ROOT_1)  # same authority key, pushed meanwhile
    q.push(a3, now=3)
    q.fail(b, 4)
    retry = flush(q, 100)
    assert ids(retry.events) == [a2.id, a1.id] and retry.attempt == 2
    q.complete(retry)
    after = flush(q, 101)
    assert ids(after.events) == [a3.id] and after.attempt == 1


def test_the_count_is_dropped_when_the_returned_set_loses_an_event() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(1))
    a1, a2 = chat(ALICE, 1, thread=ROOT_1), chat(ALICE, 2, thread=ROOT_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    q.fail(b, 2)
    assert flush(q, 100).attempt == 2  # the set kept its count...
    q2 = DispatchQueue(max_pending=3, rng=random.Random(1))
    q2.push(a1, now=0)
    q2.push(a2, now=1)
    q2.fail(flush(q2, 2), 2)
    a3, a4 = chat(ALICE, 3, thread=ROOT_1), chat(ALICE, 4, thread=ROOT_1)
    q2.push(a3, now=3)
    assert q2.push(a4, now=4).dropped == [a1.id]  # ...until it loses one
    merged = flush(q2, 100)
    # No longer that set: a fresh batch by the prefix rule, attempt 1.
    assert ids(merged.events) == [a2.id, a3.id, a4.id] and merged.attempt == 1


# --- deadline -------------------------------------------------------------------------------


def test_expiry_returns_cancelled_events_to_the_stored_ones() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(1))
    old, new = chat(ALICE, 1), chat(BOB, 2)
    q.push(old, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    q.push(new, now=1)
    b = flush(q, 1)
    again = flush(q, 102)
    assert (ids(again.events), ids(again.cancelled_events), again.cancel_reason) == (
        ids(b.events),
        ids(b.cancelled_events),
        "interrupt",
    )


def test_an_injected_steer_restarts_the_deadline() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(1))
    q.push(chat(ALICE, 1), now=0)
    running = flush(q, 0)
    steer = chat(ALICE, 2)
    q.push(steer, now=90)
    got = q.steer_result(steer.id, "injected", 90)
    assert got is not None and got.event == steer
    assert q.pending(ROOM) == 0
    assert q.flush_next(150) is None  # 150 − 0 > 100, but the clock restarted at 90
    assert q.flush_next(190) is None
    again = q.flush_next(190.5)
    assert again is not None and again.events == running.events


def test_a_started_new_turn_steer_does_not_restart_the_deadline() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(1))
    q.push(chat(ALICE, 1), now=0)
    flush(q, 0)
    steer = chat(ALICE, 2)
    q.push(steer, now=90)
    assert q.steer_result(steer.id, "started_new_turn", 90) is not None
    assert q.pending(ROOM) == 0
    assert q.flush_next(101) is not None  # expired on the original clock


# --- steer results --------------------------------------------------------------------------


def test_a_failed_steer_leaves_the_event_pending() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(chat(ALICE, 1), now=0)
    b = flush(q, 0)
    steer = chat(ALICE, 2)
    q.push(steer, now=1)
    assert q.steer_result(steer.id, "failed", 2) is not None
    assert q.pending(ROOM) == 1
    q.complete(b)
    assert ids(flush(q, 3).events) == [steer.id]


# --- cancel and interrupt -------------------------------------------------------------------


def test_stored_cancelled_events_are_redispatched_whole_when_nothing_is_pending() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(1))
    # Three actors, two batches: more than max_batch stored cancelled events in the end.
    a, b, c = chat(ALICE, 30), chat(BOB, 10), chat(CAROL, 20, thread=ROOT_1)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "steer")
    q.push(b, now=1)
    q.push(c, now=1)
    second = flush(q, 1)
    assert ids(second.events) == [b.id]
    q.requeue_cancelled(second, "interrupt")
    third = flush(q, 2)
    assert ids(third.events) == [c.id]
    q.requeue_cancelled(third, "interrupt")
    assert q.pending(ROOM) == 0
    whole = flush(q, 3)
    assert ids(whole.events) == [b.id, c.id, a.id]  # by created_at, beyond max_batch
    assert whole.cancelled_events == [] and whole.cancel_reason == "interrupt"
    assert whole.attempt == 1
    # Failing returns them to the stored events as a whole, with their count.
    assert q.fail(whole, 3) is None
    assert q.pending(ROOM) == 0
    retry = flush(q, 400)
    assert ids(retry.events) == ids(whole.events) and retry.attempt == 2
    assert retry.cancel_reason == "interrupt"
    q.complete(retry)
    for ev in (a, b, c):
        assert _is_duplicate(q, ev)


def test_a_channel_with_only_stored_events_waits_since_their_earliest_receipt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a1, a2 = chat(ALICE, 1, channel="stored"), chat(BOB, 2, channel="stored")
    q.push(a1, now=5)
    q.requeue_cancelled(flush(q, 5), "interrupt")
    q.push(a2, now=2)  # reported as received earlier than a1
    q.requeue_cancelled(flush(q, 6), "interrupt")
    assert q.pending("stored") == 0
    q.push(chat(ALICE, 3, channel="fresh"), now=3)
    # Stored a1 (received 5) and a2 (received 2): the channel waits since 2, before "fresh".
    whole = flush(q, 7)
    assert whole.channel == "stored" and ids(whole.events) == [a1.id, a2.id]
    assert flush(q, 7).channel == "fresh"


def test_a_channel_with_pending_events_waits_since_its_head_not_its_stored_events() -> None:
    # Choice: with a new event pending, the head pending event sets the channel's wait.
    q = DispatchQueue(rng=random.Random(1))
    old = chat(ALICE, 1, channel="stored")
    q.push(old, now=1)
    q.requeue_cancelled(flush(q, 1), "interrupt")
    q.push(chat(ALICE, 2, channel="fresh"), now=4)
    q.push(chat(BOB, 3, channel="stored"), now=5)
    assert flush(q, 6).channel == "fresh"
    carry = flush(q, 6)
    assert carry.channel == "stored" and ids(carry.cancelled_events) == [old.id]


def test_a_bad_cancel_reason_raises_queue_error() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(chat(ALICE, 1), now=0)
    b = flush(q, 0)
    for bad in ("cancel", "Interrupt", "", None):
        with pytest.raises(QueueError):
            q.requeue_cancelled(b, bad)  # type: ignore[arg-type]
    assert q.in_flight(ROOM)
    with pytest.raises(QueueError):
        q.complete("not a batch")  # type: ignore[arg-type]


# --- stale batches --------------------------------------------------------------------------


def test_operations_on_a_settled_batch_do_nothing_and_return_none() -> None:
    rng = CountingRng()
    q = DispatchQueue(rng=rng)
    a = chat(ALICE, 1)
    q.push(a, now=0)
    b = flush(q, 0)
    q.complete(b)
    q.push(chat(ALICE, 2), now=1)
    live = flush(q, 1)
    # b equals nothing in flight; even an equal-looking copy of the live batch is stale.
    copy = Batch(live.channel, list(live.events), [], None, live.attempt)
    assert plain(copy) == plain(live) and copy != live and len({copy, live}) == 2
    for stale in (b, copy):
        assert q.complete(stale) is None
        assert q.fail(stale, 2) is None
        assert q.requeue_cancelled(stale, "steer") is None
    assert rng.draws == [] and q.in_flight(ROOM)
    q.complete(live)
    assert q.fail(live, 3) is None and rng.draws == []


def test_mutating_a_batchs_lists_does_not_change_the_queue() -> None:
    q = DispatchQueue(max_attempts=2, rng=random.Random(1))
    a = chat(ALICE, 1)
    q.push(a, now=0)
    b = flush(q, 0)
    b.events.clear()
    q.fail(b, 0)
    retry = flush(q, 100)
    assert ids(retry.events) == [a.id]
    retry.events.append(retry.events[0])
    dead = q.fail(retry, 100)
    assert dead is not None and ids(dead.events) == [a.id]


# --- snapshot and restore -------------------------------------------------------------------


def _script_events() -> list[Event]:
    return [
        chat(ALICE, 1, thread=ROOT_1),
        chat(ALICE, 2, thread=ROOT_1),
        chat(BOB, 3, thread=ROOT_1),
        chat(ALICE, 4, channel="other"),
        chat(CAROL, 5, channel=None, kind=1),
        chat(BOB, 6, thread=ROOT_2),
        chat(ALICE, 7, thread=ROOT_2),
    ]


def _continue(q: DispatchQueue, events: list[Event]) -> list[Any]:
    """A fixed run of operations; returns everything the queue answered."""
    out: list[Any] = []
    now = 1000.0
    for i, ev in enumerate(events):
        out.append(q.push(ev, now=now + i))
    for step in range(12):
        now += 50
        b = q.flush_next(now)
        out.append(plain(b))
        if b is None:
            continue
        if step % 3 == 0:
            out.append(q.fail(b, now))
        elif step % 3 == 1:
            out.append(q.requeue_cancelled(b, "interrupt"))
        else:
            out.append(q.complete(b))
    out.append([q.pending(c) for c in (ROOM, "other", "late")])
    out.append(q.snapshot())
    return out


def _build_state(rng: random.Random) -> DispatchQueue:
    q = DispatchQueue(max_batch=3, max_pending=20, deadline=500, rng=rng)
    evs = _script_events()
    for i, ev in enumerate(evs):
        q.push(ev, now=i)
    q.fail(flush(q, 10), 10)  # ROOM backs off
    q.requeue_cancelled(flush(q, 11), "steer")  # "other" stores cancelled events
    q.complete(flush(q, 12))  # dm channel delivered
    return q


def test_restore_after_snapshot_behaves_identically() -> None:
    q = _build_state(random.Random(42))
    assert not any(q.in_flight(c) for c in (ROOM, "other"))
    data = q.snapshot()
    json.loads(data)  # it is JSON
    state = q._rng.getstate()  # type: ignore[attr-defined]
    clone_rng = random.Random()
    clone_rng.setstate(state)
    restored = DispatchQueue.restore(data, rng=clone_rng, max_batch=3, max_pending=20, deadline=500)
    assert restored.snapshot() == data
    more = [
        chat(ALICE, 8, thread=ROOT_1),
        chat(BOB, 9, channel="late"),
        chat(CAROL, 5, channel=None, kind=1),
    ]
    assert _continue(q, more) == _continue(restored, more)


def test_restore_returns_in_flight_batches_to_the_front_without_counting_an_attempt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    old, a1, a2, later = chat(CAROL, 1), chat(ALICE, 2), chat(ALICE, 3), chat(BOB, 4)
    q.push(old, now=0)
    q.requeue_cancelled(flush(q, 0), "steer")
    q.push(a1, now=1)
    q.fail(flush(q, 1), 1)
    running = flush(q, 100)
    assert running.attempt == 2 and ids(running.cancelled_events) == [old.id]
    q.push(later, now=101)
    q.push(a2, now=102)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(1))
    assert not r.in_flight(ROOM) and r.pending(ROOM) == 3
    again = flush(r, 103)
    # Same events, same cancelled events and reason, same attempt.
    assert plain(again) == plain(running)
    assert _is_duplicate(r, old) and _is_duplicate(r, a1)
    # The original, once the batch expires, gives the same batch.
    assert plain(flush(q, 100 + 7300 + 1)) == plain(again)


def test_restore_keeps_a_redispatched_set_and_its_count() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a = chat(ALICE, 1)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    q.fail(flush(q, 1), 1)
    running = flush(q, 100)
    assert running.attempt == 2 and running.cancel_reason == "interrupt"
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(1))
    assert r.pending(ROOM) == 0
    assert plain(flush(r, 100)) == plain(running)


def test_restore_remembers_delivered_ids() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a = chat(ALICE, 1)
    q.push(a, now=0)
    q.complete(flush(q, 0))
    r = DispatchQueue.restore(q.snapshot())
    assert _is_duplicate(r, a)
    from_text = DispatchQueue.restore(q.snapshot().decode("utf-8"))  # str is accepted too
    assert _is_duplicate(from_text, a)


def _corruptions() -> Iterator[tuple[str, Any]]:
    q = _build_state(random.Random(1))
    flush(q, 5000)
    good = json.loads(q.snapshot())
    assert good["channels"] and good["remembered"]

    def mutated(fn: Any) -> bytes:
        doc = json.loads(json.dumps(good))
        fn(doc)
        return json.dumps(doc).encode()

    ch0 = good["channels"][0]
    assert ch0["pending"] or ch0["cancelled"]
    entries_key = "pending" if ch0["pending"] else "cancelled"

    def first_entry(doc: Any) -> Any:
        return doc["channels"][0][entries_key][0]

    yield "empty", b""
    yield "not json", b"{nope"
    yield "not utf-8", b'{"version":1,\xff}'
    yield "a list", b"[]"
    yield "not bytes", 12
    yield "lone surrogate", '{"version":"\ud800"}'
    yield "truncated", q.snapshot()[:-7]
    yield "version", mutated(lambda d: d.update(version=2))
    yield "unknown field", mutated(lambda d: d.update(extra=1))
    yield "missing field", mutated(lambda d: d.pop("channels"))
    yield "negative seq", mutated(lambda d: d.update(next_seq=-1))
    yield "content", mutated(lambda d: first_entry(d)["event"].update(content="tampered"))
    yield "sig", mutated(lambda d: first_entry(d)["event"].update(sig="00" * 64))
    yield "id", mutated(lambda d: first_entry(d)["event"].update(id="00" * 32))
    yield "event type", mutated(lambda d: first_entry(d).update(event="x"))
    yield "received_at", mutated(lambda d: first_entry(d).update(received_at="soon"))
    yield "received_at inf", mutated(lambda d: first_entry(d).update(received_at=1e999))
    yield "bool seq", mutated(lambda d: first_entry(d).update(seq=True))
    yield "seq beyond", mutated(lambda d: first_entry(d).update(seq=10**6))
    yield "wrong channel", mutated(lambda d: d["channels"][0].update(name="elsewhere"))
    yield "twice", mutated(lambda d: d["channels"].append(d["channels"][0]))
    yield (
        "dup entry",
        mutated(lambda d: d["channels"][0][entries_key].append(d["channels"][0][entries_key][0])),
    )
    yield "reason", mutated(lambda d: d["channels"][0].update(cancel_reason="cancel"))
    yield "retry size", mutated(lambda d: d["channels"][0].update(retry_size=99))
    yield "retry count", mutated(lambda d: d["channels"][0].update(retry_count=-1))
    yield "orphan count", mutated(lambda d: d["channels"][0].update(retry_size=0, retry_count=3))
    yield "remembered", mutated(lambda d: d["remembered"].append("zz"))
    yield (
        "remembered live",
        mutated(lambda d: d["remembered"].append(first_entry(d)["event"]["id"])),
    )
    yield "remembered twice", mutated(lambda d: d["remembered"].append(d["remembered"][0]))
    yield (
        "empty channel",
        mutated(
            lambda d: d["channels"].append(
                {
                    "name": "void",
                    "pending": [],
                    "retry_size": 0,
                    "retry_count": 0,
                    "cancelled": [],
                    "cancel_reason": None,
                    "cancelled_count": 0,
                    "backoff_until": None,
                }
            )
        ),
    )
    yield "deep", b"[" * 100_000


def test_corrupt_snapshots_raise_queue_error() -> None:
    seen = set()
    for name, data in _corruptions():
        seen.add(name)
        with pytest.raises(QueueError) as info:
            DispatchQueue.restore(data, rng=random.Random(1))
        assert isinstance(info.value, BuzzError), name
    assert len(seen) >= 30


def test_byte_flips_in_a_snapshot_never_raise_anything_but_queue_error() -> None:
    q = _build_state(random.Random(1))
    data = q.snapshot()
    rng = random.Random(99)
    ok = 0
    for _ in range(300):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            DispatchQueue.restore(bytes(buf), rng=random.Random(1))
            ok += 1
        except QueueError:
            pass
    assert ok < 300


def test_bad_limits_and_arguments_raise_queue_error() -> None:
    for kwargs in (
        {"max_batch": 0},
        {"max_pending": 0},
        {"max_attempts": 0},
        {"deadline": -1},
        {"deadline": float("nan")},
        {"max_batch": True},
    ):
        with pytest.raises(QueueError):
            DispatchQueue(**kwargs)
    q = DispatchQueue(rng=random.Random(1))
    with pytest.raises(QueueError):
        q.push(chat(ALICE, 1).to_dict(), now=0)  # type: ignore[arg-type]
    with pytest.raises(QueueError):
        q.push(chat(ALICE, 1), now=float("inf"))
    with pytest.raises(QueueError):
        q.flush_next("now")  # type: ignore[arg-type]


def test_the_default_rng_needs_no_seed() -> None:
    q = DispatchQueue()
    q.push(chat(ALICE, 1), now=0)
    assert q.fail(flush(q, 0), 0) is None
    assert q.flush_next(3.9) is None
    assert q.flush_next(6.0) is not None


def test_the_queue_modules_are_pure() -> None:
    modules = sorted(Path(queue_module.__file__).parent.glob("queue*.py"))
    assert len(modules) >= 7  # the queue, its channel, accounts, index, restore, snapshot, types
    for module in modules:
        text = module.read_text(encoding="utf-8")
        imported: set[str] = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        forbidden = {"socket", "asyncio", "subprocess", "time", "datetime", "random", "os"}
        assert not imported & forbidden, module.name
        assert "environ" not in text, module.name


# --- random operations: nothing accepted is ever lost or duplicated -------------------------

_POOL_SIZE = 40


def _pool() -> list[Event]:
    rnd = random.Random(2026)
    keys = [ALICE, BOB, CAROL]
    channels = [ROOM, "side", None]
    threads = [ROOT_1, ROOT_2, None]
    out = []
    for i in range(_POOL_SIZE):
        ch = rnd.choice(channels)
        out.append(
            chat(
                rnd.choice(keys),
                rnd.randrange(20),
                thread=rnd.choice(threads),
                channel=ch,
                kind=9 if ch else 1,
                content=f"pool {i}",
            )
        )
    return out


POOL = _pool()


class QueueModel:
    """A model of where every accepted id is, checked against the queue after each operation.

    It tracks the live batch of each channel (including expiry and steer-restarted deadlines)
    and where accepted ids went; the queue's snapshot shows what the queue itself holds.
    Operations take plain integers so hypothesis and a seeded loop can both drive them.
    """

    LIMITS: ClassVar[dict[str, Any]] = {
        "max_batch": 3,
        "max_pending": 6,
        "max_attempts": 3,
        "deadline": 40,
    }

    def __init__(self) -> None:
        self.rng = CountingRng(1)
        self.q = DispatchQueue(rng=self.rng, **self.LIMITS)
        self.now = 0.0
        self.accepted: set[str] = set()
        self.delivered: set[str] = set()
        self.dead: set[str] = set()
        self.dropped: set[str] = set()
        self.batches: list[Batch] = []  # every batch returned; only some are live
        self.live: dict[str, tuple[Batch, float]] = {}  # channel -> (batch, clock start)
        self.seen: collections.Counter[str] = collections.Counter()

    def _settled(self, ids_: list[str], into: set[str]) -> None:
        for i in ids_:
            assert i not in self.delivered and i not in self.dead
            into.add(i)

    def push(self, k: int, dt: int) -> None:
        self.now += dt
        ev = POOL[k % len(POOL)]
        r = self.q.push(ev, now=self.now - (k % 4))  # receive times not monotonic
        held = ev.id in self.accepted and ev.id not in self.dropped
        assert r.duplicate == held  # held covers delivered and dead-lettered ids too
        if r.duplicate:
            assert not r.accepted and r.dropped == []
            self.seen["duplicate"] += 1
            return
        self.dropped.discard(ev.id)  # a dropped id may come back
        self.accepted.add(ev.id)
        assert r.accepted == (ev.id not in r.dropped)
        for d in r.dropped:
            assert d in self.accepted and d not in self.dropped
            assert d not in self.delivered and d not in self.dead
            self.dropped.add(d)
            self.seen["dropped"] += 1

    def flush(self, dt: int) -> None:
        self.now += dt
        for channel, (_, start) in list(self.live.items()):
            if self.now - start > self.LIMITS["deadline"]:
                del self.live[channel]  # expired
                self.seen["expired"] += 1
        b = self.q.flush_next(self.now)
        if b is None:
            return
        assert b.channel not in self.live  # at most one batch in flight per channel
        assert b.events
        created = [q.event.created_at for q in b.events]
        assert created == sorted(created)
        keys = {(q.event.pubkey, nip10.destination(q.event)) for q in b.events}
        if b.cancel_reason is not None and not b.cancelled_events:
            self.seen["redispatch"] += 1
        else:
            # Not a re-dispatch of cancelled events: one authority key, within max_batch.
            assert len(keys) == 1
            assert len(b.events) <= self.LIMITS["max_batch"]
        if b.cancelled_events:
            self.seen["carried"] += 1
        assert 1 <= b.attempt <= self.LIMITS["max_attempts"]
        self.seen[f"attempt {b.attempt}"] += 1
        self.batches.append(b)
        self.live[b.channel] = (b, self.now)

    def settle(self, pick: int, action: str, stale: bool) -> None:
        # Mostly the live batch of some channel; sometimes any batch ever returned.
        live_ones = sorted((b for b, _ in self.live.values()), key=lambda b: b.channel)
        choices = self.batches if stale or not live_ones else live_ones
        if not choices:
            return
        b = choices[pick % len(choices)]
        live = b.channel in self.live and self.live[b.channel][0] is b
        draws = len(self.rng.draws)
        if action == "complete":
            assert self.q.complete(b) is None
            if live:
                self._settled([*ids(b.events), *ids(b.cancelled_events)], self.delivered)
        elif action == "fail":
            dead = self.q.fail(b, self.now)
            if not live:
                assert dead is None
            elif dead is not None:
                assert dead.attempts == b.attempt == self.LIMITS["max_attempts"]
                assert dead.events == b.events and dead.cancelled_events == b.cancelled_events
                self._settled([*ids(b.events), *ids(b.cancelled_events)], self.dead)
                self.seen["dead letter"] += 1
            else:
                assert b.attempt < self.LIMITS["max_attempts"]
                assert len(self.rng.draws) == draws + 1
        else:
            assert self.q.requeue_cancelled(b, action) is None
        if not live or action != "fail" or b.attempt >= self.LIMITS["max_attempts"]:
            assert len(self.rng.draws) == draws
        if live:
            self.seen[f"live {action}"] += 1
            del self.live[b.channel]
            assert not self.q.in_flight(b.channel)
        else:
            self.seen["stale"] += 1

    def steer(self, pick: int, outcome: str, targeted: bool) -> None:
        before = self._locate()
        flying = {i for b, _ in self.live.values() for i in ids(b.events + b.cancelled_events)}
        steerable = [
            e for e in POOL if e.id in before and e.id not in flying and _channel(e) in self.live
        ]
        ev = steerable[pick % len(steerable)] if steerable and targeted else POOL[pick % len(POOL)]
        got = self.q.steer_result(ev.id, outcome, self.now)
        if got is None:
            assert ev not in steerable
            assert self._locate() == before
            return
        assert ev in steerable  # only pending events of a channel in flight
        assert got.event.id == ev.id
        self.seen[f"steer {outcome}"] += 1
        if outcome != "failed":
            self._settled([ev.id], self.delivered)
        if outcome == "injected":
            channel = _channel(ev)
            self.live[channel] = (self.live[channel][0], self.now)

    def restart(self) -> None:
        rng = CountingRng()
        rng.inner.setstate(self.rng.inner.getstate())
        data = self.q.snapshot()
        self.q = DispatchQueue.restore(data, rng=rng, **self.LIMITS)
        self.rng = rng
        assert self.q.snapshot() == data
        self.live.clear()  # batches in flight went back to the front
        self.seen["restart"] += 1

    def _locate(self) -> dict[str, int]:
        """How many times the queue holds each id: pending, stored or in flight."""
        doc = json.loads(self.q.snapshot())  # in-flight batches appear returned here
        counts: dict[str, int] = {}
        for ch in doc["channels"]:
            for e in (*ch["pending"], *ch["cancelled"]):
                counts[e["event"]["id"]] = counts.get(e["event"]["id"], 0) + 1
        return counts

    def check(self) -> None:
        held = self._locate()
        assert all(n == 1 for n in held.values())
        assert not set(held) & (self.delivered | self.dead | self.dropped)
        assert not self.delivered & self.dead
        # Every accepted id is exactly once: delivered, dead-lettered, or held by the queue.
        assert set(held) | self.delivered | self.dead == self.accepted - self.dropped
        for channel in {b.channel for b in self.batches}:
            assert self.q.in_flight(channel) == (channel in self.live)


def _channel(ev: Event) -> str:
    return nip10.channel(ev) or f"dm-{ev.pubkey}"


ACTIONS = ["complete", "fail", "fail", "interrupt", "steer"]
OUTCOMES = ["injected", "started_new_turn", "failed"]


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = QueueModel()

    @rule(k=st.integers(0, _POOL_SIZE - 1), dt=st.sampled_from([0, 0, 1, 3]))
    def push(self, k: int, dt: int) -> None:
        self.model.push(k, dt)

    @rule(dt=st.sampled_from([0, 1, 10, 50]))
    def flush(self, dt: int) -> None:
        self.model.flush(dt)

    @rule(pick=st.integers(0, 50), action=st.sampled_from(ACTIONS), stale=st.booleans())
    def settle(self, pick: int, action: str, stale: bool) -> None:
        self.model.settle(pick, action, stale)

    @rule(pick=st.integers(0, 50), outcome=st.sampled_from(OUTCOMES), targeted=st.booleans())
    def steer(self, pick: int, outcome: str, targeted: bool) -> None:
        self.model.steer(pick, outcome, targeted)

    @rule(roll=st.integers(0, 9))
    def restart(self, roll: int) -> None:
        if roll == 0:  # rare: a restart forgets every batch in flight
            self.model.restart()

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        self.model.check()


QueueMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase


def test_long_seeded_random_runs_keep_every_accepted_event_exactly_once() -> None:
    """Longer runs than the state machine affords, weighted towards pushes and outcomes."""
    total: collections.Counter[str] = collections.Counter()
    for seed in range(6):
        rnd = random.Random(seed)
        m = QueueModel()
        for _ in range(400):
            op = rnd.random()
            if op < 0.35:
                m.push(rnd.randrange(_POOL_SIZE), rnd.choice([0, 0, 1, 3]))
            elif op < 0.6:
                m.flush(rnd.choice([0, 1, 10, 50]))
            elif op < 0.85:
                m.settle(rnd.randrange(50), rnd.choice(ACTIONS), rnd.random() < 0.15)
            elif op < 0.97:
                m.steer(rnd.randrange(50), rnd.choice(OUTCOMES), rnd.random() < 0.8)
            else:
                m.restart()
            m.check()
        total += m.seen
    # The runs reached every behaviour the invariants are meant to cover.
    for what in (
        "duplicate",
        "dropped",
        "expired",
        "redispatch",
        "carried",
        "attempt 3",
        "dead letter",
        "stale",
        "steer injected",
        "steer started_new_turn",
        "steer failed",
        "restart",
    ):
        assert total[what] > 0, (what, total)


def test_one_backoff_rule_doubles_from_the_base_to_the_cap() -> None:
    from nostr_buzz.core.backoff import backoff_base

    assert backoff_base(0, base=5.0, cap=300.0) == 0.0
    assert [backoff_base(n, base=5.0, cap=300.0) for n in range(1, 9)] == [
        5.0,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        300.0,
        300.0,
    ]
    assert backoff_base(10**9, base=0.25, cap=10.0) == 10.0  # no overflow for huge counts


# ==============================================================================================
# Conformance: cases written from the text of docs/queue.md (and docs/events.md for routing).
# Expected values are computed by hand or by the tiny helpers below (the backoff formula, a
# recording RNG), never by asking the queue under test.
# ==============================================================================================

THREAD_1 = "1f" * 32
THREAD_2 = "2e" * 32


def dm(who: SecretKey) -> str:
    return f"dm-{who.public_key.hex}"


def eids(events: Sequence[Event]) -> list[str]:
    return [e.id for e in events]


class ScriptedRng:
    """An RNG whose ``uniform`` returns scripted values and records every call."""

    def __init__(self, values: Sequence[float] = ()) -> None:
        self.values = list(values)
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return self.values.pop(0) if self.values else 1.0


def base_delay(attempt: int) -> float:
    """docs/queue.md: min(5 s × 2^(attempt−1), 300 s), before the jitter."""
    return float(min(5 * 2 ** (attempt - 1), 300))


def before(t: float) -> float:
    return math.nextafter(t, -math.inf)


def after(t: float) -> float:
    return math.nextafter(t, math.inf)


# --------------------------------------------------------------------------------------------
# Public names, keyword names, result shapes


def test_errors_are_buzz_and_value_errors() -> None:
    assert issubclass(QueueError, BuzzError)
    assert issubclass(QueueError, ValueError)


def test_api_block_calls_with_its_keyword_names() -> None:
    q = DispatchQueue(
        max_batch=50, max_pending=500, max_attempts=10, deadline=7300, rng=random.Random(7)
    )
    e = chat(ALICE)
    r = q.push(e, prompt_tag="@mention", now=10)
    assert isinstance(r, PushResult)
    assert (r.accepted, r.duplicate, r.dropped) == (True, False, [])
    assert q.pending(channel="room") == 1
    assert q.in_flight(channel="room") is False
    b = q.flush_next(now=11)
    assert isinstance(b, Batch)
    assert q.in_flight("room") is True
    assert q.pending("room") == 0
    assert q.steer_result(event_id="0" * 64, outcome="failed", now=12) is None
    assert q.requeue_cancelled(b, reason="interrupt") is None
    b2 = flush(q, 13)
    assert q.fail(b2, now=14) is None
    data = q.snapshot()
    assert isinstance(data, bytes)
    json.loads(data)
    q2 = DispatchQueue.restore(
        data, rng=random.Random(1), max_batch=50, max_pending=500, max_attempts=10, deadline=7300
    )
    assert isinstance(q2, DispatchQueue)
    q3 = DispatchQueue.restore(data)  # rng defaults like the constructor's
    assert q3.pending("room") == 0


def test_defaults_need_no_arguments() -> None:
    q = DispatchQueue()
    e = chat(ALICE)
    assert q.push(e, now=0).accepted
    b = flush(q, 0)
    assert ids(b.events) == [e.id]
    assert b.events[0].prompt_tag == "@mention"


def test_batch_and_queued_event_fields() -> None:
    q = DispatchQueue(rng=random.Random(0))
    e1 = chat(ALICE, 200, thread=THREAD_1)
    e2 = chat(ALICE, 100, thread=THREAD_1)
    q.push(e1, prompt_tag="#room", now=5.5)
    q.push(e2, now=6)
    b = flush(q, 7)
    assert b.channel == "room"
    assert b.attempt == 1
    assert b.cancel_reason is None
    assert b.cancelled_events == []
    assert [q.event for q in b.events] == [e2, e1]
    assert all(isinstance(x, QueuedEvent) for x in b.events)
    assert [(x.prompt_tag, x.received_at) for x in b.events] == [("@mention", 6), ("#room", 5.5)]


# --------------------------------------------------------------------------------------------
# Keys: channels (docs/events.md) and authority (actor, destination)


@pytest.mark.parametrize(
    ("tags", "channel"),
    [
        ([["h", "room"]], "room"),
        ([["h", "Group_1-x"]], "Group_1-x"),
        ([["h", "a" * 128]], "a" * 128),
        ([["h", "a" * 129]], None),
        ([["h", "bad room"]], None),
        ([["h", "room\n"]], None),
        ([["h", ""]], None),
        ([["h", "dm-abc"]], None),  # the dm- prefix is reserved for direct channels
        ([["h"], ["h", "second"]], "second"),  # first h tag *with a value*
        ([["h", "bad id"], ["h", "room"]], None),  # later h tags never consulted
        ([["H", "room"]], None),
        ([], None),
    ],
)
def test_channel_of_an_event(tags: list[list[str]], channel: str | None) -> None:
    q = DispatchQueue(rng=random.Random(0))
    e = chat(BOB, tags=tags)
    q.push(e, now=1)
    expected = channel if channel is not None else dm(BOB)
    assert q.pending(expected) == 1
    b = flush(q, 1)
    assert b.channel == expected
    assert q.in_flight(expected)


def test_direct_channels_are_per_author() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = chat(ALICE, channel=None), chat(BOB, channel=None)
    q.push(a, now=1)
    q.push(b, now=2)
    b1, b2 = flush(q, 3), flush(q, 3)  # different channels run concurrently
    assert (b1.channel, ids(b1.events)) == (dm(ALICE), [a.id])
    assert (b2.channel, ids(b2.events)) == (dm(BOB), [b.id])


def flush_all(q: DispatchQueue, now: float) -> list[list[str]]:
    """Flush and complete repeatedly: the batches, as id lists, in flush order."""
    out: list[list[str]] = []
    while (b := q.flush_next(now)) is not None:
        out.append(ids(b.events))
        q.complete(b)
    return out


def test_a_top_level_message_and_replies_to_it_share_a_destination() -> None:
    # A top-level event's destination is its own id; a reply's is its root: the same thread.
    q = DispatchQueue(rng=random.Random(0))
    root = chat(ALICE, 100)
    reply = chat(ALICE, 101, thread=root.id)
    reply_only_marker = chat(
        ALICE, 102, tags=[["h", "room"], ["e", root.id, "", "reply"]]
    )  # only a reply marker: destination is the reply id
    for i, e in enumerate([root, reply, reply_only_marker]):
        q.push(e, now=i)
    assert flush_all(q, 5) == [[root.id, reply.id, reply_only_marker.id]]


def test_destination_routing_shapes_group_correctly() -> None:
    q = DispatchQueue(rng=random.Random(0))
    marked = chat(
        ALICE, 1, tags=[["h", "room"], ["e", THREAD_1, "", "root"], ["e", THREAD_2, "", "reply"]]
    )
    positional = chat(ALICE, 2, kind=1, tags=[["h", "room"], ["e", THREAD_1], ["e", THREAD_2]])
    comment = chat(ALICE, 3, kind=1111, tags=[["h", "room"], ["E", THREAD_1], ["e", THREAD_2]])
    citation = chat(ALICE, 4, kind=9, tags=[["h", "room"], ["e", THREAD_1]])  # chat: not routing
    upper = chat(ALICE, 5, tags=[["h", "room"], ["e", THREAD_1.upper(), "", "root"]])
    for i, e in enumerate([marked, positional, comment, citation, upper]):
        q.push(e, now=i)
    assert flush_all(q, 9) == [[marked.id, positional.id, comment.id], [citation.id], [upper.id]]


def test_default_max_batch_is_50_and_the_prefix_is_taken_in_queue_order() -> None:
    q = DispatchQueue(rng=random.Random(0))
    # created_at descending: the 50 taken are the first 50 in the queue, then sorted.
    es = [chat(ALICE, 1000 - i, thread=THREAD_1) for i in range(51)]
    for e in es:
        q.push(e, now=0)
    assert flush_all(q, 1) == [eids(es[:50])[::-1], [es[50].id]]


def test_custom_max_batch() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(0))
    es = [chat(ALICE, 10 + i, thread=THREAD_1) for i in range(5)]
    for e in es:
        q.push(e, now=0)
    assert flush_all(q, 1) == [eids(es[0:2]), eids(es[2:4]), [es[4].id]]


# --------------------------------------------------------------------------------------------
# Which channel flushes


def test_one_batch_per_channel_in_flight() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = chat(ALICE), chat(BOB)
    c = chat(CAROL, channel="other")
    q.push(a, now=1)
    q.push(b, now=2)
    q.push(c, now=3)
    b1 = flush(q, 4)
    assert ids(b1.events) == [a.id]
    b2 = flush(q, 4)  # room is in flight: the other channel goes
    assert ids(b2.events) == [c.id]
    assert q.flush_next(4) is None
    assert q.pending("room") == 1
    q.complete(b1)
    assert not q.in_flight("room")
    assert ids(flush(q, 5).events) == [b.id]


def test_unknown_channel_is_idle_and_empty() -> None:
    q = DispatchQueue(rng=random.Random(0))
    assert q.in_flight("nowhere") is False
    assert q.pending("nowhere") == 0
    assert q.flush_next(0) is None


# --------------------------------------------------------------------------------------------
# The cap


def test_cap_may_drop_the_pushed_event_itself() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(0))
    a, b = chat(ALICE), chat(BOB)
    q.push(a, now=10)
    q.push(b, now=11)
    old = chat(CAROL)
    r = q.push(old, now=5)  # received earliest of the three
    assert (r.accepted, r.duplicate, r.dropped) == (False, False, [old.id])
    assert q.pending("room") == 2
    # A dropped event is in none of the duplicate states: pushing it again is accepted.
    r2 = q.push(old, now=12)
    assert r2.accepted and not r2.duplicate and r2.dropped == [a.id]


def test_cap_is_per_channel_and_ignores_in_flight_and_stored_cancelled() -> None:
    q = DispatchQueue(max_pending=1, rng=random.Random(0))
    a = chat(ALICE)
    q.push(a, now=1)
    b = flush(q, 2)
    assert q.push(chat(BOB), now=3).dropped == []  # a is in flight, not pending
    q.requeue_cancelled(b, "interrupt")
    assert q.pending("room") == 1  # stored cancelled events are not counted
    assert q.push(chat(CAROL, channel="elsewhere"), now=4).dropped == []
    r = q.push(chat(CAROL), now=5)
    assert len(r.dropped) == 1 and r.dropped[0] != a.id


def test_default_cap_is_500() -> None:
    q = DispatchQueue(rng=random.Random(0))
    es = [chat(ALICE) for _ in range(501)]
    rs = [q.push(e, now=i) for i, e in enumerate(es)]
    assert all(r.dropped == [] for r in rs[:500])
    assert rs[500].dropped == [es[0].id]
    assert q.pending("room") == 500


# --------------------------------------------------------------------------------------------
# Duplicates


def assert_duplicate(q: DispatchQueue, e: Event, now: float = 1000) -> None:
    before_count = q.pending(q_channel(e))
    r = q.push(e, now=now)
    assert r == PushResult(accepted=False, duplicate=True, dropped=[])
    assert q.pending(q_channel(e)) == before_count


def q_channel(e: Event) -> str:
    for tag in e.tags:
        if len(tag) >= 2 and tag[0] == "h":
            return tag[1]
    return f"dm-{e.pubkey}"


def test_duplicate_while_pending_in_flight_and_backing_off() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a, b = chat(ALICE), chat(BOB)
    q.push(a, now=1)
    q.push(b, now=2)
    assert_duplicate(q, b)  # pending
    batch = flush(q, 3)
    assert_duplicate(q, a)  # in flight
    q.fail(batch, now=4)
    assert_duplicate(q, a)  # pending again, channel backing off


def test_duplicate_after_steer_delivery_and_after_dead_letter() -> None:
    q = DispatchQueue(max_attempts=1, rng=random.Random(0))
    a, s1, s2, s3 = chat(ALICE), chat(BOB), chat(CAROL), chat(BOB, thread=THREAD_1)
    q.push(a, now=1)
    batch = flush(q, 2)
    for s in (s1, s2, s3):
        q.push(s, now=3)
    q.steer_result(s1.id, "injected", now=4)
    q.steer_result(s2.id, "started_new_turn", now=4)
    q.steer_result(s3.id, "failed", now=4)
    assert_duplicate(q, s1)
    assert_duplicate(q, s2)
    assert_duplicate(q, s3)  # still pending
    assert q.pending("room") == 1
    dead = q.fail(batch, now=5)
    assert isinstance(dead, DeadLetter)
    assert_duplicate(q, a)


def test_dead_lettered_cancelled_events_are_remembered() -> None:
    q = DispatchQueue(max_attempts=1, rng=random.Random(0))
    a, b = chat(ALICE), chat(BOB)
    q.push(a, now=1)
    q.requeue_cancelled(flush(q, 1), "steer")
    q.push(b, now=2)
    carrier = flush(q, 3)
    dead = q.fail(carrier, now=4)
    assert isinstance(dead, DeadLetter)
    assert ids(dead.events) == [b.id]
    assert ids(dead.cancelled_events) == [a.id]
    assert_duplicate(q, a)
    assert_duplicate(q, b)
    assert q.flush_next(5) is None  # they left the queue


# --------------------------------------------------------------------------------------------
# Failure, backoff and dead letters

JITTERS = [0.8125, 1.1875, 1.0, 0.875, 1.125, 0.9375, 0.8, 1.2, 1.0625]


def test_backoff_table_for_attempts_1_to_10_with_default_limits() -> None:
    rng = ScriptedRng(JITTERS)
    q = DispatchQueue(rng=rng)
    a = chat(ALICE)
    q.push(a, now=0)
    now = 1.0
    b = flush(q, now)
    expected_delays = []
    for attempt in range(1, 10):
        assert b.attempt == attempt
        now += 3.0
        assert q.fail(b, now) is None
        assert len(rng.calls) == attempt  # exactly one draw per fail that does not dead-letter
        assert rng.calls[-1] == (0.8, 1.2)
        delay = base_delay(attempt) * JITTERS[attempt - 1]
        expected_delays.append(delay)
        assert not q.in_flight("room")
        assert q.pending("room") == 1
        assert q.flush_next(before(now + delay)) is None
        now = now + delay
        b = flush(q, now)
        assert ids(b.events) == [a.id]
    assert expected_delays[:7] == [
        5 * 0.8125,
        10 * 1.1875,
        20 * 1.0,
        40 * 0.875,
        80 * 1.125,
        160 * 0.9375,
        300 * 0.8,  # 320 capped at 300 before the jitter
    ]
    assert b.attempt == 10
    dead = q.fail(b, now + 1)  # the tenth fail dead-letters
    assert len(rng.calls) == 9  # no draw for it
    assert dead == DeadLetter(channel="room", events=b.events, cancelled_events=[], attempts=10)
    assert q.pending("room") == 0
    assert not q.in_flight("room")
    # The channel does not back off after a dead letter.
    c = chat(BOB)
    q.push(c, now=now + 1)
    assert ids(flush(q, now + 1).events) == [c.id]


def test_backoff_boundary_with_a_seeded_rng() -> None:
    seed = 20261202
    q = DispatchQueue(rng=random.Random(seed))
    expected = random.Random(seed)
    q.push(chat(ALICE), now=0)
    b = flush(q, 0)
    t = 1234.5
    q.fail(b, t)
    until = t + 5 * expected.uniform(0.8, 1.2)
    assert q.flush_next(before(until)) is None
    b2 = flush(q, until)  # "not flushed again before now + delay": at it, it may be
    assert b2.attempt == 2
    t2 = until + 10
    q.fail(b2, t2)
    until2 = t2 + 10 * expected.uniform(0.8, 1.2)
    assert q.flush_next(before(until2)) is None
    assert flush(q, until2).attempt == 3


def test_backing_off_channel_does_not_block_other_channels() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a, c = chat(ALICE), chat(BOB, channel="other")
    q.push(a, now=0)
    q.push(c, now=1)
    b = flush(q, 2)
    assert b.channel == "room"
    q.fail(b, 2)
    assert flush(q, 3).channel == "other"
    assert q.flush_next(6.5) is None
    assert flush(q, 7).channel == "room"  # 2 + 5 × 1.0


def test_max_attempts_is_configurable() -> None:
    rng = ScriptedRng([1.0, 1.0])
    q = DispatchQueue(max_attempts=3, rng=rng)
    q.push(chat(ALICE), now=0)
    b = flush(q, 0)
    assert q.fail(b, 0) is None
    b = flush(q, 5)
    assert q.fail(b, 5) is None
    b = flush(q, 15)
    assert b.attempt == 3
    dead = q.fail(b, 15)
    assert isinstance(dead, DeadLetter) and dead.attempts == 3
    assert len(rng.calls) == 2

    rng1 = ScriptedRng()
    q1 = DispatchQueue(max_attempts=1, rng=rng1)
    q1.push(chat(ALICE), now=0)
    dead1 = q1.fail(flush(q1, 0), 0)
    assert isinstance(dead1, DeadLetter) and dead1.attempts == 1
    assert rng1.calls == []


def test_failed_events_go_back_to_the_front_in_batch_order() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a1, a2 = chat(ALICE, 9, thread=THREAD_1), chat(ALICE, 3, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    assert ids(b.events) == [a2.id, a1.id]
    c = chat(BOB, 1)
    q.push(c, now=3)
    # Another channel whose head arrived after the failed events but before the fail.
    d = chat(CAROL, channel="other")
    q.push(d, now=4)
    q.fail(b, 10)
    # At 15 the room's head (received at 0) has waited longest.
    retry = flush(q, 15)
    assert ids(retry.events) == [a2.id, a1.id]
    assert flush(q, 15).channel == "other"
    q.complete(retry)
    assert ids(flush(q, 15).events) == [c.id]


def test_fail_returns_the_batchs_cancelled_events_with_their_reason() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a, b = chat(ALICE), chat(BOB)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 1), "steer")
    q.push(b, now=2)
    carrier = flush(q, 3)
    assert (ids(carrier.events), ids(carrier.cancelled_events), carrier.cancel_reason) == (
        [b.id],
        [a.id],
        "steer",
    )
    q.fail(carrier, 4)
    assert q.pending("room") == 1
    retry = flush(q, 9)
    assert (ids(retry.events), ids(retry.cancelled_events), retry.cancel_reason, retry.attempt) == (
        [b.id],
        [a.id],
        "steer",
        2,
    )


# --------------------------------------------------------------------------------------------
# Cancelled events


def test_interrupted_batch_is_redispatched_whole_keeping_its_reason() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a1, a2 = chat(ALICE, 20, thread=THREAD_1), chat(ALICE, 10, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    assert q.requeue_cancelled(b, "interrupt") is None
    assert not q.in_flight("room")
    assert q.pending("room") == 0  # stored cancelled events are not pending
    again = flush(q, 3)
    assert ids(again.events) == [a2.id, a1.id]
    assert again.cancelled_events == []
    assert again.cancel_reason == "interrupt"
    assert again.attempt == 1
    q.complete(again)
    assert q.flush_next(4) is None


def test_cancelled_events_ride_with_the_next_batch_whatever_its_authority() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = chat(ALICE, thread=THREAD_1)
    q.push(a, now=0)
    b = flush(q, 1)
    c1, c2 = chat(BOB, thread=THREAD_2), chat(CAROL)
    q.push(c1, now=2)
    q.push(c2, now=3)
    q.requeue_cancelled(b, "interrupt")
    nxt = flush(q, 4)
    assert ids(nxt.events) == [c1.id]  # the normal prefix rule; cancelled ones not merged in
    assert ids(nxt.cancelled_events) == [a.id]
    assert nxt.cancel_reason == "interrupt"
    q.complete(nxt)
    last = flush(q, 5)
    assert ids(last.events) == [c2.id]
    assert last.cancelled_events == [] and last.cancel_reason is None


def test_requeue_stores_previous_cancelled_then_events_with_the_latest_reason() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = chat(ALICE, 300)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 1), "interrupt")
    b = chat(BOB, 100)
    q.push(b, now=2)
    carrier = flush(q, 3)
    q.requeue_cancelled(carrier, "steer")
    c = chat(CAROL, 200)
    q.push(c, now=4)
    nxt = flush(q, 5)
    assert ids(nxt.events) == [c.id]
    assert ids(nxt.cancelled_events) == [a.id, b.id]  # stored order, not created_at order
    assert nxt.cancel_reason == "steer"
    q.requeue_cancelled(nxt, "interrupt")
    whole = flush(q, 6)
    assert ids(whole.events) == [b.id, c.id, a.id]  # re-dispatched: by created_at
    assert whole.cancel_reason == "interrupt"


def test_wait_of_a_channel_with_only_cancelled_events_is_their_earliest_received_at() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a1, a2 = chat(ALICE, thread=THREAD_1), chat(ALICE, thread=THREAD_1)
    q.push(a1, now=10)
    q.push(a2, now=30)
    b = flush(q, 31)
    q.push(chat(BOB, channel="other"), now=20)
    q.push(chat(CAROL, channel="third"), now=5)
    q.requeue_cancelled(b, "interrupt")
    assert [flush(q, 40).channel for _ in range(3)] == ["third", "room", "other"]


def test_a_failed_redispatch_returns_to_the_stored_cancelled_events_whole() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0, 1.0]))
    a1, a2 = chat(ALICE, 2, thread=THREAD_1), chat(ALICE, 1, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=0)
    q.requeue_cancelled(flush(q, 1), "steer")
    whole = flush(q, 2)
    assert ids(whole.events) == [a2.id, a1.id]
    q.fail(whole, 3)
    assert q.pending("room") == 0  # back among the stored cancelled events, not pending
    assert q.flush_next(before(8.0)) is None
    again = flush(q, 8)
    assert ids(again.events) == [a2.id, a1.id]
    assert again.cancel_reason == "steer"
    assert again.attempt == 2
    q.fail(again, 9)
    c = chat(BOB)
    q.push(c, now=10)
    nxt = flush(q, 19)  # 9 + 10 × 1.0
    assert ids(nxt.events) == [c.id]
    assert sorted(ids(nxt.cancelled_events)) == sorted([a1.id, a2.id])
    assert nxt.cancel_reason == "steer"


def test_an_expired_redispatch_returns_to_the_stored_cancelled_events() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(0))
    a = chat(ALICE)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    whole = flush(q, 0)
    c = chat(BOB)
    q.push(c, now=50)
    nxt = flush(q, 101)  # whole expired; the channel's next batch carries it
    assert ids(nxt.events) == [c.id]
    assert ids(nxt.cancelled_events) == [a.id]
    assert nxt.cancel_reason == "interrupt"
    assert q.complete(whole) is None


def test_bad_reason_raises_queue_error_and_changes_nothing() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = chat(ALICE)
    q.push(a, now=0)
    b = flush(q, 0)
    for reason in ["", "Interrupt", "cancel", "failed", None, 1]:
        with pytest.raises(QueueError):
            q.requeue_cancelled(b, reason)  # type: ignore[arg-type]
    assert q.in_flight("room")
    q.complete(b)
    assert_duplicate(q, a)


# --------------------------------------------------------------------------------------------
# Expiry


def test_deadline_is_strictly_greater_than_and_defaults_to_7300() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = chat(ALICE)
    q.push(a, now=0)
    b = flush(q, 100)
    assert q.flush_next(7400) is None  # exactly 7300 s in flight: not expired
    again = q.flush_next(after(7400.0))  # expired, and flushed again by the same call
    assert again is not None
    assert ids(again.events) == [a.id]
    assert again.attempt == 1  # no attempt counted
    assert q.in_flight("room")
    # The old batch is stale: operations on it do nothing.
    assert q.complete(b) is None
    assert q.fail(b, 7401) is None
    assert q.requeue_cancelled(b, "interrupt") is None
    assert q.in_flight("room")
    q.complete(again)
    assert not q.in_flight("room")
    assert_duplicate(q, a)


def test_expiry_returns_exactly_the_set_to_the_front_and_keeps_its_count() -> None:
    rng = ScriptedRng([1.0, 1.0])
    q = DispatchQueue(deadline=100, rng=rng)
    a1 = chat(ALICE, 5, thread=THREAD_1)
    q.push(a1, now=0)
    q.fail(flush(q, 0), 0)
    b = flush(q, 5)
    assert b.attempt == 2
    a2 = chat(ALICE, 1, thread=THREAD_1)  # same authority, pushed during flight
    q.push(a2, now=6)
    again = flush(q, 106)
    assert ids(again.events) == [a1.id]
    assert again.attempt == 2
    q.fail(again, 110)
    assert q.flush_next(before(120.0)) is None  # attempt 2's delay: 10 × 1.0
    assert flush(q, 120).attempt == 3
    assert len(rng.calls) == 2


def test_expired_events_are_flushed_before_younger_heads_and_without_backoff() -> None:
    q = DispatchQueue(deadline=100, rng=ScriptedRng())
    a, c = chat(ALICE), chat(BOB, channel="other")
    q.push(a, now=0)
    b = flush(q, 0)
    q.push(c, now=50)
    again = flush(q, 101)
    assert again.channel == "room"
    assert flush(q, 101).channel == "other"
    assert q.complete(b) is None


def test_one_flush_next_expires_every_overdue_batch() -> None:
    q = DispatchQueue(deadline=10, rng=random.Random(0))
    a, c = chat(ALICE), chat(BOB, channel="other")
    q.push(a, now=0)
    q.push(c, now=0)
    ba, bc = flush(q, 0), flush(q, 0)
    first = flush(q, 20)
    second = flush(q, 20)
    assert {first.channel, second.channel} == {"room", "other"}
    assert first.channel == "room"  # received first (push order tie-break)
    assert q.complete(ba) is None and q.complete(bc) is None


# --------------------------------------------------------------------------------------------
# Steer results


def steer_setup(deadline: float = 100) -> tuple[DispatchQueue, Batch, Event]:
    q = DispatchQueue(deadline=deadline, rng=random.Random(0))
    q.push(chat(ALICE), now=0)
    b = flush(q, 0)
    s = chat(BOB)
    q.push(s, now=50)
    return q, b, s


def test_steer_result_for_other_ids_does_nothing() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(0))
    a, idle, s = chat(ALICE), chat(BOB, channel="idle"), chat(CAROL)
    q.push(a, now=0)
    b = flush(q, 0)
    q.push(idle, now=1)
    q.push(s, now=2)
    for outcome in ["injected", "started_new_turn", "failed"]:
        assert q.steer_result("ab" * 32, outcome, now=50) is None  # unknown id
        assert q.steer_result(a.id, outcome, now=50) is None  # in the running batch
        assert q.steer_result(idle.id, outcome, now=50) is None  # channel not in flight
    assert q.pending("idle") == 1 and q.pending("room") == 1
    # none of these restarted the deadline
    again = q.flush_next(after(100.0))
    assert again is not None and again.channel == "room" and ids(again.events) == [a.id]
    assert q.complete(b) is None


def test_unknown_outcome_raises_queue_error() -> None:
    q, _b, s = steer_setup()
    for outcome in ["startedNewTurn", "Injected", "", "cancelled", None]:
        with pytest.raises(QueueError):
            q.steer_result(s.id, outcome, now=60)  # type: ignore[arg-type]
    assert q.pending("room") == 1


# --------------------------------------------------------------------------------------------
# Stale operations


def test_operations_on_settled_batches_do_nothing() -> None:
    rng = ScriptedRng([1.0])
    q = DispatchQueue(rng=rng)
    a = chat(ALICE)
    q.push(a, now=0)
    b = flush(q, 0)
    q.complete(b)
    assert q.complete(b) is None
    assert q.fail(b, 1) is None
    assert q.requeue_cancelled(b, "interrupt") is None
    assert rng.calls == []
    assert q.flush_next(1) is None  # nothing was stored or requeued

    c = chat(BOB)
    q.push(c, now=2)
    b2 = flush(q, 2)
    q.requeue_cancelled(b2, "steer")
    assert q.complete(b2) is None
    assert q.fail(b2, 3) is None
    redo = flush(q, 3)  # still stored, not delivered, no backoff
    assert ids(redo.events) == [c.id] and redo.cancel_reason == "steer"
    assert q.fail(redo, 4) is None
    assert q.complete(redo) is None  # failed: stale now
    assert q.fail(redo, 5) is None
    assert len(rng.calls) == 1


def test_a_batch_of_another_queue_is_not_this_queues_in_flight_batch() -> None:
    e = chat(ALICE)
    q1, q2 = DispatchQueue(rng=random.Random(0)), DispatchQueue(rng=random.Random(0))
    q1.push(e, now=0)
    q2.push(e, now=0)
    b1, b2 = flush(q1, 0), flush(q2, 0)
    assert q1.complete(b2) is None
    assert q1.in_flight("room")
    q1.complete(b1)
    assert not q1.in_flight("room")
    assert q2.in_flight("room")


# --------------------------------------------------------------------------------------------
# Snapshot and restore


def summarize(x: Any) -> Any:
    """A comparable view of an API result."""
    if isinstance(x, Batch):
        return (
            "batch",
            x.channel,
            [(q.event.id, q.prompt_tag, q.received_at) for q in x.events],
            [(q.event.id, q.prompt_tag, q.received_at) for q in x.cancelled_events],
            x.cancel_reason,
            x.attempt,
        )
    if isinstance(x, DeadLetter):
        return ("dead", x.channel, ids(x.events), ids(x.cancelled_events), x.attempts)
    if isinstance(x, PushResult):
        return ("push", x.accepted, x.duplicate, sorted(x.dropped))
    if isinstance(x, QueuedEvent):
        return ("queued", x.event.id)
    return x


class Twin:
    """Drives a queue with a seeded sequence of operations, recording every result."""

    def __init__(self, q: DispatchQueue, pool: list[Event]) -> None:
        self.q = q
        self.pool = pool
        self.batches: list[Batch] = []
        self.log: list[Any] = []

    def step(self, op: int, pick: int, now: float) -> None:
        q = self.q
        if op <= 2:
            e = self.pool[pick % len(self.pool)]
            self.log.append(summarize(q.push(e, prompt_tag=f"t{pick % 3}", now=now)))
        elif op == 3:
            b = q.flush_next(now)
            if b is not None:
                self.batches.append(b)
            self.log.append(summarize(b))
        elif self.batches:
            b = self.batches[pick % len(self.batches)]
            if op == 4:
                self.log.append(summarize(q.complete(b)))
            elif op == 5:
                self.log.append(summarize(q.fail(b, now)))
            elif op == 6:
                self.log.append(summarize(q.requeue_cancelled(b, ["interrupt", "steer"][pick % 2])))
            else:
                e = self.pool[pick % len(self.pool)]
                outcome = ["injected", "started_new_turn", "failed"][pick % 3]
                self.log.append(summarize(q.steer_result(e.id, outcome, now)))
        for room in ["r0", "r1", "r2", dm(ALICE)]:
            self.log.append((q.pending(room), q.in_flight(room)))


def make_pool() -> list[Event]:
    keys = [ALICE, BOB, CAROL]
    pool = []
    for i in range(40):
        room = None if i % 7 == 0 else f"r{i % 3}"
        thread = [None, THREAD_1, THREAD_2][i % 4 % 3]
        pool.append(
            chat(keys[i % 3 if i % 5 else 0], 100 + (i * 7) % 13, channel=room, thread=thread)
        )
    return pool


def ops(seed: int, n: int) -> Iterator[tuple[int, int, float]]:
    r = random.Random(seed)
    now = 0.0
    for _ in range(n):
        now += r.choice([0, 0, 1, 3, 17, 60])
        yield r.randrange(8), r.randrange(1000), now


@pytest.mark.parametrize("seed", range(6))
def test_restore_behaves_identically_given_an_rng_in_the_same_state(seed: int) -> None:
    limits = {"max_batch": 3, "max_pending": 6, "max_attempts": 4, "deadline": 150}
    pool = make_pool()
    rng = random.Random(seed)
    original = Twin(DispatchQueue(rng=rng, **limits), pool)
    steps = list(ops(seed, 160))
    for op, pick, now in steps[:80]:
        original.step(op, pick, now)
    # Settle in-flight batches so the snapshot has none (those return to the front on restore).
    for b in original.batches:
        original.q.complete(b)
    original.batches.clear()
    data = original.q.snapshot()
    twin_rng = random.Random()
    twin_rng.setstate(rng.getstate())
    restored = Twin(DispatchQueue.restore(data, rng=twin_rng, **limits), pool)
    original.log.clear()
    for op, pick, now in steps[80:]:
        original.step(op, pick, now)
        restored.step(op, pick, now)
    assert restored.log == original.log
    assert restored.q.snapshot() == original.q.snapshot()


def test_restore_keeps_remembered_ids_backoff_cancelled_and_tie_order() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    delivered, failing, cancelled = (
        chat(ALICE, channel="d"),
        chat(BOB, channel="f"),
        chat(CAROL, channel="c"),
    )
    q.push(delivered, now=0)
    q.complete(flush(q, 0))
    q.push(failing, now=1)
    q.fail(flush(q, 1), 10)  # backs off until 15
    q.push(cancelled, now=2)
    q.requeue_cancelled(flush(q, 2), "steer")
    tie_a, tie_b = chat(ALICE, channel="t2"), chat(ALICE, channel="t1")
    q.push(tie_a, now=3)
    q.push(tie_b, now=3)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert r.push(delivered, now=20).duplicate
    assert r.push(cancelled, now=20).duplicate
    assert r.pending("f") == 1 and r.pending("c") == 0 and r.pending("t1") == 1
    got = [flush(r, 14) for _ in range(3)]
    assert [(b.channel, b.cancel_reason) for b in got] == [
        ("c", "steer"),
        ("t2", None),
        ("t1", None),
    ]
    assert r.flush_next(14.5) is None
    retry = flush(r, 15)
    assert (retry.channel, retry.attempt) == ("f", 2)


def test_in_flight_batches_return_to_the_front_on_restore_without_an_attempt() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a1 = chat(ALICE, 5, thread=THREAD_1)
    q.push(a1, now=0)
    q.fail(flush(q, 0), 0)
    running = flush(q, 5)
    assert running.attempt == 2
    a2 = chat(ALICE, 1, thread=THREAD_1)  # same authority, pushed while running
    q.push(a2, now=6)
    pre = chat(BOB)
    q.push(pre, now=6.5)  # a cancelled carry on another channel, in flight at snapshot time
    q.push(chat(CAROL, channel="x"), now=7)
    xb = flush(q, 7)
    q.requeue_cancelled(xb, "interrupt")
    q.push(chat(BOB, channel="x"), now=8)
    carrier = flush(q, 8)
    assert carrier.cancelled_events
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert not r.in_flight("room") and not r.in_flight("x")
    assert r.pending("room") == 3
    first = flush(r, 9)
    assert (first.channel, ids(first.events), first.attempt) == ("room", [a1.id], 2)
    second = flush(r, 9)
    assert second.channel == "x"
    assert ids(second.events) == ids(carrier.events)
    assert ids(second.cancelled_events) == ids(carrier.cancelled_events)
    assert second.cancel_reason == "interrupt"
    assert second.attempt == 1


def test_restore_takes_the_limits_from_the_caller() -> None:
    q = DispatchQueue(max_batch=50, rng=random.Random(0))
    es = [chat(ALICE, 10 + i, thread=THREAD_1) for i in range(5)]
    for e in es:
        q.push(e, now=0)
    data = q.snapshot()
    r = DispatchQueue.restore(data, rng=random.Random(0), max_batch=2, max_pending=3, deadline=10)
    b = flush(r, 1)
    assert ids(b.events) == eids(es[:2])
    assert r.push(chat(BOB), now=2).dropped == [es[2].id]
    assert r.flush_next(12) is not None  # expired after 10 s and flushed again
    assert r.complete(b) is None


def test_restored_default_limits() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(0))
    es = [chat(ALICE, 10 + i, thread=THREAD_1) for i in range(3)]
    for e in es:
        q.push(e, now=0)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert ids(flush(r, 1).events) == eids(es)  # default max_batch 50, not the snapshot's 2


def rich_snapshot() -> bytes:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    q.push(chat(ALICE, channel="d"), now=0)
    q.complete(flush(q, 0))
    q.push(chat(BOB, channel="f"), now=1)
    q.fail(flush(q, 1), 10)
    q.push(chat(CAROL, channel="c"), now=2)
    q.requeue_cancelled(flush(q, 2), "steer")
    q.push(chat(ALICE, channel="c", thread=THREAD_1), now=3)
    q.push(chat(ALICE, channel=None), now=4)
    flush(q, 5)
    return q.snapshot()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"null",
        b"[]",
        b"{}",
        b"1",
        b'"snapshot"',
    ],
)
def test_snapshots_that_are_not_a_queue_object_raise_queue_error(data: bytes) -> None:
    with pytest.raises(QueueError):
        DispatchQueue.restore(data, rng=random.Random(0))


def test_truncated_and_tampered_snapshots_raise_queue_error() -> None:
    data = rich_snapshot()
    for cut in range(0, len(data), max(1, len(data) // 40)):
        with pytest.raises(QueueError):
            DispatchQueue.restore(data[:cut], rng=random.Random(0))
    text = data.decode()
    sig_start = text.index('"sig":"') + len('"sig":"')
    flipped = "0" if text[sig_start] != "0" else "1"
    with pytest.raises(QueueError):
        DispatchQueue.restore(
            (text[:sig_start] + flipped + text[sig_start + 1 :]).encode(), rng=random.Random(0)
        )


def test_wrong_typed_inputs_to_restore_raise_queue_error() -> None:
    for data in [None, 5, [], {}]:
        with pytest.raises(QueueError):
            DispatchQueue.restore(data, rng=random.Random(0))  # type: ignore[arg-type]


def mutations(node: Any) -> Iterator[tuple[Any, Any]]:
    """Every (path-replaced document) produced by swapping one value for a wrongly typed one."""

    def replace(doc: Any, path: list[Any], value: Any) -> Any:
        if not path:
            return value
        head, *rest = path
        copy = list(doc) if isinstance(doc, list) else dict(doc)
        copy[head] = replace(doc[head], rest, value)
        return copy

    def walk(doc: Any, path: list[Any]) -> Iterator[list[Any]]:
        yield path
        if isinstance(doc, dict):
            for k, v in doc.items():
                yield from walk(v, [*path, k])
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                yield from walk(v, [*path, i])

    for path in walk(node, []):
        for bad in [None, -1, 1.5, "x", [], {}, True, 2**70]:
            yield path, replace(node, path, bad)


def test_any_one_wrongly_typed_value_gives_queue_error_or_a_working_queue() -> None:
    doc = json.loads(rich_snapshot())
    outcomes = {"error": 0, "ok": 0}
    for _path, bad in mutations(doc):
        try:
            r = DispatchQueue.restore(json.dumps(bad).encode(), rng=random.Random(0))
        except QueueError:
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        # A restored queue must work: flush and settle everything without a crash.
        for now in (100.0, 20000.0):
            while (b := r.flush_next(now)) is not None:
                r.complete(b)
        r.snapshot()
    assert outcomes["error"] > 0


def test_duplicated_records_in_a_snapshot_are_rejected_or_harmless() -> None:
    doc = json.loads(rich_snapshot())

    def dup_lists(node: Any) -> Iterator[Any]:
        # Every document where one non-empty list of objects has its first element repeated.
        if isinstance(node, dict):
            for k, v in node.items():
                for alt in dup_lists(v):
                    yield {**node, k: alt}
        elif isinstance(node, list):
            if node and isinstance(node[0], (dict, list)):
                yield [node[0], *node]
            for i, v in enumerate(node):
                for alt in dup_lists(v):
                    yield [*node[:i], alt, *node[i + 1 :]]

    for bad in dup_lists(doc):
        try:
            r = DispatchQueue.restore(json.dumps(bad).encode(), rng=random.Random(0))
        except QueueError:
            continue
        seen: list[str] = []
        for now in (100.0, 20000.0):
            while (b := r.flush_next(now)) is not None:
                seen += ids(b.events) + ids(b.cancelled_events)
                r.complete(b)
        assert len(seen) == len(set(seen)), "an event was dispatched twice"


def test_push_rejects_a_non_event_with_a_typed_error() -> None:
    q = DispatchQueue(rng=random.Random(0))
    with pytest.raises(BuzzError):
        q.push({"id": "0" * 64}, now=0)  # type: ignore[arg-type]
    assert q.flush_next(0) is None


# --------------------------------------------------------------------------------------------
# A reference model written from docs/queue.md alone, driven side by side with the queue.
#
# Readings the model encodes (where 02 leaves room):
# * a channel's wait is its head pending event when it has one, else its earliest stored one;
# * a set of cancelled events carried by a batch of new events has no count of its own;
# * when a push leaves the channel over the cap, it drops earliest-received events until the cap
#   holds.


class _Ref:
    """The state machine of docs/queue.md, in the most literal form: lists and linear scans."""

    def __init__(self, rng: random.Random, limits: dict[str, Any]) -> None:
        self.rng = rng
        self.max_batch = limits["max_batch"]
        self.max_pending = limits["max_pending"]
        self.max_attempts = limits["max_attempts"]
        self.deadline = limits["deadline"]
        self.seq = 0
        self.memory: list[str] = []  # delivered or dead-lettered, oldest first
        self.chans: dict[str, dict[str, Any]] = {}

    # an entry: (QueuedEvent, push order, authority key)

    def chan(self, name: str) -> dict[str, Any]:
        return self.chans.setdefault(
            name,
            {
                "pending": [],
                "held": None,  # (n, count): the first n pending events are a returned set
                "stored": [],
                "reason": None,
                "stored_count": 0,
                "backoff": None,
                "flight": None,
            },
        )

    def live_ids(self) -> set[str]:
        out = set()
        for c in self.chans.values():
            for e in c["pending"] + c["stored"]:
                out.add(e[0].event.id)
            if c["flight"] is not None:
                for e in c["flight"]["events"] + c["flight"]["cancelled"]:
                    out.add(e[0].event.id)
        return out

    def remember(self, entries: list[Any]) -> None:
        for e in entries:
            self.memory.append(e[0].event.id)
        del self.memory[: max(0, len(self.memory) - 10_000)]

    def push(self, event: Event, tag: str, now: float) -> Any:
        if event.id in self.live_ids() or event.id in self.memory:
            return ("push", False, True, [])
        name = _ref_channel(event)
        c = self.chan(name)
        key = (event.pubkey, _ref_destination(event))
        c["pending"].append((QueuedEvent(event, tag, now), self.seq, key))
        self.seq += 1
        dropped = []
        while len(c["pending"]) > self.max_pending:
            i = min(
                range(len(c["pending"])),
                key=lambda j: (c["pending"][j][0].received_at, c["pending"][j][1]),
            )
            dropped.append(c["pending"].pop(i)[0].event.id)
            if c["held"] is not None and i < c["held"][0]:
                c["held"] = None
        return ("push", event.id not in dropped, False, sorted(dropped))

    def give_back(self, c: dict[str, Any], fl: dict[str, Any], count: int) -> None:
        if fl["whole"]:
            c["stored"], c["reason"], c["stored_count"] = (
                list(fl["stored_order"]),
                fl["reason"],
                count,
            )
        else:
            c["pending"] = fl["events"] + c["pending"]
            c["held"] = (len(fl["events"]), count)
            c["stored"], c["reason"] = list(fl["cancelled"]), fl["reason"]
            c["stored_count"] = 0

    def flush(self, now: float, token: object) -> Any:
        for c in self.chans.values():
            fl = c["flight"]
            if fl is not None and now - fl["start"] > self.deadline:
                c["flight"] = None
                self.give_back(c, fl, fl["attempt"] - 1)
        best = None
        for name, c in self.chans.items():
            if c["flight"] is not None or not (c["pending"] or c["stored"]):
                continue
            if c["backoff"] is not None and now < c["backoff"]:
                continue
            pool = c["pending"][:1] or c["stored"]
            wait = min((e[0].received_at, e[1]) for e in pool)
            if best is None or wait < best[0]:
                best = (wait, name)
        if best is None:
            return None
        name = best[1]
        c = self.chans[name]
        c["backoff"] = None
        if c["pending"]:
            if c["held"] is not None:
                n, attempt = c["held"][0], c["held"][1] + 1
            else:
                n, attempt = 1, 1
                head = c["pending"][0][2]
                while n < min(len(c["pending"]), self.max_batch) and c["pending"][n][2] == head:
                    n += 1
            taken, c["pending"], c["held"] = c["pending"][:n], c["pending"][n:], None
            events = sorted(taken, key=lambda e: e[0].event.created_at)
            fl = {"events": events, "cancelled": c["stored"], "whole": False}
        else:
            events = sorted(c["stored"], key=lambda e: e[0].event.created_at)
            attempt = c["stored_count"] + 1
            fl = {"events": events, "cancelled": [], "whole": True, "stored_order": c["stored"]}
        fl.update(reason=c["reason"], start=now, attempt=attempt, token=token, chan=name)
        c["stored"], c["reason"], c["stored_count"] = [], None, 0
        c["flight"] = fl
        return (
            "batch",
            name,
            [(e[0].event.id, e[0].prompt_tag, e[0].received_at) for e in fl["events"]],
            [(e[0].event.id, e[0].prompt_tag, e[0].received_at) for e in fl["cancelled"]],
            fl["reason"],
            attempt,
        )

    def live(self, token: object) -> tuple[dict[str, Any], dict[str, Any]] | None:
        for c in self.chans.values():
            if c["flight"] is not None and c["flight"]["token"] is token:
                return c, c["flight"]
        return None

    def complete(self, token: object) -> Any:
        found = self.live(token)
        if found is not None:
            c, fl = found
            self.remember(fl["cancelled"] + fl["events"])
            c["flight"] = None
        return None

    def fail(self, token: object, now: float) -> Any:
        found = self.live(token)
        if found is None:
            return None
        c, fl = found
        c["flight"] = None
        if fl["attempt"] + 1 > self.max_attempts:
            self.remember(fl["cancelled"] + fl["events"])
            return (
                "dead",
                fl["chan"],
                eids([e[0].event for e in fl["events"]]),
                eids([e[0].event for e in fl["cancelled"]]),
                fl["attempt"],
            )
        delay = base_delay(fl["attempt"]) * self.rng.uniform(0.8, 1.2)
        self.give_back(c, fl, fl["attempt"])
        c["backoff"] = now + delay
        return None

    def requeue(self, token: object, reason: str) -> Any:
        found = self.live(token)
        if found is not None:
            c, fl = found
            c["flight"] = None
            c["stored"] = fl["cancelled"] + fl["events"]
            c["reason"], c["stored_count"] = reason, 0
        return None

    def steer(self, event_id: str, outcome: str, now: float) -> Any:
        for c in self.chans.values():
            if c["flight"] is None:
                continue
            for i, e in enumerate(c["pending"]):
                if e[0].event.id == event_id:
                    if outcome != "failed":
                        c["pending"].pop(i)
                        self.remember([e])
                        if outcome == "injected":
                            c["flight"]["start"] = now
                    return ("queued", event_id)
        return None

    def restart(self) -> None:
        for c in self.chans.values():
            fl = c["flight"]
            if fl is not None:
                c["flight"] = None
                self.give_back(c, fl, fl["attempt"] - 1)


def _ref_channel(event: Event) -> str:
    # 01: the first h tag with a value decides; a valid id not starting with dm- is the channel.
    for tag in event.tags:
        if len(tag) >= 2 and tag[0] == "h":
            v = tag[1]
            ok = 1 <= len(v) <= 128 and all(
                ch.isascii() and (ch.isalnum() or ch in "_-") for ch in v
            )
            if ok and not v.startswith("dm-"):
                return v
            break
    return f"dm-{event.pubkey}"


def _ref_destination(event: Event) -> str:
    # Only the shapes the model's pool uses: a marked root tag, else top-level.
    for tag in event.tags:
        if len(tag) >= 4 and tag[0] == "e" and tag[3] == "root":
            return tag[1]
    return event.id


def _model_pool() -> list[Event]:
    keys = [ALICE, BOB, CAROL]
    pool = []
    for i in range(24):
        room = [None, "r0", "r1", "r1"][i % 4]
        thread = [None, THREAD_1, THREAD_1, THREAD_2][(i // 3) % 4]
        pool.append(chat(keys[(i // 2) % 3], 100 + (i * 5) % 7, channel=room, thread=thread))
    return pool


@pytest.mark.parametrize("seed", range(40))
def test_queue_matches_the_reference_model(seed: int) -> None:
    pool = _model_pool()
    r = random.Random(seed)
    limits = {
        "max_batch": r.choice([1, 2, 3, 50]),
        "max_pending": r.choice([1, 2, 4, 500]),
        "max_attempts": r.choice([1, 2, 3, 10]),
        "deadline": r.choice([0, 20, 60]),
    }
    q_rng, m_rng = random.Random(seed), random.Random(seed)
    q = DispatchQueue(rng=q_rng, **limits)
    model = _Ref(m_rng, limits)
    batches: list[tuple[Batch, object]] = []
    channels = sorted({_ref_channel(e) for e in pool})
    now = 0.0
    for step in range(250):
        now += r.choice([0, 0, 1, 2.5, 7, 30])
        op = r.random()
        if op < 0.35:
            e = r.choice(pool)
            tag = r.choice(["@mention", "#room"])
            at = now - r.choice([0, 0, 0, 0, 45])  # sometimes received "earlier": self-drops
            got, want = summarize(q.push(e, prompt_tag=tag, now=at)), model.push(e, tag, at)
        elif op < 0.6:
            token = object()
            b = q.flush_next(now)
            got, want = summarize(b), model.flush(now, token)
            if b is not None:
                batches.append((b, token))
        elif op < 0.9 and batches:
            b, token = batches[-1] if r.random() < 0.7 else r.choice(batches)
            which = r.choice(["complete", "fail", "fail", "interrupt", "steer"])
            if which == "complete":
                got, want = summarize(q.complete(b)), model.complete(token)
            elif which == "fail":
                got, want = summarize(q.fail(b, now)), model.fail(token, now)
            else:
                got, want = summarize(q.requeue_cancelled(b, which)), model.requeue(token, which)
        elif op < 0.97:
            e = r.choice(pool)
            outcome = r.choice(["injected", "started_new_turn", "failed"])
            got = summarize(q.steer_result(e.id, outcome, now))
            want = model.steer(e.id, outcome, now)
        else:
            q = DispatchQueue.restore(q.snapshot(), rng=q_rng, **limits)
            model.restart()
            got = want = None
        assert got == want, f"step {step}"
        for name in channels:
            c = model.chans.get(name)
            assert q.pending(name) == (len(c["pending"]) if c else 0), f"step {step} {name}"
            assert q.in_flight(name) == (c is not None and c["flight"] is not None), f"step {step}"


# --------------------------------------------------------------------------------------------
# Hostile arguments: whatever the queue refuses, it refuses with a BuzzError (docs/events.md: bad
# input never raises a bare TypeError/KeyError from inside the library).


@pytest.mark.parametrize(
    "call",
    [
        lambda q, e: q.push(e, now=math.nan),
        lambda q, e: q.push(e, now="1"),
        lambda q, e: q.push(e, prompt_tag=None, now=1),
        lambda q, e: q.push(e, prompt_tag="\ud800", now=1),  # could never be snapshotted
        lambda q, e: q.push(e, now=10**400),  # beyond the float range
        lambda q, e: DispatchQueue(deadline=10**400),
        lambda q, e: q.flush_next(None),
        lambda q, e: q.flush_next(math.inf),
        lambda q, e: q.complete(None),
        lambda q, e: q.fail("batch", 1),
        lambda q, e: q.requeue_cancelled(object(), "interrupt"),
        lambda q, e: q.in_flight([]),
        lambda q, e: q.pending({}),
        lambda q, e: q.steer_result(e.id, ["injected"], 1),
        lambda q, e: DispatchQueue(max_batch=0),
        lambda q, e: DispatchQueue(max_pending=-1),
        lambda q, e: DispatchQueue(max_attempts=1.5),
        lambda q, e: DispatchQueue(deadline=-1),
        lambda q, e: DispatchQueue(rng=object()),
        lambda q, e: DispatchQueue.restore(q.snapshot(), rng=object()),
    ],
)
def test_bad_arguments_raise_buzz_errors_only(call: Any) -> None:
    q = DispatchQueue(rng=random.Random(0))
    e = chat(ALICE)
    q.push(e, now=0)
    with pytest.raises(BuzzError):
        call(q, e)


# --------------------------------------------------------------------------------------------
# More of the attempt-count and cap sentences


def test_requeue_cancelled_drops_the_attempt_count() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a = chat(ALICE)
    q.push(a, now=0)
    q.fail(flush(q, 0), 0)
    retry = flush(q, 5)
    assert retry.attempt == 2
    q.requeue_cancelled(retry, "interrupt")
    whole = flush(q, 5)
    assert (ids(whole.events), whole.attempt, whole.cancel_reason) == ([a.id], 1, "interrupt")


def test_a_redispatched_set_dead_letters_as_events_after_max_attempts() -> None:
    rng = ScriptedRng([1.0])
    q = DispatchQueue(max_attempts=2, rng=rng)
    a1, a2 = chat(ALICE, 9), chat(BOB, 3)
    q.push(a1, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    q.push(a2, now=1)
    carrier = flush(q, 1)
    q.requeue_cancelled(carrier, "steer")
    whole = flush(q, 2)
    assert ids(whole.events) == [a2.id, a1.id]
    assert q.fail(whole, 2) is None
    again = flush(q, 7)
    assert again.attempt == 2
    dead = q.fail(again, 8)
    assert dead == DeadLetter(channel="room", events=again.events, cancelled_events=[], attempts=2)
    assert len(rng.calls) == 1
    assert_duplicate(q, a1)
    assert_duplicate(q, a2)


def test_operations_on_an_expired_batch_draw_nothing() -> None:
    rng = ScriptedRng()
    q = DispatchQueue(deadline=10, rng=rng)
    q.push(chat(ALICE), now=0)
    old = flush(q, 0)
    new = flush(q, 11)
    assert q.fail(old, 12) is None
    assert rng.calls == []
    assert q.in_flight("room")
    assert q.requeue_cancelled(old, "steer") is None
    assert q.flush_next(12) is None  # nothing was stored by the stale requeue
    q.complete(new)


def test_the_cap_is_enforced_only_by_push_even_after_restore() -> None:
    q = DispatchQueue(rng=random.Random(0))
    es = [chat(ALICE, thread=THREAD_1) for _ in range(4)]
    for i, e in enumerate(es):
        q.push(e, now=i)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0), max_pending=2)
    assert r.pending("room") == 4  # restore drops nothing
    newest = chat(BOB)
    res = r.push(newest, now=10)
    assert res.accepted
    assert sorted(res.dropped) == sorted(eids(es[:3]))
    assert r.pending("room") == 2


def test_any_accepted_prompt_tag_and_time_survive_a_snapshot() -> None:
    q = DispatchQueue(rng=random.Random(0))
    odd = [("", 2**70), ('<tag> & "quotes" \u2028 \U0001f41d', -5), ("\x00\n", 0.1)]
    for tag, now in odd:
        q.push(chat(ALICE, thread=THREAD_1), prompt_tag=tag, now=now)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    got = flush(r, 0)
    want = flush(q, 0)
    assert summarize(got) == summarize(want)
    assert sorted((x.prompt_tag, x.received_at) for x in got.events) == sorted(
        odd, key=lambda t: (t[0], t[1])
    )


# --------------------------------------------------------------------------------------------
# The owner's events and strangers' floods (docs/queue.md, "Floods")

OWNER_HEX = OWNER.public_key.hex


def strangers(n: int) -> list[SecretKey]:
    """``n`` distinct fixed keys, none of them the owner's."""
    return [SecretKey.from_str(format(0x5E00 + i, "064x")) for i in range(n)]


def stranger_channels(q: DispatchQueue) -> set[str]:
    """The channels in which an actor other than the owner holds an event, recomputed from
    what the queue exports (a batch in flight shows as pending)."""
    held = set()
    for name in q.channel_names():
        state = q.channel_state(name)
        assert state is not None
        if any(s.queued.event.pubkey != OWNER_HEX for s in [*state.pending, *state.cancelled]):
            held.add(name)
    return held


@pytest.mark.parametrize("cap", [1, 2, 3, 7, 50])
@pytest.mark.parametrize("owner_at", ["first", "middle", "last", "last_received_first"])
def test_the_owners_event_survives_a_flood_of_strangers_at_every_cap(
    cap: int, owner_at: str
) -> None:
    q = DispatchQueue(max_pending=cap, rng=random.Random(0), owner=OWNER_HEX)
    flood = [chat(s) for s in strangers(3 * cap + 2)]
    mine = chat(OWNER)
    order = {
        "first": [mine, *flood],
        "middle": [*flood[: len(flood) // 2], mine, *flood[len(flood) // 2 :]],
        "last": [*flood, mine],
        "last_received_first": [*flood, mine],
    }[owner_at]
    results = []
    for i, ev in enumerate(order):
        # Pushed last but received before every stranger's (a replay hands it over late).
        now = -1 if ev is mine and owner_at == "last_received_first" else i
        results.append((ev, q.push(ev, now=now)))
    dropped = [i for _, r in results for i in r.dropped]
    assert mine.id not in dropped
    assert dict((ev.id, r.accepted) for ev, r in results)[mine.id]
    assert q.pending(ROOM) == cap
    assert len(dropped) == len(order) - cap  # every drop reported, each once
    assert len(set(dropped)) == len(dropped)
    # What is left: the owner's event and the latest-received strangers'.
    left = ids(flush_batches(q))
    assert mine.id in left and len(left) == cap


def flush_batches(q: DispatchQueue) -> list[QueuedEvent]:
    """Every pending event, batch by batch (each completed)."""
    out: list[QueuedEvent] = []
    while (b := q.flush_next(10**6)) is not None:
        out += b.events
        q.complete(b)
    return out


@pytest.mark.parametrize(
    ("pushes", "cap", "dropped"),
    [
        # (actor, received_at) in push order; the indices of the events dropped, in order.
        ([("o", 1), ("o", 2), ("o", 3)], 2, [0]),  # the owner's own flood: the earliest goes
        ([("o", 1), ("s", 2), ("o", 3)], 2, [1]),  # a stranger's goes before an earlier owner's
        ([("s", 5), ("o", 1), ("o", 2)], 2, [0]),  # even one received after the owner's
        ([("o", 1), ("o", 2), ("s", 0)], 2, [2]),  # a stranger's push into the owner's full queue
        ([("o", 1), ("s", 2), ("s", 3), ("o", 4)], 2, [1, 2]),
        ([("s", 1), ("s", 1), ("s", 1)], 2, [0]),  # ties: push order
        ([("o", 1), ("o", 1), ("s", 1), ("o", 1)], 2, [2, 0]),
    ],
)
def test_which_event_a_full_channel_drops(
    pushes: list[tuple[str, float]], cap: int, dropped: list[int]
) -> None:
    q = DispatchQueue(max_pending=cap, rng=random.Random(0), owner=OWNER_HEX)
    people = iter(strangers(len(pushes)))
    events = [chat(OWNER if who == "o" else next(people)) for who, _ in pushes]
    got = []
    for ev, (_, now) in zip(events, pushes, strict=True):
        got += q.push(ev, now=now).dropped
    assert got == [events[i].id for i in dropped]


def test_a_strangers_flood_after_a_fail_never_drops_the_owners_returned_batch() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(0), owner=OWNER_HEX)
    mine = chat(OWNER, thread=ROOT_1)
    q.push(mine, now=1)
    batch = flush(q, 2)
    for i, s in enumerate(strangers(5)):
        q.push(chat(s), now=3 + i)
    assert q.fail(batch, 10) is None  # back at the front: four pending, one over the cap
    r = q.push(chat(strangers(6)[5]), now=11)
    assert mine.id not in r.dropped and len(r.dropped) == 2
    retry = flush(q, 10**6)
    assert (ids(retry.events), retry.attempt) == ([mine.id], 2)  # the returned set, as is


def test_without_an_owner_the_cap_drops_the_earliest_received_as_before() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(0))
    a, b, c = chat(OWNER), chat(ALICE), chat(BOB)
    for i, ev in enumerate([a, b, c]):
        r = q.push(ev, now=i)
    assert r.dropped == [a.id]


@pytest.mark.parametrize("cap", [1, 2, 4, 16])
def test_strangers_hold_at_most_the_cap_of_channels_and_the_owner_is_never_refused(
    cap: int,
) -> None:
    q = DispatchQueue(rng=random.Random(0), owner=OWNER_HEX, max_stranger_channels=cap)
    people = strangers(cap + 5)
    results = [q.push(chat(s, channel=f"s{i}"), now=i) for i, s in enumerate(people)]
    assert [r.accepted for r in results] == [True] * cap + [False] * 5
    assert all(r.refused and not r.duplicate and r.dropped == [] for r in results[cap:])
    assert stranger_channels(q) == {f"s{i}" for i in range(cap)}
    assert q.channel_names() == [f"s{i}" for i in range(cap)]  # no channel was opened
    # The owner opens channels beyond the cap, and each held channel still takes strangers'.
    for i in range(cap + 3):
        assert q.push(chat(OWNER, channel=f"o{i}"), now=100 + i).accepted
    again = [q.push(chat(s, channel=f"s{i % cap}"), now=200 + i) for i, s in enumerate(people)]
    assert all(r.accepted for r in again)
    # A stranger joining a channel only the owner holds opens a stranger channel: refused.
    r = q.push(chat(people[0], channel="o0"), now=300)
    assert (r.accepted, r.refused) == (False, True)
    assert len(stranger_channels(q)) == cap


def test_a_stranger_channel_that_settles_makes_room_and_a_refused_event_may_come_again() -> None:
    q = DispatchQueue(rng=random.Random(0), owner=OWNER_HEX, max_stranger_channels=1)
    first, second = strangers(2)
    a = chat(first, channel="s0")
    late = chat(second, channel="s1")
    assert q.push(a, now=1).accepted
    assert q.push(late, now=2).refused
    batch = flush(q, 3)
    assert q.push(late, now=4).refused  # in flight: still held
    q.requeue_cancelled(batch, "interrupt")
    assert q.push(late, now=5).refused  # stored as cancelled: still held
    redispatch = flush(q, 6)
    q.complete(redispatch)
    assert stranger_channels(q) == set()
    r = q.push(late, now=7)  # a refused event is not remembered: it is accepted now
    assert r.accepted and not r.refused
    assert stranger_channels(q) == {"s1"}


def test_an_owners_event_in_a_stranger_channel_keeps_it_held_until_the_strangers_leave() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(0), owner=OWNER_HEX, max_stranger_channels=1)
    s0, s1 = strangers(2)
    q.push(chat(s0, channel="lobby"), now=1)
    q.push(chat(OWNER, channel="lobby"), now=2)
    q.push(chat(OWNER, channel="lobby"), now=3)  # drops the stranger's: the channel is freed
    assert stranger_channels(q) == set()
    assert q.push(chat(s1, channel="other"), now=4).accepted


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_keep_the_stranger_bound_and_every_owner_event(seed: int) -> None:
    """Seeded random pushes (the owner and strangers over several channels), flushes,
    completions, failures, interrupts, steers and restores.  Every push is refused exactly when
    it would open one stranger channel more than the cap, and an owner's event is dropped only
    when nothing but the owner's is left pending in its channel."""
    rng = random.Random(seed)
    cap, per_channel = rng.choice([1, 2, 3]), rng.choice([1, 2, 4])
    limits: dict[str, Any] = {"max_pending": per_channel, "max_stranger_channels": cap}
    q = DispatchQueue(rng=random.Random(seed), owner=OWNER_HEX, **limits)
    people = strangers(6)
    running: dict[str, Batch] = {}
    refusals = owner_drops = 0
    for step in range(400):
        op = rng.random()
        if op < 0.55:
            author = OWNER if rng.random() < 0.3 else rng.choice(people)
            ev = chat(author, channel=f"c{rng.randrange(6)}", thread=rng.choice([None, ROOT_1]))
            channel = nip10.queue_channel(ev)
            held = stranger_channels(q)
            owners = owner_ids(q, channel)
            r = q.push(ev, now=rng.choice([step, step - 50]))  # some arrive "received earlier"
            opens = author is not OWNER and channel not in held
            assert r.refused == (opens and len(held) >= cap)
            refusals += r.refused
            if owners & set(r.dropped) or (author is OWNER and ev.id in r.dropped):
                batch = running.get(channel)
                flying = {x.event.id for x in batch.events} if batch is not None else set()
                left = q.channel_state(channel)
                assert left is not None
                waiting = [s for s in left.pending if s.queued.event.id not in flying]
                assert all(s.queued.event.pubkey == OWNER_HEX for s in waiting)
                owner_drops += 1
        elif op < 0.75:
            b = q.flush_next(step)
            if b is not None:
                running[b.channel] = b
        elif running:
            b = running.pop(rng.choice(sorted(running)))
            action = rng.choice(["complete", "fail", "interrupt", "steer"])
            if action == "complete":
                q.complete(b)
            elif action == "fail":
                q.fail(b, step)
            elif action == "interrupt":
                q.requeue_cancelled(b, "interrupt")
            else:
                state = q.channel_state(b.channel)
                assert state is not None
                for waiting in state.pending[len(b.events) :][:1]:
                    q.steer_result(waiting.queued.event.id, "injected", step)
                running[b.channel] = b
        if rng.random() < 0.05:
            q = DispatchQueue.restore(
                q.snapshot(), rng=random.Random(step), owner=OWNER_HEX, **limits
            )
            running.clear()  # a restore returns every batch that was in flight
        assert len(stranger_channels(q)) <= cap
    assert refusals  # the runs do reach the cap


def owner_ids(q: DispatchQueue, channel: str) -> set[str]:
    state = q.channel_state(channel)
    if state is None:
        return set()
    return {s.queued.event.id for s in state.pending if s.queued.event.pubkey == OWNER_HEX}


def test_the_same_pushes_give_the_same_drops_refusals_and_batches() -> None:
    def run() -> tuple[list[Any], bytes]:
        q = DispatchQueue(
            max_pending=3, rng=random.Random(5), owner=OWNER_HEX, max_stranger_channels=2
        )
        out: list[Any] = []
        for i, ev in enumerate(script):
            out.append(q.push(ev, now=i % 4))  # many equal receipt times: ties by push order
        while (b := q.flush_next(100)) is not None:
            out.append(plain(b))
            q.complete(b)
        return out, q.snapshot()

    people = strangers(4)
    pick = random.Random(3)
    script = [
        chat(OWNER if pick.random() < 0.3 else pick.choice(people), channel=f"c{pick.randrange(3)}")
        for _ in range(40)
    ]
    first, again = run(), run()
    assert first == again
    assert any(isinstance(r, PushResult) and r.refused for r in first[0])
    assert any(isinstance(r, PushResult) and r.dropped for r in first[0])


def test_owner_and_stranger_channel_limits_are_checked() -> None:
    for bad in (0, -1, True, 1.5, "64"):
        with pytest.raises(QueueError, match="max_stranger_channels"):
            DispatchQueue(max_stranger_channels=bad)  # type: ignore[arg-type]
    for wrong in (42, b"\x00" * 32, "npub1notakey"):
        with pytest.raises(QueueError, match="DispatchQueue owner"):
            DispatchQueue(owner=wrong)  # type: ignore[arg-type]
    for form in (OWNER.public_key, OWNER.public_key.bech32, OWNER_HEX.upper()):
        assert DispatchQueue(owner=form).owner == OWNER_HEX
    assert DispatchQueue(owner=OWNER_HEX, max_stranger_channels=1).max_stranger_channels == 1


def test_a_held_batch_waits_with_its_attempt_uncounted_until_released() -> None:
    q = DispatchQueue(max_attempts=1, rng=random.Random(1))
    a1 = chat(ALICE, 1, thread=ROOT_1)
    q.push(a1, now=0)
    b = flush(q, 1)
    q.hold(b, 1000)  # not run (a budget): back in the queue, no attempt, no dead letter
    assert q.flush_next(999) is None and q.pending(b.channel) == 1
    again = flush(q, 1000)
    assert ids(again.events) == [a1.id] and again.attempt == 1
    q.hold(again, 5000)
    assert q.release(again.channel) and not q.release(again.channel)
    assert flush(q, 2).attempt == 1
    assert not q.release("no-such-channel")
