"""Dispatch queue (docs/queue.md): one test per rule, plus a random-operation state machine."""

from __future__ import annotations

import ast
import collections
import json
import random
from collections.abc import Iterator
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
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10

ALICE = SecretKey.from_str("11" * 32)
BOB = SecretKey.from_str("22" * 32)
CAROL = SecretKey.from_str("33" * 32)
AUX = b"\x00" * 32
ROOT_1 = "a1" * 32
ROOT_2 = "b2" * 32
ROOM = "room"


def msg(
    who: SecretKey,
    created_at: int,
    *,
    thread: str | None = None,
    channel: str | None = ROOM,
    content: str = "",
    kind: int = 9,
) -> Event:
    """A signed chat message; ``thread`` makes it a NIP-10 reply to that root."""
    tags: list[list[str]] = []
    if channel is not None:
        tags.append(["h", channel])
    if thread is not None:
        tags.append(["e", thread, "", "root"])
    return sign_event(
        who,
        kind=kind,
        content=content or f"m{created_at}",
        tags=tags,
        created_at=created_at,
        aux_rand=AUX,
    )


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
    a, b = msg(ALICE, 10, thread=ROOT_1), msg(BOB, 11, thread=ROOT_1)
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
    a, b = msg(ALICE, 10, thread=ROOT_1), msg(ALICE, 11, thread=ROOT_2)
    q.push(a, now=1)
    q.push(b, now=2)
    first = flush(q, 3)
    q.complete(first)
    assert [ids(first.events), ids(flush(q, 4).events)] == [[a.id], [b.id]]


def test_two_top_level_messages_are_two_batches() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a, b = msg(ALICE, 10), msg(ALICE, 11)
    q.push(a, now=1)
    q.push(b, now=2)
    first = flush(q, 3)
    q.complete(first)
    assert [ids(first.events), ids(flush(q, 4).events)] == [[a.id], [b.id]]


def test_a_reply_burst_is_one_batch_ordered_by_created_at_stably() -> None:
    q = DispatchQueue(rng=random.Random(1))
    # Pushed out of created_at order; two share created_at 20 and keep push order.
    burst = [
        msg(ALICE, 30, thread=ROOT_1),
        msg(ALICE, 20, thread=ROOT_1, content="x"),
        msg(ALICE, 10, thread=ROOT_1),
        msg(ALICE, 20, thread=ROOT_1, content="y"),
    ]
    for i, ev in enumerate(burst):
        q.push(ev, prompt_tag="@reply", now=i)
    b = flush(q, 10)
    assert ids(b.events) == [burst[2].id, burst[1].id, burst[3].id, burst[0].id]
    assert [e.prompt_tag for e in b.events] == ["@reply"] * 4
    assert [e.received_at for e in b.events] == [2, 1, 3, 0]
    assert b.cancelled_events == [] and b.cancel_reason is None
    assert q.pending(ROOM) == 0


def test_a_thread_root_and_its_replies_share_a_destination() -> None:
    q = DispatchQueue(rng=random.Random(1))
    root = msg(ALICE, 10)
    reply = msg(ALICE, 11, thread=root.id)
    q.push(root, now=1)
    q.push(reply, now=2)
    assert ids(flush(q, 3).events) == [root.id, reply.id]


def test_51_events_are_50_then_1() -> None:
    q = DispatchQueue(rng=random.Random(1))
    events = [msg(ALICE, 100 + i, thread=ROOT_1) for i in range(51)]
    for i, ev in enumerate(events):
        q.push(ev, now=i)
    first = flush(q, 100)
    assert ids(first.events) == [e.id for e in events[:50]]
    q.complete(first)
    assert ids(flush(q, 101).events) == [events[50].id]


def test_only_the_contiguous_prefix_with_the_heads_key_is_taken() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a1, a2 = msg(ALICE, 1, thread=ROOT_1), msg(ALICE, 2, thread=ROOT_1)
    b1, a3 = msg(BOB, 3, thread=ROOT_1), msg(ALICE, 4, thread=ROOT_1)
    for i, ev in enumerate([a1, a2, b1, a3]):
        q.push(ev, now=i)
    got = []
    for t in range(3):
        batch = flush(q, 10 + t)
        got.append(ids(batch.events))
        q.complete(batch)
    assert got == [[a1.id, a2.id], [b1.id], [a3.id]]
    assert q.flush_next(20) is None


def test_channel_is_the_h_tag_else_the_authors_direct_channel() -> None:
    q = DispatchQueue(rng=random.Random(1))
    dm = msg(ALICE, 1, channel=None, kind=1)
    bad = msg(BOB, 2, channel="dm-spoof")  # reserved prefix: no channel
    q.push(dm, now=1)
    q.push(bad, now=2)
    assert q.pending(f"dm-{ALICE.public_key.hex}") == 1
    assert q.pending(f"dm-{BOB.public_key.hex}") == 1
    assert q.pending("dm-spoof") == 0
    assert flush(q, 3).channel == f"dm-{ALICE.public_key.hex}"


def test_channels_run_concurrently_and_the_longest_waiting_goes_first() -> None:
    q = DispatchQueue(rng=random.Random(1))
    # Received order decides, not created_at and not channel name.
    x = msg(ALICE, 50, channel="zeta")
    y = msg(ALICE, 10, channel="alpha")
    z = msg(BOB, 5, channel="mid")
    q.push(x, now=1.0)
    q.push(y, now=2.0)
    q.push(z, now=2.0)  # same received_at as y: push order breaks the tie
    order = [flush(q, 5).channel for _ in range(3)]
    assert order == ["zeta", "alpha", "mid"]
    assert all(q.in_flight(c) for c in order)
    assert q.flush_next(6) is None


def test_a_channels_wait_is_its_head_events_receipt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(msg(ALICE, 1, channel="one"), now=1)
    q.push(msg(BOB, 2, channel="one"), now=10)
    q.push(msg(ALICE, 3, channel="two"), now=5)
    assert [flush(q, 11).channel, flush(q, 11).channel] == ["one", "two"]


def test_a_later_received_head_waits_behind_an_earlier_one() -> None:
    q = DispatchQueue(rng=random.Random(1))
    late = msg(ALICE, 1, channel="late")
    early = msg(ALICE, 2, channel="early")
    q.push(late, now=9)
    q.push(early, now=3)  # callers may report an earlier receive time
    assert flush(q, 10).channel == "early"


# --- limits ---------------------------------------------------------------------------------


def test_the_cap_drops_the_earliest_received_pending_event_and_reports_it() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(1))
    events = [msg(ALICE, i, thread=ROOT_1) for i in range(4)]
    results = [q.push(ev, now=10 + i) for i, ev in enumerate(events)]
    assert results[:3] == [PushResult(True, False, [])] * 3
    assert results[3] == PushResult(accepted=True, duplicate=False, dropped=[events[0].id])
    assert q.pending(ROOM) == 3
    # The dropped event is gone: the batch holds the three others.
    assert ids(flush(q, 20).events) == [e.id for e in events[1:]]


def test_the_cap_can_drop_the_pushed_event_itself() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(1))
    q.push(msg(ALICE, 1), now=10)
    q.push(msg(ALICE, 2), now=11)
    old = msg(ALICE, 3)
    r = q.push(old, now=5)  # received earliest of all
    assert r == PushResult(accepted=False, duplicate=False, dropped=[old.id])
    assert q.pending(ROOM) == 2


def test_the_cap_ties_are_broken_by_push_order() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(1))
    a, b, c = msg(ALICE, 1), msg(BOB, 2), msg(CAROL, 3)
    q.push(a, now=5)
    q.push(b, now=5)
    assert q.push(c, now=5).dropped == [a.id]


def test_the_cap_applies_per_channel_and_not_to_in_flight_or_stored_events() -> None:
    q = DispatchQueue(max_pending=1, rng=random.Random(1))
    a = msg(ALICE, 1)
    q.push(a, now=1)
    batch = flush(q, 2)
    assert q.push(msg(ALICE, 2), now=3).dropped == []  # a is in flight, not pending
    q.requeue_cancelled(batch, "interrupt")
    assert q.pending(ROOM) == 1  # stored cancelled events are not pending
    assert q.push(msg(ALICE, 3, channel="other"), now=4).dropped == []


def test_events_returned_by_fail_may_exceed_the_cap_until_the_next_push() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(1))
    a1, a2 = msg(ALICE, 1, thread=ROOT_1), msg(ALICE, 2, thread=ROOT_1)
    q.push(a1, now=1)
    q.push(a2, now=2)
    batch = flush(q, 3)
    b1, b2 = msg(BOB, 4), msg(BOB, 5)
    q.push(b1, now=4)
    q.push(b2, now=5)
    assert q.fail(batch, 6) is None
    assert q.pending(ROOM) == 4
    late = msg(CAROL, 6)
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
    pending, flying, stored = msg(ALICE, 1), msg(ALICE, 2, channel="f"), msg(ALICE, 3, channel="s")
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
    fresh = msg(BOB, 4, channel="s")
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


def test_steer_delivered_events_are_duplicates() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(msg(ALICE, 1), now=1)
    flush(q, 2)
    injected, started = msg(BOB, 3), msg(BOB, 4)
    q.push(injected, now=3)
    q.push(started, now=4)
    q.steer_result(injected.id, "injected", 5)
    q.steer_result(started.id, "started_new_turn", 5)
    assert _is_duplicate(q, injected) and _is_duplicate(q, started)


def test_the_last_10000_settled_ids_are_remembered() -> None:
    n = REMEMBERED_IDS + 1
    q = DispatchQueue(max_batch=n, max_pending=n, rng=random.Random(1))
    events = [msg(ALICE, i, thread=ROOT_1) for i in range(n)]
    for ev in events:
        q.push(ev, now=0)
    q.complete(flush(q, 1))
    assert not _is_duplicate(q, events[0])  # forgotten: it was the oldest of 10,001
    assert _is_duplicate(q, events[1])


def test_a_dropped_event_is_not_remembered() -> None:
    # Choice: docs/queue.md's duplicate memory does not hold dropped events.
    q = DispatchQueue(max_pending=1, rng=random.Random(1))
    a, b = msg(ALICE, 1), msg(ALICE, 2)
    q.push(a, now=1)
    assert q.push(b, now=2).dropped == [a.id]
    assert q.push(a, now=3) == PushResult(True, False, [b.id])


# --- failure: backoff and dead letter -------------------------------------------------------


def test_backoff_delay_is_exponential_capped_and_jittered_with_one_draw_per_fail() -> None:
    rng = CountingRng(3)
    q = DispatchQueue(max_attempts=20, rng=rng)
    a = msg(ALICE, 1)
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
        q.push(msg(ALICE, 1), now=0)
        assert q.fail(flush(q, 0), 100) is None
        # Attempt 1: 5 s × [0.8, 1.2].
        assert q.flush_next(100 + 4 - 1e-9) is None
        assert q.flush_next(100 + 6) is not None


def test_a_backing_off_channel_does_not_block_other_channels() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(msg(ALICE, 1, channel="one"), now=0)
    q.push(msg(ALICE, 2, channel="two"), now=1)
    q.fail(flush(q, 2), 2)
    assert flush(q, 3).channel == "two"


def test_the_tenth_fail_dead_letters_without_a_draw_or_backoff() -> None:
    rng = CountingRng(5)
    q = DispatchQueue(rng=rng)
    a1, a2 = msg(ALICE, 1, thread=ROOT_1), msg(ALICE, 2, thread=ROOT_1)
    q.push(a1, now=0)
    q.push(a2, now=0)
    now = 0.0
    for attempt in range(1, 10):
        b = flush(q, now)
        assert b.attempt == attempt
        assert q.fail(b, now) is None
        now += 400  # past any backoff
    last = flush(q, now)
    assert last.attempt == 10
    dead = q.fail(last, now)
    assert dead == DeadLetter(ROOM, last.events, [], 10)
    assert len(rng.draws) == 9
    assert q.pending(ROOM) == 0 and not q.in_flight(ROOM)
    assert _is_duplicate(q, a1, now) and _is_duplicate(q, a2, now)
    # No backoff after a dead letter: a new event goes at once.
    q.push(msg(ALICE, 3), now=now)
    assert flush(q, now).attempt == 1


def test_a_dead_letter_carries_the_cancelled_events() -> None:
    q = DispatchQueue(max_attempts=2, rng=random.Random(1))
    old, new = msg(ALICE, 1), msg(BOB, 2)
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
    a1, a2 = msg(ALICE, 2, thread=ROOT_1), msg(ALICE, 1, thread=ROOT_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    assert ids(b.events) == [a2.id, a1.id]
    a3 = msg(ALICE, 3, thread=ROOT_1)  # same authority key, pushed meanwhile
    q.push(a3, now=3)
    q.fail(b, 4)
    retry = flush(q, 100)
    assert ids(retry.events) == [a2.id, a1.id] and retry.attempt == 2
    q.complete(retry)
    after = flush(q, 101)
    assert ids(after.events) == [a3.id] and after.attempt == 1


def test_the_count_is_dropped_when_the_returned_set_loses_an_event() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(1))
    a1, a2 = msg(ALICE, 1, thread=ROOT_1), msg(ALICE, 2, thread=ROOT_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = flush(q, 2)
    q.fail(b, 2)
    assert flush(q, 100).attempt == 2  # the set kept its count...
    q2 = DispatchQueue(max_pending=3, rng=random.Random(1))
    q2.push(a1, now=0)
    q2.push(a2, now=1)
    q2.fail(flush(q2, 2), 2)
    a3, a4 = msg(ALICE, 3, thread=ROOT_1), msg(ALICE, 4, thread=ROOT_1)
    q2.push(a3, now=3)
    assert q2.push(a4, now=4).dropped == [a1.id]  # ...until it loses one
    merged = flush(q2, 100)
    # No longer that set: a fresh batch by the prefix rule, attempt 1.
    assert ids(merged.events) == [a2.id, a3.id, a4.id] and merged.attempt == 1


# --- deadline -------------------------------------------------------------------------------


def test_a_batch_past_its_deadline_expires_and_is_flushed_again_by_the_same_call() -> None:
    rng = CountingRng(9)
    q = DispatchQueue(deadline=100, rng=rng)
    a = msg(ALICE, 1)
    q.push(a, now=0)
    first = flush(q, 10)
    assert q.flush_next(110) is None  # exactly the deadline: not past it
    again = q.flush_next(110.5)
    assert again is not None and again is not first
    assert ids(again.events) == [a.id] and again.attempt == 1  # no attempt counted
    assert rng.draws == []  # no backoff
    # The expired batch is stale: operations on it do nothing.
    assert q.complete(first) is None
    assert q.fail(first, 111) is None and rng.draws == []
    assert q.requeue_cancelled(first, "interrupt") is None
    assert q.in_flight(ROOM)
    q.complete(again)
    assert _is_duplicate(q, a)


def test_expiry_keeps_the_attempt_count_of_the_set() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(1))
    q.push(msg(ALICE, 1), now=0)
    q.fail(flush(q, 0), 0)
    second = flush(q, 50)
    assert second.attempt == 2
    third = flush(q, 151)
    assert third.attempt == 2


def test_expiry_returns_cancelled_events_to_the_stored_ones() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(1))
    old, new = msg(ALICE, 1), msg(BOB, 2)
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
    q.push(msg(ALICE, 1), now=0)
    running = flush(q, 0)
    steer = msg(ALICE, 2)
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
    q.push(msg(ALICE, 1), now=0)
    flush(q, 0)
    steer = msg(ALICE, 2)
    q.push(steer, now=90)
    assert q.steer_result(steer.id, "started_new_turn", 90) is not None
    assert q.pending(ROOM) == 0
    assert q.flush_next(101) is not None  # expired on the original clock


# --- steer results --------------------------------------------------------------------------


def test_a_failed_steer_leaves_the_event_pending() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(msg(ALICE, 1), now=0)
    b = flush(q, 0)
    steer = msg(ALICE, 2)
    q.push(steer, now=1)
    assert q.steer_result(steer.id, "failed", 2) is not None
    assert q.pending(ROOM) == 1
    q.complete(b)
    assert ids(flush(q, 3).events) == [steer.id]


def test_steer_result_ignores_other_ids_and_rejects_unknown_outcomes() -> None:
    q = DispatchQueue(rng=random.Random(1))
    waiting = msg(ALICE, 1, channel="idle")
    q.push(waiting, now=0)
    q.push(msg(BOB, 2), now=1)
    running = flush(q, 1)
    assert running.channel == "idle"
    # A pending event of a channel that is not in flight: nothing happens.
    other = msg(BOB, 3)
    q.push(other, now=2)
    assert q.steer_result(other.id, "injected", 3) is None
    assert q.pending(ROOM) == 2
    # An id in the running batch itself is not pending: nothing happens.
    assert q.steer_result(waiting.id, "injected", 3) is None
    assert q.steer_result("ff" * 32, "started_new_turn", 3) is None
    for bad in ("startedNewTurn", "INJECTED", "", None):
        with pytest.raises(QueueError):
            q.steer_result(other.id, bad, 3)  # type: ignore[arg-type]


# --- cancel and interrupt -------------------------------------------------------------------


def test_an_interrupted_batch_rides_with_the_next_batch_whatever_its_key() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a = msg(ALICE, 1, thread=ROOT_1)
    q.push(a, now=0)
    running = flush(q, 0)
    interrupt = msg(BOB, 2, thread=ROOT_2)
    q.push(interrupt, now=1)
    assert q.requeue_cancelled(running, "interrupt") is None
    assert not q.in_flight(ROOM) and q.pending(ROOM) == 1
    nxt = flush(q, 2)
    assert ids(nxt.events) == [interrupt.id]
    assert ids(nxt.cancelled_events) == [a.id] and nxt.cancel_reason == "interrupt"
    assert nxt.attempt == 1
    q.complete(nxt)
    assert _is_duplicate(q, a)  # cancelled events count as delivered too
    assert q.flush_next(3) is None


def test_requeue_stores_previous_cancelled_events_then_events_with_the_latest_reason() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a, b, c = msg(ALICE, 5), msg(BOB, 1), msg(CAROL, 3)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "steer")
    q.push(b, now=1)
    second = flush(q, 1)
    assert second.cancel_reason == "steer"
    q.push(c, now=2)
    q.requeue_cancelled(second, "interrupt")
    third = flush(q, 3)
    assert ids(third.events) == [c.id]
    assert ids(third.cancelled_events) == [a.id, b.id]  # stored order, not created_at
    assert third.cancel_reason == "interrupt"


def test_stored_cancelled_events_are_redispatched_whole_when_nothing_is_pending() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(1))
    # Three actors, two batches: more than max_batch stored cancelled events in the end.
    a, b, c = msg(ALICE, 30), msg(BOB, 10), msg(CAROL, 20, thread=ROOT_1)
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


def test_stored_cancelled_events_ride_with_new_events_after_a_redispatch_failed() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a = msg(ALICE, 1)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    q.fail(flush(q, 1), 1)
    new = msg(BOB, 2)
    q.push(new, now=2)
    b = flush(q, 500)
    assert (ids(b.events), ids(b.cancelled_events), b.attempt) == ([new.id], [a.id], 1)


def test_a_channel_with_only_stored_events_waits_since_their_earliest_receipt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a1, a2 = msg(ALICE, 1, channel="stored"), msg(BOB, 2, channel="stored")
    q.push(a1, now=5)
    q.requeue_cancelled(flush(q, 5), "interrupt")
    q.push(a2, now=2)  # reported as received earlier than a1
    q.requeue_cancelled(flush(q, 6), "interrupt")
    assert q.pending("stored") == 0
    q.push(msg(ALICE, 3, channel="fresh"), now=3)
    # Stored a1 (received 5) and a2 (received 2): the channel waits since 2, before "fresh".
    whole = flush(q, 7)
    assert whole.channel == "stored" and ids(whole.events) == [a1.id, a2.id]
    assert flush(q, 7).channel == "fresh"


def test_a_channel_with_pending_events_waits_since_its_head_not_its_stored_events() -> None:
    # Choice: with a new event pending, the head pending event sets the channel's wait.
    q = DispatchQueue(rng=random.Random(1))
    old = msg(ALICE, 1, channel="stored")
    q.push(old, now=1)
    q.requeue_cancelled(flush(q, 1), "interrupt")
    q.push(msg(ALICE, 2, channel="fresh"), now=4)
    q.push(msg(BOB, 3, channel="stored"), now=5)
    assert flush(q, 6).channel == "fresh"
    carry = flush(q, 6)
    assert carry.channel == "stored" and ids(carry.cancelled_events) == [old.id]


def test_a_bad_cancel_reason_raises_queue_error() -> None:
    q = DispatchQueue(rng=random.Random(1))
    q.push(msg(ALICE, 1), now=0)
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
    a = msg(ALICE, 1)
    q.push(a, now=0)
    b = flush(q, 0)
    q.complete(b)
    q.push(msg(ALICE, 2), now=1)
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
    a = msg(ALICE, 1)
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
        msg(ALICE, 1, thread=ROOT_1),
        msg(ALICE, 2, thread=ROOT_1),
        msg(BOB, 3, thread=ROOT_1),
        msg(ALICE, 4, channel="other"),
        msg(CAROL, 5, channel=None, kind=1),
        msg(BOB, 6, thread=ROOT_2),
        msg(ALICE, 7, thread=ROOT_2),
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
        msg(ALICE, 8, thread=ROOT_1),
        msg(BOB, 9, channel="late"),
        msg(CAROL, 5, channel=None, kind=1),
    ]
    assert _continue(q, more) == _continue(restored, more)


def test_restore_returns_in_flight_batches_to_the_front_without_counting_an_attempt() -> None:
    q = DispatchQueue(rng=random.Random(1))
    old, a1, a2, later = msg(CAROL, 1), msg(ALICE, 2), msg(ALICE, 3), msg(BOB, 4)
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
    a = msg(ALICE, 1)
    q.push(a, now=0)
    q.requeue_cancelled(flush(q, 0), "interrupt")
    q.fail(flush(q, 1), 1)
    running = flush(q, 100)
    assert running.attempt == 2 and running.cancel_reason == "interrupt"
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(1))
    assert r.pending(ROOM) == 0
    assert plain(flush(r, 100)) == plain(running)


def test_restore_takes_limits_from_the_caller() -> None:
    q = DispatchQueue(rng=random.Random(1))
    for i in range(5):
        q.push(msg(ALICE, i, thread=ROOT_1), now=i)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(1), max_batch=2)
    assert len(flush(r, 10).events) == 2


def test_restore_remembers_delivered_ids() -> None:
    q = DispatchQueue(rng=random.Random(1))
    a = msg(ALICE, 1)
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
        q.push(msg(ALICE, 1).to_dict(), now=0)  # type: ignore[arg-type]
    with pytest.raises(QueueError):
        q.push(msg(ALICE, 1), now=float("inf"))
    with pytest.raises(QueueError):
        q.flush_next("now")  # type: ignore[arg-type]


def test_the_default_rng_needs_no_seed() -> None:
    q = DispatchQueue()
    q.push(msg(ALICE, 1), now=0)
    assert q.fail(flush(q, 0), 0) is None
    assert q.flush_next(3.9) is None
    assert q.flush_next(6.0) is not None


def test_the_queue_module_is_pure() -> None:
    tree = ast.parse(Path(queue_module.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    forbidden = {"socket", "asyncio", "subprocess", "time", "datetime", "random", "os"}
    assert not imported & forbidden
    assert "environ" not in Path(queue_module.__file__).read_text(encoding="utf-8")


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
            msg(
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
