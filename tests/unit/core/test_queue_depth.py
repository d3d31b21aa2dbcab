"""The dispatch queue at depth (docs/queue.md, "Cost at depth"): a wake of the worker —
``flush_next`` and ``next_settle`` after a push — looks at the same few channels and at no
event whatever the number of channels and pending events; and the index that makes it so
answers exactly what a look at every channel answers, settle window, backoffs, holds, stepped
back clocks and all.  Counted, never timed."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

from nostr_buzz.core.queue import SETTLE_LIMIT, Batch, ChannelState, DispatchQueue, StoredEvent
from nostr_buzz.core.queue_channel import Channel
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from tests.support.events import chat
from tests.support.keys import ALICE, BOB, OWNER

SETTLE = 0.5


def _events(channels: int, per_channel: int, author: SecretKey = OWNER) -> Iterator[Event]:
    for i in range(per_channel):
        for c in range(channels):
            yield chat(author, 1_700_000_000 + i, channel=f"c{c}", content=f"m{c}-{i}")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """What the queue reads to settle: each channel's hold asked (``Channel.quiet_wait``), and
    each pending event a channel's summary reads again (``Channel.refresh``)."""
    seen: Counter[str] = Counter()
    quiet_wait = Channel.quiet_wait

    def counting_quiet_wait(ch: Channel, *args: float) -> float:
        seen["channels"] += 1
        return quiet_wait(ch, *args)

    refresh = Channel.refresh

    def counting_refresh(ch: Channel) -> None:
        seen["events"] += len(ch.pending)
        refresh(ch)

    monkeypatch.setattr(Channel, "quiet_wait", counting_quiet_wait)
    monkeypatch.setattr(Channel, "refresh", counting_refresh)
    return seen


def _wake_cost(channels: int, per_channel: int, seen: Counter[str]) -> Counter[str]:
    """Fill a queue whose channels are all held back by the settle window, then count what
    one more event and the worker's wake (flush and next settle) look at."""
    q = DispatchQueue(max_pending=per_channel + 1, owner=OWNER.public_key.hex)
    now = 1000.0
    for event in _events(channels, per_channel):
        q.push(event, now=now)
        now += 1e-4  # each arrival restarts its channel's window: all stay held
        assert q.flush_next(now, settle=SETTLE) is None
    assert q.next_settle(now, settle=SETTLE) is not None
    seen.clear()
    q.push(chat(OWNER, 1_700_000_999, channel="c0", content="one more"), now=now)
    assert q.flush_next(now, settle=SETTLE) is None
    assert q.next_settle(now, settle=SETTLE) is not None
    cost = Counter(seen)
    # And when the windows end, the channel waiting longest flushes, having read no event but
    # its own (a turn's worth of work).
    seen.clear()
    batch = q.flush_next(now + SETTLE, settle=SETTLE)
    assert batch is not None and batch.channel == "c0"
    assert seen["events"] <= per_channel + 1 and seen["channels"] <= 2 * channels
    return cost


def test_a_wake_looks_at_the_same_few_channels_and_no_event_at_any_depth(
    counted: Counter[str],
) -> None:
    shallow = _wake_cost(channels=4, per_channel=5, seen=counted)
    deep = _wake_cost(channels=200, per_channel=40, seen=counted)  # 8,000 pending
    assert deep == shallow
    assert deep["channels"] <= 3 and deep["events"] == 0


def test_a_full_channel_reads_its_own_events_only_to_drop_one(counted: Counter[str]) -> None:
    q = DispatchQueue(max_pending=50, owner=OWNER.public_key.hex)
    for i, event in enumerate(_events(1, 50)):
        q.push(event, now=float(i))
    for c in range(1, 100):  # other channels' depth costs the full one nothing
        q.push(chat(OWNER, 1_700_000_000, channel=f"c{c}", content="x"), now=60.0)
    counted.clear()
    result = q.push(chat(OWNER, 1_700_000_100, channel="c0", content="over"), now=61.0)
    assert result.accepted and len(result.dropped) == 1
    assert counted["events"] == 50  # one summary of this channel, after the drop


# --- the index answers what a look at every channel answers -----------------------------------


def _reference_wait(state: ChannelState, now: float, settle: float, max_batch: int) -> float:
    """docs/queue.md, "Settling", from the public state alone."""
    pending = state.pending
    if settle <= 0 or not pending or state.retry_size:
        return 0.0

    def key(e: Event) -> tuple[str, str]:
        return (e.pubkey, nip10.destination(e))

    head, run = key(pending[0].queued.event), 1
    while run < len(pending) and run < max_batch and key(pending[run].queued.event) == head:
        run += 1
    if run >= max_batch:
        return 0.0
    received = [e.queued.received_at for e in pending]
    quiet, held, limit = now - max(received), now - min(received), SETTLE_LIMIT * settle
    if not 0 <= quiet < settle or not 0 <= held < limit:
        return 0.0
    return min(settle - quiet, limit - held)


def _reference(q: DispatchQueue, now: float, settle: float) -> tuple[str | None, float | None]:
    """The channel ``flush_next`` must start and what ``next_settle`` must say."""
    best: tuple[tuple[float, int], str] | None = None
    waits = []
    for name in q.channel_names():
        if q.in_flight(name):
            continue
        state = q.channel_state(name)
        assert state is not None
        wait = _reference_wait(state, now, settle, q.max_batch)
        if wait > 0:
            waits.append(wait)
        if wait > 0 or (state.backoff_until is not None and now < state.backoff_until):
            continue
        first = state.pending[0] if state.pending else min(state.cancelled, key=_order)
        order = (first.queued.received_at, first.seq)
        if best is None or order < best[0]:
            best = (order, name)
    return (None if best is None else best[1]), (min(waits) if waits else None)


def _order(e: StoredEvent) -> tuple[float, int]:
    return (e.queued.received_at, e.seq)


@pytest.mark.parametrize("seed", range(6))
def test_the_index_chooses_as_a_look_at_every_channel_does(seed: int) -> None:
    rnd = random.Random(seed)
    authors = [OWNER, ALICE, BOB]
    q = DispatchQueue(max_batch=4, max_pending=6, deadline=1e9, rng=random.Random(seed))
    running: list[Batch] = []
    now, settle, serial = 100.0, 0.5, 0
    for _ in range(400):
        roll = rnd.random()
        if roll < 0.05:
            now -= rnd.choice([0.2, 3.0])  # a clock stepped back
        elif roll < 0.08:
            settle = rnd.choice([0.0, 0.25, 0.5, 2.0])
        else:
            now += rnd.choice([0.0, 0.01, 0.1, 0.3, 0.7, 5.0])
        op = rnd.random()
        if op < 0.45:
            serial += 1
            author, channel = rnd.choice(authors), f"c{rnd.randrange(5)}"
            q.push(chat(author, 1_700_000_000 + serial, channel=channel), now=now)
        elif op < 0.75:
            expected, expected_settle = _reference(q, now, settle)
            assert q.next_settle(now, settle=settle) == pytest.approx(expected_settle, abs=1e-9)
            batch = q.flush_next(now, settle=settle)
            assert (batch.channel if batch is not None else None) == expected
            if batch is not None:
                running.append(batch)
        elif running:
            batch = running.pop(rnd.randrange(len(running)))
            outcome = rnd.choice(["complete", "fail", "hold", "requeue", "release"])
            if outcome == "complete":
                q.complete(batch)
            elif outcome == "fail":
                q.fail(batch, now)
            elif outcome == "hold":
                q.hold(batch, now + rnd.choice([0.1, 1.0, 30.0]))
            elif outcome == "requeue":
                q.requeue_cancelled(batch, rnd.choice(["interrupt", "steer"]))
            else:
                q.hold(batch, now + 100.0)
                q.release(batch.channel)


def test_settle_wait_is_one_channels_hold_and_reads_no_event(counted: Counter[str]) -> None:
    q = DispatchQueue(owner=OWNER.public_key.hex)
    for i, event in enumerate(_events(3, 30)):
        q.push(event, now=10.0 + i * 0.01)
    counted.clear()
    waits = [q.settle_wait(f"c{c}", 11.0, settle=SETTLE) for c in range(3)]
    assert counted == Counter(channels=3)  # one channel's summary each, no event
    assert min(waits) == pytest.approx(q.next_settle(11.0, settle=SETTLE))
    assert q.settle_wait("c0", 11.0, settle=0.0) == 0.0
    assert q.settle_wait("nowhere", 11.0, settle=SETTLE) == 0.0
    batch = q.flush_next(20.0, settle=SETTLE)
    assert batch is not None
    assert q.settle_wait(batch.channel, 20.0, settle=SETTLE) == 0.0  # in flight: not held
