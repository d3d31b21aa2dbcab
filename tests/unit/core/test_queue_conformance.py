"""Conformance tests for the dispatch queue, written from the text of docs/queue.md (and
docs/events.md for routing).

Expected values are computed by hand or by the tiny helpers below (the backoff formula, a recording
RNG), never by asking the queue under test.  Only the public API of docs/queue.md is used.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from nostr_buzz import (
    Batch,
    BuzzError,
    DeadLetter,
    DispatchQueue,
    Event,
    PushResult,
    QueuedEvent,
    QueueError,
    SecretKey,
    sign_event,
)

ALICE = SecretKey.from_str("a1" * 32)
BOB = SecretKey.from_str("b2" * 32)
CAROL = SecretKey.from_str("c3" * 32)
AUX = b"\x07" * 32
THREAD_1 = "1f" * 32
THREAD_2 = "2e" * 32

_serial = itertools.count()


def ev(
    who: SecretKey,
    created_at: int = 1_700_000_000,
    *,
    room: str | None = "room",
    thread: str | None = None,
    kind: int = 9,
    tags: Sequence[Sequence[str]] | None = None,
) -> Event:
    """A signed event with a unique id; ``thread`` makes it a marked NIP-10 reply to that root."""
    if tags is None:
        built: list[list[str]] = []
        if room is not None:
            built.append(["h", room])
        if thread is not None:
            built.append(["e", thread, "", "root"])
        tags = built
    return sign_event(
        who,
        kind=kind,
        content=f"message {next(_serial)}",
        tags=tags,
        created_at=created_at,
        aux_rand=AUX,
    )


def dm(who: SecretKey) -> str:
    return f"dm-{who.public_key.hex}"


def ids(items: Sequence[QueuedEvent]) -> list[str]:
    return [q.event.id for q in items]


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


def only_batch(q: DispatchQueue, now: float) -> Batch:
    b = q.flush_next(now)
    assert b is not None
    return b


# --------------------------------------------------------------------------------------------
# Public names, keyword names, result shapes


def test_errors_are_buzz_and_value_errors() -> None:
    assert issubclass(QueueError, BuzzError)
    assert issubclass(QueueError, ValueError)


def test_api_block_calls_with_its_keyword_names() -> None:
    q = DispatchQueue(
        max_batch=50, max_pending=500, max_attempts=10, deadline=7300, rng=random.Random(7)
    )
    e = ev(ALICE)
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
    b2 = only_batch(q, 13)
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
    e = ev(ALICE)
    assert q.push(e, now=0).accepted
    b = only_batch(q, 0)
    assert ids(b.events) == [e.id]
    assert b.events[0].prompt_tag == "@mention"


def test_batch_and_queued_event_fields() -> None:
    q = DispatchQueue(rng=random.Random(0))
    e1 = ev(ALICE, 200, thread=THREAD_1)
    e2 = ev(ALICE, 100, thread=THREAD_1)
    q.push(e1, prompt_tag="#room", now=5.5)
    q.push(e2, now=6)
    b = only_batch(q, 7)
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
    e = ev(BOB, tags=tags)
    q.push(e, now=1)
    expected = channel if channel is not None else dm(BOB)
    assert q.pending(expected) == 1
    b = only_batch(q, 1)
    assert b.channel == expected
    assert q.in_flight(expected)


def test_direct_channels_are_per_author() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE, room=None), ev(BOB, room=None)
    q.push(a, now=1)
    q.push(b, now=2)
    b1, b2 = only_batch(q, 3), only_batch(q, 3)  # different channels run concurrently
    assert (b1.channel, ids(b1.events)) == (dm(ALICE), [a.id])
    assert (b2.channel, ids(b2.events)) == (dm(BOB), [b.id])


def flush_all(q: DispatchQueue, now: float) -> list[list[str]]:
    """Flush and complete repeatedly: the batches, as id lists, in flush order."""
    out: list[list[str]] = []
    while (b := q.flush_next(now)) is not None:
        out.append(ids(b.events))
        q.complete(b)
    return out


def test_burst_of_replies_from_one_actor_in_one_thread_is_one_turn() -> None:
    q = DispatchQueue(rng=random.Random(0))
    es = [ev(ALICE, 100 + i, thread=THREAD_1) for i in range(5)]
    for i, e in enumerate(es):
        q.push(e, now=i)
    assert flush_all(q, 10) == [eids(es)]


def test_two_actors_in_one_thread_are_two_turns() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE, thread=THREAD_1), ev(BOB, thread=THREAD_1)
    q.push(a, now=1)
    q.push(b, now=2)
    assert flush_all(q, 3) == [[a.id], [b.id]]


def test_one_actor_in_two_threads_is_two_turns() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE, thread=THREAD_1), ev(ALICE, thread=THREAD_2)
    q.push(a, now=1)
    q.push(b, now=2)
    assert flush_all(q, 3) == [[a.id], [b.id]]


def test_two_top_level_messages_from_one_actor_are_two_turns() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE), ev(ALICE)
    q.push(a, now=1)
    q.push(b, now=1)
    assert flush_all(q, 3) == [[a.id], [b.id]]


def test_a_top_level_message_and_replies_to_it_share_a_destination() -> None:
    # A top-level event's destination is its own id; a reply's is its root: the same thread.
    q = DispatchQueue(rng=random.Random(0))
    root = ev(ALICE, 100)
    reply = ev(ALICE, 101, thread=root.id)
    reply_only_marker = ev(
        ALICE, 102, tags=[["h", "room"], ["e", root.id, "", "reply"]]
    )  # only a reply marker: destination is the reply id
    for i, e in enumerate([root, reply, reply_only_marker]):
        q.push(e, now=i)
    assert flush_all(q, 5) == [[root.id, reply.id, reply_only_marker.id]]


def test_destination_routing_shapes_group_correctly() -> None:
    q = DispatchQueue(rng=random.Random(0))
    marked = ev(
        ALICE, 1, tags=[["h", "room"], ["e", THREAD_1, "", "root"], ["e", THREAD_2, "", "reply"]]
    )
    positional = ev(ALICE, 2, kind=1, tags=[["h", "room"], ["e", THREAD_1], ["e", THREAD_2]])
    comment = ev(ALICE, 3, kind=1111, tags=[["h", "room"], ["E", THREAD_1], ["e", THREAD_2]])
    citation = ev(ALICE, 4, kind=9, tags=[["h", "room"], ["e", THREAD_1]])  # chat: not routing
    upper = ev(ALICE, 5, tags=[["h", "room"], ["e", THREAD_1.upper(), "", "root"]])
    for i, e in enumerate([marked, positional, comment, citation, upper]):
        q.push(e, now=i)
    assert flush_all(q, 9) == [[marked.id, positional.id, comment.id], [citation.id], [upper.id]]


def test_only_the_contiguous_prefix_with_the_heads_authority_is_taken() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a1, a2 = ev(ALICE, 10, thread=THREAD_1), ev(ALICE, 11, thread=THREAD_1)
    b1 = ev(BOB, 12, thread=THREAD_1)
    a3 = ev(ALICE, 13, thread=THREAD_1)
    for i, e in enumerate([a1, a2, b1, a3]):
        q.push(e, now=i)
    assert flush_all(q, 9) == [[a1.id, a2.id], [b1.id], [a3.id]]


def test_batch_is_ordered_by_created_at_stably() -> None:
    q = DispatchQueue(rng=random.Random(0))
    x = ev(ALICE, 50, thread=THREAD_1)
    y = ev(ALICE, 40, thread=THREAD_1)
    z = ev(ALICE, 50, thread=THREAD_1)
    w = ev(ALICE, 40, thread=THREAD_1)
    for e in [x, y, z, w]:
        q.push(e, now=0)
    assert flush_all(q, 1) == [[y.id, w.id, x.id, z.id]]


def test_default_max_batch_is_50_and_the_prefix_is_taken_in_queue_order() -> None:
    q = DispatchQueue(rng=random.Random(0))
    # created_at descending: the 50 taken are the first 50 in the queue, then sorted.
    es = [ev(ALICE, 1000 - i, thread=THREAD_1) for i in range(51)]
    for e in es:
        q.push(e, now=0)
    assert flush_all(q, 1) == [eids(es[:50])[::-1], [es[50].id]]


def test_custom_max_batch() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(0))
    es = [ev(ALICE, 10 + i, thread=THREAD_1) for i in range(5)]
    for e in es:
        q.push(e, now=0)
    assert flush_all(q, 1) == [eids(es[0:2]), eids(es[2:4]), [es[4].id]]


# --------------------------------------------------------------------------------------------
# Which channel flushes


def test_waiting_longest_compares_received_at_not_created_at_or_push_order() -> None:
    q = DispatchQueue(rng=random.Random(0))
    late = ev(ALICE, 1, room="late")  # oldest created_at, received last
    early = ev(BOB, 999, room="early")
    q.push(late, now=20)
    q.push(early, now=10)
    assert only_batch(q, 30).channel == "early"
    assert only_batch(q, 30).channel == "late"
    assert q.flush_next(30) is None


def test_received_at_ties_are_broken_by_push_order() -> None:
    q = DispatchQueue(rng=random.Random(0))
    for room in ["r3", "r1", "r2"]:
        q.push(ev(ALICE, room=room), now=5)
    assert [only_batch(q, 6).channel for _ in range(3)] == ["r3", "r1", "r2"]


def test_one_batch_per_channel_in_flight() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE), ev(BOB)
    c = ev(CAROL, room="other")
    q.push(a, now=1)
    q.push(b, now=2)
    q.push(c, now=3)
    b1 = only_batch(q, 4)
    assert ids(b1.events) == [a.id]
    b2 = only_batch(q, 4)  # room is in flight: the other channel goes
    assert ids(b2.events) == [c.id]
    assert q.flush_next(4) is None
    assert q.pending("room") == 1
    q.complete(b1)
    assert not q.in_flight("room")
    assert ids(only_batch(q, 5).events) == [b.id]


def test_unknown_channel_is_idle_and_empty() -> None:
    q = DispatchQueue(rng=random.Random(0))
    assert q.in_flight("nowhere") is False
    assert q.pending("nowhere") == 0
    assert q.flush_next(0) is None


# --------------------------------------------------------------------------------------------
# The cap


def test_cap_drops_the_earliest_received_pending_event() -> None:
    q = DispatchQueue(max_pending=3, rng=random.Random(0))
    es = [ev(ALICE) for _ in range(4)]
    results = [q.push(e, now=10 + i) for i, e in enumerate(es)]
    assert [r.dropped for r in results[:3]] == [[], [], []]
    assert results[3] == PushResult(accepted=True, duplicate=False, dropped=[es[0].id])
    assert q.pending("room") == 3
    assert flush_all(q, 20) == [[es[1].id], [es[2].id], [es[3].id]]


def test_cap_may_drop_the_pushed_event_itself() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(0))
    a, b = ev(ALICE), ev(BOB)
    q.push(a, now=10)
    q.push(b, now=11)
    old = ev(CAROL)
    r = q.push(old, now=5)  # received earliest of the three
    assert (r.accepted, r.duplicate, r.dropped) == (False, False, [old.id])
    assert q.pending("room") == 2
    # A dropped event is in none of the duplicate states: pushing it again is accepted.
    r2 = q.push(old, now=12)
    assert r2.accepted and not r2.duplicate and r2.dropped == [a.id]


def test_cap_ties_are_broken_by_push_order() -> None:
    q = DispatchQueue(max_pending=2, rng=random.Random(0))
    es = [ev(ALICE) for _ in range(3)]
    rs = [q.push(e, now=7) for e in es]
    assert rs[2].dropped == [es[0].id]
    assert rs[2].accepted


def test_cap_is_per_channel_and_ignores_in_flight_and_stored_cancelled() -> None:
    q = DispatchQueue(max_pending=1, rng=random.Random(0))
    a = ev(ALICE)
    q.push(a, now=1)
    b = only_batch(q, 2)
    assert q.push(ev(BOB), now=3).dropped == []  # a is in flight, not pending
    q.requeue_cancelled(b, "interrupt")
    assert q.pending("room") == 1  # stored cancelled events are not counted
    assert q.push(ev(CAROL, room="elsewhere"), now=4).dropped == []
    r = q.push(ev(CAROL), now=5)
    assert len(r.dropped) == 1 and r.dropped[0] != a.id


def test_default_cap_is_500() -> None:
    q = DispatchQueue(rng=random.Random(0))
    es = [ev(ALICE) for _ in range(501)]
    rs = [q.push(e, now=i) for i, e in enumerate(es)]
    assert all(r.dropped == [] for r in rs[:500])
    assert rs[500].dropped == [es[0].id]
    assert q.pending("room") == 500


def test_events_returned_by_fail_may_exceed_the_cap_until_the_next_push() -> None:
    q = DispatchQueue(max_pending=2, rng=ScriptedRng([1.0]))
    a1, a2 = ev(ALICE, 1, thread=THREAD_1), ev(ALICE, 2, thread=THREAD_1)
    q.push(a1, now=1)
    q.push(a2, now=2)
    b = only_batch(q, 3)
    c1, c2 = ev(BOB), ev(CAROL)
    q.push(c1, now=4)
    q.push(c2, now=5)
    assert q.fail(b, now=6) is None
    assert q.pending("room") == 4  # over the cap, and nothing is dropped yet
    c3 = ev(BOB, thread=THREAD_2)
    r = q.push(c3, now=7)
    assert r.accepted
    assert sorted(r.dropped) == sorted([a1.id, a2.id, c1.id])
    assert q.pending("room") == 2


def test_losing_an_event_to_the_cap_drops_the_attempt_count() -> None:
    q = DispatchQueue(max_pending=2, rng=ScriptedRng([1.0]))
    a1, a2 = ev(ALICE, 1, thread=THREAD_1), ev(ALICE, 2, thread=THREAD_1)
    q.push(a1, now=1)
    q.push(a2, now=2)
    b = only_batch(q, 3)
    assert q.fail(b, now=3) is None  # back off until 8
    r = q.push(ev(BOB), now=4)
    assert r.dropped == [a1.id]
    b2 = only_batch(q, 8)
    assert ids(b2.events) == [a2.id]
    assert b2.attempt == 1


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
    a, b = ev(ALICE), ev(BOB)
    q.push(a, now=1)
    q.push(b, now=2)
    assert_duplicate(q, b)  # pending
    batch = only_batch(q, 3)
    assert_duplicate(q, a)  # in flight
    q.fail(batch, now=4)
    assert_duplicate(q, a)  # pending again, channel backing off


def test_duplicate_while_stored_cancelled_and_carried_in_flight() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a, b = ev(ALICE), ev(BOB)
    q.push(a, now=1)
    q.requeue_cancelled(only_batch(q, 2), "interrupt")
    assert_duplicate(q, a)  # stored cancelled
    q.push(b, now=3)
    carrier = only_batch(q, 4)
    assert ids(carrier.cancelled_events) == [a.id]
    assert_duplicate(q, a)  # in flight as a cancelled event
    q.complete(carrier)
    assert_duplicate(q, a)  # delivered through cancelled_events
    assert_duplicate(q, b)  # delivered


def test_duplicate_after_steer_delivery_and_after_dead_letter() -> None:
    q = DispatchQueue(max_attempts=1, rng=random.Random(0))
    a, s1, s2, s3 = ev(ALICE), ev(BOB), ev(CAROL), ev(BOB, thread=THREAD_1)
    q.push(a, now=1)
    batch = only_batch(q, 2)
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
    a, b = ev(ALICE), ev(BOB)
    q.push(a, now=1)
    q.requeue_cancelled(only_batch(q, 1), "steer")
    q.push(b, now=2)
    carrier = only_batch(q, 3)
    dead = q.fail(carrier, now=4)
    assert isinstance(dead, DeadLetter)
    assert ids(dead.events) == [b.id]
    assert ids(dead.cancelled_events) == [a.id]
    assert_duplicate(q, a)
    assert_duplicate(q, b)
    assert q.flush_next(5) is None  # they left the queue


def test_the_last_10000_delivered_ids_are_remembered() -> None:
    q = DispatchQueue(rng=random.Random(0))
    first = [ev(ALICE, thread=THREAD_1) for _ in range(50)]
    for e in first:
        q.push(e, now=0)
    q.complete(only_batch(q, 0))
    for n in range(1, 200):  # 199 more batches of 50: 10,000 delivered in all
        for _ in range(50):
            q.push(ev(ALICE, thread=THREAD_1), now=n)
        q.complete(only_batch(q, n))
    for e in first:  # all still remembered
        assert q.push(e, now=500).duplicate
    q.push(ev(BOB), now=501)
    q.complete(only_batch(q, 501))  # the 10,001st: exactly one of the first 50 is forgotten
    accepted = [q.push(e, now=502).accepted for e in first]
    assert accepted.count(True) == 1


# --------------------------------------------------------------------------------------------
# Failure, backoff and dead letters

JITTERS = [0.8125, 1.1875, 1.0, 0.875, 1.125, 0.9375, 0.8, 1.2, 1.0625]


def test_backoff_table_for_attempts_1_to_10_with_default_limits() -> None:
    rng = ScriptedRng(JITTERS)
    q = DispatchQueue(rng=rng)
    a = ev(ALICE)
    q.push(a, now=0)
    now = 1.0
    b = only_batch(q, now)
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
        b = only_batch(q, now)
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
    c = ev(BOB)
    q.push(c, now=now + 1)
    assert ids(only_batch(q, now + 1).events) == [c.id]


def test_backoff_boundary_with_a_seeded_rng() -> None:
    seed = 20261202
    q = DispatchQueue(rng=random.Random(seed))
    expected = random.Random(seed)
    q.push(ev(ALICE), now=0)
    b = only_batch(q, 0)
    t = 1234.5
    q.fail(b, t)
    until = t + 5 * expected.uniform(0.8, 1.2)
    assert q.flush_next(before(until)) is None
    b2 = only_batch(q, until)  # "not flushed again before now + delay": at it, it may be
    assert b2.attempt == 2
    t2 = until + 10
    q.fail(b2, t2)
    until2 = t2 + 10 * expected.uniform(0.8, 1.2)
    assert q.flush_next(before(until2)) is None
    assert only_batch(q, until2).attempt == 3


def test_backing_off_channel_does_not_block_other_channels() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a, c = ev(ALICE), ev(BOB, room="other")
    q.push(a, now=0)
    q.push(c, now=1)
    b = only_batch(q, 2)
    assert b.channel == "room"
    q.fail(b, 2)
    assert only_batch(q, 3).channel == "other"
    assert q.flush_next(6.5) is None
    assert only_batch(q, 7).channel == "room"  # 2 + 5 × 1.0


def test_max_attempts_is_configurable() -> None:
    rng = ScriptedRng([1.0, 1.0])
    q = DispatchQueue(max_attempts=3, rng=rng)
    q.push(ev(ALICE), now=0)
    b = only_batch(q, 0)
    assert q.fail(b, 0) is None
    b = only_batch(q, 5)
    assert q.fail(b, 5) is None
    b = only_batch(q, 15)
    assert b.attempt == 3
    dead = q.fail(b, 15)
    assert isinstance(dead, DeadLetter) and dead.attempts == 3
    assert len(rng.calls) == 2

    rng1 = ScriptedRng()
    q1 = DispatchQueue(max_attempts=1, rng=rng1)
    q1.push(ev(ALICE), now=0)
    dead1 = q1.fail(only_batch(q1, 0), 0)
    assert isinstance(dead1, DeadLetter) and dead1.attempts == 1
    assert rng1.calls == []


def test_a_failed_batch_is_retried_with_exactly_its_events() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a1 = ev(ALICE, 5, thread=THREAD_1)
    q.push(a1, now=0)
    b = only_batch(q, 1)
    a2 = ev(ALICE, 1, thread=THREAD_1)  # same authority, pushed meanwhile, older created_at
    q.push(a2, now=2)
    q.fail(b, 3)
    assert q.pending("room") == 2
    retry = only_batch(q, 8)
    assert ids(retry.events) == [a1.id]
    assert retry.attempt == 2
    q.complete(retry)
    nxt = only_batch(q, 8)
    assert ids(nxt.events) == [a2.id]
    assert nxt.attempt == 1


def test_failed_events_go_back_to_the_front_in_batch_order() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a1, a2 = ev(ALICE, 9, thread=THREAD_1), ev(ALICE, 3, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = only_batch(q, 2)
    assert ids(b.events) == [a2.id, a1.id]
    c = ev(BOB, 1)
    q.push(c, now=3)
    # Another channel whose head arrived after the failed events but before the fail.
    d = ev(CAROL, room="other")
    q.push(d, now=4)
    q.fail(b, 10)
    # At 15 the room's head (received at 0) has waited longest.
    retry = only_batch(q, 15)
    assert ids(retry.events) == [a2.id, a1.id]
    assert only_batch(q, 15).channel == "other"
    q.complete(retry)
    assert ids(only_batch(q, 15).events) == [c.id]


def test_fail_returns_the_batchs_cancelled_events_with_their_reason() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a, b = ev(ALICE), ev(BOB)
    q.push(a, now=0)
    q.requeue_cancelled(only_batch(q, 1), "steer")
    q.push(b, now=2)
    carrier = only_batch(q, 3)
    assert (ids(carrier.events), ids(carrier.cancelled_events), carrier.cancel_reason) == (
        [b.id],
        [a.id],
        "steer",
    )
    q.fail(carrier, 4)
    assert q.pending("room") == 1
    retry = only_batch(q, 9)
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
    a1, a2 = ev(ALICE, 20, thread=THREAD_1), ev(ALICE, 10, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=1)
    b = only_batch(q, 2)
    assert q.requeue_cancelled(b, "interrupt") is None
    assert not q.in_flight("room")
    assert q.pending("room") == 0  # stored cancelled events are not pending
    again = only_batch(q, 3)
    assert ids(again.events) == [a2.id, a1.id]
    assert again.cancelled_events == []
    assert again.cancel_reason == "interrupt"
    assert again.attempt == 1
    q.complete(again)
    assert q.flush_next(4) is None


def test_cancelled_events_ride_with_the_next_batch_whatever_its_authority() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = ev(ALICE, thread=THREAD_1)
    q.push(a, now=0)
    b = only_batch(q, 1)
    c1, c2 = ev(BOB, thread=THREAD_2), ev(CAROL)
    q.push(c1, now=2)
    q.push(c2, now=3)
    q.requeue_cancelled(b, "interrupt")
    nxt = only_batch(q, 4)
    assert ids(nxt.events) == [c1.id]  # the normal prefix rule; cancelled ones not merged in
    assert ids(nxt.cancelled_events) == [a.id]
    assert nxt.cancel_reason == "interrupt"
    q.complete(nxt)
    last = only_batch(q, 5)
    assert ids(last.events) == [c2.id]
    assert last.cancelled_events == [] and last.cancel_reason is None


def test_requeue_stores_previous_cancelled_then_events_with_the_latest_reason() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = ev(ALICE, 300)
    q.push(a, now=0)
    q.requeue_cancelled(only_batch(q, 1), "interrupt")
    b = ev(BOB, 100)
    q.push(b, now=2)
    carrier = only_batch(q, 3)
    q.requeue_cancelled(carrier, "steer")
    c = ev(CAROL, 200)
    q.push(c, now=4)
    nxt = only_batch(q, 5)
    assert ids(nxt.events) == [c.id]
    assert ids(nxt.cancelled_events) == [a.id, b.id]  # stored order, not created_at order
    assert nxt.cancel_reason == "steer"
    q.requeue_cancelled(nxt, "interrupt")
    whole = only_batch(q, 6)
    assert ids(whole.events) == [b.id, c.id, a.id]  # re-dispatched: by created_at
    assert whole.cancel_reason == "interrupt"


def test_redispatch_of_cancelled_events_is_not_limited_by_max_batch() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(0))
    es = [ev(ALICE, 100 + i, thread=THREAD_1) for i in range(5)]
    for e in es:
        q.push(e, now=0)
    q.requeue_cancelled(only_batch(q, 1), "interrupt")
    carrier = only_batch(q, 2)
    assert ids(carrier.events) == eids(es[2:4])
    q.requeue_cancelled(carrier, "interrupt")
    carrier2 = only_batch(q, 3)
    assert ids(carrier2.events) == [es[4].id]
    assert ids(carrier2.cancelled_events) == eids(es[:4])
    q.requeue_cancelled(carrier2, "steer")
    whole = only_batch(q, 4)
    assert ids(whole.events) == eids(es)
    assert whole.cancel_reason == "steer"


def test_wait_of_a_channel_with_only_cancelled_events_is_their_earliest_received_at() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a1, a2 = ev(ALICE, thread=THREAD_1), ev(ALICE, thread=THREAD_1)
    q.push(a1, now=10)
    q.push(a2, now=30)
    b = only_batch(q, 31)
    q.push(ev(BOB, room="other"), now=20)
    q.push(ev(CAROL, room="third"), now=5)
    q.requeue_cancelled(b, "interrupt")
    assert [only_batch(q, 40).channel for _ in range(3)] == ["third", "room", "other"]


def test_a_failed_redispatch_returns_to_the_stored_cancelled_events_whole() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0, 1.0]))
    a1, a2 = ev(ALICE, 2, thread=THREAD_1), ev(ALICE, 1, thread=THREAD_1)
    q.push(a1, now=0)
    q.push(a2, now=0)
    q.requeue_cancelled(only_batch(q, 1), "steer")
    whole = only_batch(q, 2)
    assert ids(whole.events) == [a2.id, a1.id]
    q.fail(whole, 3)
    assert q.pending("room") == 0  # back among the stored cancelled events, not pending
    assert q.flush_next(before(8.0)) is None
    again = only_batch(q, 8)
    assert ids(again.events) == [a2.id, a1.id]
    assert again.cancel_reason == "steer"
    assert again.attempt == 2
    q.fail(again, 9)
    c = ev(BOB)
    q.push(c, now=10)
    nxt = only_batch(q, 19)  # 9 + 10 × 1.0
    assert ids(nxt.events) == [c.id]
    assert sorted(ids(nxt.cancelled_events)) == sorted([a1.id, a2.id])
    assert nxt.cancel_reason == "steer"


def test_an_expired_redispatch_returns_to_the_stored_cancelled_events() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(0))
    a = ev(ALICE)
    q.push(a, now=0)
    q.requeue_cancelled(only_batch(q, 0), "interrupt")
    whole = only_batch(q, 0)
    c = ev(BOB)
    q.push(c, now=50)
    nxt = only_batch(q, 101)  # whole expired; the channel's next batch carries it
    assert ids(nxt.events) == [c.id]
    assert ids(nxt.cancelled_events) == [a.id]
    assert nxt.cancel_reason == "interrupt"
    assert q.complete(whole) is None


def test_bad_reason_raises_queue_error_and_changes_nothing() -> None:
    q = DispatchQueue(rng=random.Random(0))
    a = ev(ALICE)
    q.push(a, now=0)
    b = only_batch(q, 0)
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
    a = ev(ALICE)
    q.push(a, now=0)
    b = only_batch(q, 100)
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
    a1 = ev(ALICE, 5, thread=THREAD_1)
    q.push(a1, now=0)
    q.fail(only_batch(q, 0), 0)
    b = only_batch(q, 5)
    assert b.attempt == 2
    a2 = ev(ALICE, 1, thread=THREAD_1)  # same authority, pushed during flight
    q.push(a2, now=6)
    again = only_batch(q, 106)
    assert ids(again.events) == [a1.id]
    assert again.attempt == 2
    q.fail(again, 110)
    assert q.flush_next(before(120.0)) is None  # attempt 2's delay: 10 × 1.0
    assert only_batch(q, 120).attempt == 3
    assert len(rng.calls) == 2


def test_expired_events_are_flushed_before_younger_heads_and_without_backoff() -> None:
    q = DispatchQueue(deadline=100, rng=ScriptedRng())
    a, c = ev(ALICE), ev(BOB, room="other")
    q.push(a, now=0)
    b = only_batch(q, 0)
    q.push(c, now=50)
    again = only_batch(q, 101)
    assert again.channel == "room"
    assert only_batch(q, 101).channel == "other"
    assert q.complete(b) is None


def test_expiry_returns_cancelled_events_to_the_stored_ones() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(0))
    a, c = ev(ALICE), ev(BOB)
    q.push(a, now=0)
    q.requeue_cancelled(only_batch(q, 0), "interrupt")
    q.push(c, now=1)
    carrier = only_batch(q, 2)
    assert ids(carrier.cancelled_events) == [a.id]
    again = only_batch(q, 103)
    assert (ids(again.events), ids(again.cancelled_events), again.cancel_reason) == (
        [c.id],
        [a.id],
        "interrupt",
    )


def test_one_flush_next_expires_every_overdue_batch() -> None:
    q = DispatchQueue(deadline=10, rng=random.Random(0))
    a, c = ev(ALICE), ev(BOB, room="other")
    q.push(a, now=0)
    q.push(c, now=0)
    ba, bc = only_batch(q, 0), only_batch(q, 0)
    first = only_batch(q, 20)
    second = only_batch(q, 20)
    assert {first.channel, second.channel} == {"room", "other"}
    assert first.channel == "room"  # received first (push order tie-break)
    assert q.complete(ba) is None and q.complete(bc) is None


# --------------------------------------------------------------------------------------------
# Steer results


def steer_setup(deadline: float = 100) -> tuple[DispatchQueue, Batch, Event]:
    q = DispatchQueue(deadline=deadline, rng=random.Random(0))
    q.push(ev(ALICE), now=0)
    b = only_batch(q, 0)
    s = ev(BOB)
    q.push(s, now=50)
    return q, b, s


def test_injected_steer_removes_the_event_and_restarts_the_deadline() -> None:
    q, b, s = steer_setup()
    q.steer_result(s.id, "injected", now=80)
    assert q.pending("room") == 0
    assert q.flush_next(180) is None  # 100 s since the steer: not expired
    again = q.flush_next(after(180.0))
    assert again is not None and ids(again.events) == ids(b.events)
    assert q.complete(b) is None


def test_started_new_turn_removes_the_event_without_restarting_the_deadline() -> None:
    q, b, s = steer_setup()
    q.steer_result(s.id, "started_new_turn", now=80)
    assert q.pending("room") == 0
    again = q.flush_next(after(100.0))
    assert again is not None and ids(again.events) == ids(b.events)


def test_failed_steer_leaves_the_event_pending() -> None:
    q, b, s = steer_setup()
    q.steer_result(s.id, "failed", now=80)
    assert q.pending("room") == 1
    assert q.flush_next(100) is None
    q.complete(b)
    assert ids(only_batch(q, 101).events) == [s.id]


def test_steer_result_for_other_ids_does_nothing() -> None:
    q = DispatchQueue(deadline=100, rng=random.Random(0))
    a, idle, s = ev(ALICE), ev(BOB, room="idle"), ev(CAROL)
    q.push(a, now=0)
    b = only_batch(q, 0)
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
    a = ev(ALICE)
    q.push(a, now=0)
    b = only_batch(q, 0)
    q.complete(b)
    assert q.complete(b) is None
    assert q.fail(b, 1) is None
    assert q.requeue_cancelled(b, "interrupt") is None
    assert rng.calls == []
    assert q.flush_next(1) is None  # nothing was stored or requeued

    c = ev(BOB)
    q.push(c, now=2)
    b2 = only_batch(q, 2)
    q.requeue_cancelled(b2, "steer")
    assert q.complete(b2) is None
    assert q.fail(b2, 3) is None
    redo = only_batch(q, 3)  # still stored, not delivered, no backoff
    assert ids(redo.events) == [c.id] and redo.cancel_reason == "steer"
    assert q.fail(redo, 4) is None
    assert q.complete(redo) is None  # failed: stale now
    assert q.fail(redo, 5) is None
    assert len(rng.calls) == 1


def test_a_batch_of_another_queue_is_not_this_queues_in_flight_batch() -> None:
    e = ev(ALICE)
    q1, q2 = DispatchQueue(rng=random.Random(0)), DispatchQueue(rng=random.Random(0))
    q1.push(e, now=0)
    q2.push(e, now=0)
    b1, b2 = only_batch(q1, 0), only_batch(q2, 0)
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
        pool.append(ev(keys[i % 3 if i % 5 else 0], 100 + (i * 7) % 13, room=room, thread=thread))
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
    delivered, failing, cancelled = ev(ALICE, room="d"), ev(BOB, room="f"), ev(CAROL, room="c")
    q.push(delivered, now=0)
    q.complete(only_batch(q, 0))
    q.push(failing, now=1)
    q.fail(only_batch(q, 1), 10)  # backs off until 15
    q.push(cancelled, now=2)
    q.requeue_cancelled(only_batch(q, 2), "steer")
    tie_a, tie_b = ev(ALICE, room="t2"), ev(ALICE, room="t1")
    q.push(tie_a, now=3)
    q.push(tie_b, now=3)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert r.push(delivered, now=20).duplicate
    assert r.push(cancelled, now=20).duplicate
    assert r.pending("f") == 1 and r.pending("c") == 0 and r.pending("t1") == 1
    got = [only_batch(r, 14) for _ in range(3)]
    assert [(b.channel, b.cancel_reason) for b in got] == [
        ("c", "steer"),
        ("t2", None),
        ("t1", None),
    ]
    assert r.flush_next(14.5) is None
    retry = only_batch(r, 15)
    assert (retry.channel, retry.attempt) == ("f", 2)


def test_in_flight_batches_return_to_the_front_on_restore_without_an_attempt() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a1 = ev(ALICE, 5, thread=THREAD_1)
    q.push(a1, now=0)
    q.fail(only_batch(q, 0), 0)
    running = only_batch(q, 5)
    assert running.attempt == 2
    a2 = ev(ALICE, 1, thread=THREAD_1)  # same authority, pushed while running
    q.push(a2, now=6)
    pre = ev(BOB)
    q.push(pre, now=6.5)  # a cancelled carry on another channel, in flight at snapshot time
    q.push(ev(CAROL, room="x"), now=7)
    xb = only_batch(q, 7)
    q.requeue_cancelled(xb, "interrupt")
    q.push(ev(BOB, room="x"), now=8)
    carrier = only_batch(q, 8)
    assert carrier.cancelled_events
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert not r.in_flight("room") and not r.in_flight("x")
    assert r.pending("room") == 3
    first = only_batch(r, 9)
    assert (first.channel, ids(first.events), first.attempt) == ("room", [a1.id], 2)
    second = only_batch(r, 9)
    assert second.channel == "x"
    assert ids(second.events) == ids(carrier.events)
    assert ids(second.cancelled_events) == ids(carrier.cancelled_events)
    assert second.cancel_reason == "interrupt"
    assert second.attempt == 1


def test_restore_takes_the_limits_from_the_caller() -> None:
    q = DispatchQueue(max_batch=50, rng=random.Random(0))
    es = [ev(ALICE, 10 + i, thread=THREAD_1) for i in range(5)]
    for e in es:
        q.push(e, now=0)
    data = q.snapshot()
    r = DispatchQueue.restore(data, rng=random.Random(0), max_batch=2, max_pending=3, deadline=10)
    b = only_batch(r, 1)
    assert ids(b.events) == eids(es[:2])
    assert r.push(ev(BOB), now=2).dropped == [es[2].id]
    assert r.flush_next(12) is not None  # expired after 10 s and flushed again
    assert r.complete(b) is None


def test_restored_default_limits() -> None:
    q = DispatchQueue(max_batch=2, rng=random.Random(0))
    es = [ev(ALICE, 10 + i, thread=THREAD_1) for i in range(3)]
    for e in es:
        q.push(e, now=0)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    assert ids(only_batch(r, 1).events) == eids(es)  # default max_batch 50, not the snapshot's 2


def rich_snapshot() -> bytes:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    q.push(ev(ALICE, room="d"), now=0)
    q.complete(only_batch(q, 0))
    q.push(ev(BOB, room="f"), now=1)
    q.fail(only_batch(q, 1), 10)
    q.push(ev(CAROL, room="c"), now=2)
    q.requeue_cancelled(only_batch(q, 2), "steer")
    q.push(ev(ALICE, room="c", thread=THREAD_1), now=3)
    q.push(ev(ALICE, room=None), now=4)
    only_batch(q, 5)
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
def test_corrupt_snapshots_raise_queue_error(data: bytes) -> None:
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
        pool.append(ev(keys[(i // 2) % 3], 100 + (i * 5) % 7, room=room, thread=thread))
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
    e = ev(ALICE)
    q.push(e, now=0)
    with pytest.raises(BuzzError):
        call(q, e)


# --------------------------------------------------------------------------------------------
# More of the attempt-count and cap sentences


def test_requeue_cancelled_drops_the_attempt_count() -> None:
    q = DispatchQueue(rng=ScriptedRng([1.0]))
    a = ev(ALICE)
    q.push(a, now=0)
    q.fail(only_batch(q, 0), 0)
    retry = only_batch(q, 5)
    assert retry.attempt == 2
    q.requeue_cancelled(retry, "interrupt")
    whole = only_batch(q, 5)
    assert (ids(whole.events), whole.attempt, whole.cancel_reason) == ([a.id], 1, "interrupt")


def test_a_redispatched_set_dead_letters_as_events_after_max_attempts() -> None:
    rng = ScriptedRng([1.0])
    q = DispatchQueue(max_attempts=2, rng=rng)
    a1, a2 = ev(ALICE, 9), ev(BOB, 3)
    q.push(a1, now=0)
    q.requeue_cancelled(only_batch(q, 0), "interrupt")
    q.push(a2, now=1)
    carrier = only_batch(q, 1)
    q.requeue_cancelled(carrier, "steer")
    whole = only_batch(q, 2)
    assert ids(whole.events) == [a2.id, a1.id]
    assert q.fail(whole, 2) is None
    again = only_batch(q, 7)
    assert again.attempt == 2
    dead = q.fail(again, 8)
    assert dead == DeadLetter(channel="room", events=again.events, cancelled_events=[], attempts=2)
    assert len(rng.calls) == 1
    assert_duplicate(q, a1)
    assert_duplicate(q, a2)


def test_operations_on_an_expired_batch_draw_nothing() -> None:
    rng = ScriptedRng()
    q = DispatchQueue(deadline=10, rng=rng)
    q.push(ev(ALICE), now=0)
    old = only_batch(q, 0)
    new = only_batch(q, 11)
    assert q.fail(old, 12) is None
    assert rng.calls == []
    assert q.in_flight("room")
    assert q.requeue_cancelled(old, "steer") is None
    assert q.flush_next(12) is None  # nothing was stored by the stale requeue
    q.complete(new)


def test_the_cap_is_enforced_only_by_push_even_after_restore() -> None:
    q = DispatchQueue(rng=random.Random(0))
    es = [ev(ALICE, thread=THREAD_1) for _ in range(4)]
    for i, e in enumerate(es):
        q.push(e, now=i)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0), max_pending=2)
    assert r.pending("room") == 4  # restore drops nothing
    newest = ev(BOB)
    res = r.push(newest, now=10)
    assert res.accepted
    assert sorted(res.dropped) == sorted(eids(es[:3]))
    assert r.pending("room") == 2


def test_any_accepted_prompt_tag_and_time_survive_a_snapshot() -> None:
    q = DispatchQueue(rng=random.Random(0))
    odd = [("", 2**70), ('<tag> & "quotes" \u2028 \U0001f41d', -5), ("\x00\n", 0.1)]
    for tag, now in odd:
        q.push(ev(ALICE, thread=THREAD_1), prompt_tag=tag, now=now)
    r = DispatchQueue.restore(q.snapshot(), rng=random.Random(0))
    got = only_batch(r, 0)
    want = only_batch(q, 0)
    assert summarize(got) == summarize(want)
    assert sorted((x.prompt_tag, x.received_at) for x in got.events) == sorted(
        odd, key=lambda t: (t[0], t[1])
    )
