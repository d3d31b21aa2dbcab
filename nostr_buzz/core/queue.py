"""The dispatch queue: which events become one turn (docs/queue.md).

Pure: no clock, no I/O.  Callers pass ``now`` (seconds, any monotonic-ish number) and, for the
retry jitter, an RNG.  Events are queued per channel and batched at the authority boundary
``(actor, destination)``; a channel runs at most one batch at a time.  A channel is an opaque
key: :func:`~nostr_buzz.nips.nip10.queue_channel` unless the caller gives ``channel_of`` (the
bot's session scope, :mod:`nostr_buzz.core.session_key`).

Choices where docs/queue.md is silent or ambiguous (each also noted where it applies):

* The default RNG is ``secrets.SystemRandom()`` (a ``random.Random`` subclass backed by the OS
  CSPRNG), so this module never imports ``random``; tests pass ``random.Random(seed)``.
* A channel's wait is its head pending event's ``(received_at, push order)``; only a channel
  with no pending event waits since its earliest stored cancelled event.
* When a push leaves more than ``max_pending`` events pending (possible after ``fail`` or expiry
  returned events), it drops earliest-received events until the cap holds again: a stranger's
  (any actor but ``owner``) first, the owner's only when nothing else is pending, so that the
  owner's events are evicted by the owner's own flood alone.
* ``max_stranger_channels`` bounds the channels in which strangers hold live events (pending,
  in flight or stored as cancelled); a stranger's event that would open one more is refused
  (``PushResult.refused``), never merged into another channel.  It is enforced by ``push`` only
  (a restored queue may hold more).  Without an ``owner`` every actor is a stranger.
* Dropped events are not remembered as duplicates: docs/queue.md's duplicate memory holds
  delivered and dead-lettered ids only, so a dropped event pushed again is accepted again.
* Cancelled events riding with a batch of new events do not count attempts of their own; a
  set of cancelled events re-dispatched whole keeps its own attempt count while stored.
* A re-dispatched set that failed or expired is stored again; if new events are pending when
  the channel flushes next, they form the batch and carry the set (the stored-cancelled rule)
  instead of the set being retried alone first: cancelled events are evidence, not instructions.
* ``steer_result`` returns the affected :class:`QueuedEvent` (None for any other id).
* ``now + delay`` is the first time a backing-off channel may flush again ("not before").
* Bad limits, an RNG without ``uniform``, or a bad ``now``/``event``/``prompt_tag``/channel name
  raise :class:`QueueError` too (a ``prompt_tag`` must be encodable, or no snapshot could hold it).
"""

from __future__ import annotations

import math
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, TypeGuard, get_args

from nostr_buzz.core.backoff import Rng, backoff_base
from nostr_buzz.core.given import given_key
from nostr_buzz.core.queue_index import FlushIndex
from nostr_buzz.core.queue_snapshot import (
    WireEntry,
    WireSnapshot,
    check_channel,
    check_header,
    corrupt,
    encode_snapshot,
    read_snapshot,
    wire_snapshot,
)
from nostr_buzz.core.queue_types import (  # re-exported: the queue's public types
    Batch as Batch,
)
from nostr_buzz.core.queue_types import ChannelState as ChannelState
from nostr_buzz.core.queue_types import DeadLetter as DeadLetter
from nostr_buzz.core.queue_types import PushResult as PushResult
from nostr_buzz.core.queue_types import QueuedEvent as QueuedEvent
from nostr_buzz.core.queue_types import StoredEvent as StoredEvent
from nostr_buzz.core.turn_input import CancelReason as CancelReason  # re-exported
from nostr_buzz.errors import QueueError
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.keys import PublicKey
from nostr_buzz.nips import nip10
from nostr_buzz.text.unicode import is_utf8_encodable

_REASONS: Final = get_args(CancelReason)
_OUTCOMES: Final = ("injected", "started_new_turn", "failed")

#: How many delivered or dead-lettered ids are remembered for duplicate detection.
REMEMBERED_IDS: Final = 10_000
#: A channel held back for quiet flushes anyway once its oldest event waited this many windows.
SETTLE_LIMIT: Final = 8
_BACKOFF_BASE: Final = 5.0
_BACKOFF_CAP: Final = 300.0


@dataclass(frozen=True)
class _Entry:
    """A queued event with what the queue derives from it once."""

    queued: QueuedEvent
    seq: int  # push order, unique per queue; breaks ties between equal received_at
    key: tuple[str, str]  # authority key (actor, destination)

    @property
    def id(self) -> str:
        return self.queued.event.id

    @property
    def wait(self) -> tuple[float, int]:
        return (self.queued.received_at, self.seq)


@dataclass
class _Flight:
    batch: Batch
    events: list[_Entry]  # batch order
    cancelled: list[_Entry]  # stored order
    reason: CancelReason | None
    flushed_at: float
    redispatch: bool  # the batch's events are the stored cancelled events themselves

    def held(self) -> list[_Entry]:
        """Every event the batch holds, once (a re-dispatch holds its cancelled ones as events)."""
        return self.events if self.redispatch else [*self.cancelled, *self.events]

    def ids(self) -> list[str]:
        return [e.id for e in self.held()]


@dataclass
class _Channel:
    name: str
    cap: int  # the queue's max_batch: a head run this long is a full batch
    pending: list[_Entry] = field(default_factory=list)
    # The first ``retry_size`` pending events are a returned batch's exact set, retried as is;
    # ``retry_count`` is how many times that set has failed (kept through expiry and restore).
    retry_size: int = 0
    retry_count: int = 0
    cancelled: list[_Entry] = field(default_factory=list)
    cancel_reason: CancelReason | None = None
    # Failures of the stored cancelled set when it was re-dispatched whole.
    cancelled_count: int = 0
    backoff_until: float | None = None
    flight: _Flight | None = None
    strangers: int = 0  # live events (pending, in flight, stored) of actors other than the owner
    # What settling reads of ``pending``, kept as it changes so that a wake of the worker
    # looks at no event (docs/queue.md, "Cost at depth"): the latest and earliest
    # ``received_at``, and the length of the head's authority run (up to ``cap``).
    newest: float = -math.inf
    oldest: float = math.inf
    run: int = 0

    def idle(self) -> bool:
        return not self.pending and not self.cancelled and self.flight is None

    def candidate(self) -> bool:
        return self.flight is None and bool(self.pending or self.cancelled)

    @property
    def flushed_at(self) -> float | None:
        return None if self.flight is None else self.flight.flushed_at

    def wait(self) -> tuple[float, int]:
        if self.pending:
            return self.pending[0].wait
        return min(e.wait for e in self.cancelled)

    def quiet_wait(self, now: float, settle: float) -> float:
        return _quiet_wait(self, now, settle)

    def release_at(self, settle: float) -> float:
        return min(self.newest + settle, self.oldest + SETTLE_LIMIT * settle)

    def appended(self, entry: _Entry) -> None:
        """``entry`` was appended to ``pending``: the summary follows in O(1)."""
        received = entry.queued.received_at
        self.newest, self.oldest = max(self.newest, received), min(self.oldest, received)
        if self.run == len(self.pending) - 1 < self.cap and entry.key == self.pending[0].key:
            self.run += 1

    def take(self, now: float) -> Batch:
        """Start this channel's next batch: the returned set as it was, else the head's
        authority run (up to ``cap``), else the stored cancelled events whole."""
        self.backoff_until = None
        if self.pending:
            if self.retry_size:
                # A returned batch is retried with exactly its events.
                n, attempt = self.retry_size, self.retry_count + 1
            else:
                head = self.pending[0].key
                n = 1
                while n < len(self.pending) and n < self.cap and self.pending[n].key == head:
                    n += 1
                attempt = 1
            taken = self.pending[:n]
            del self.pending[:n]
            self.retry_size = self.retry_count = 0
            events = _sorted_by_created_at(taken)
            cancelled, reason = self.cancelled, self.cancel_reason
            batch = Batch(self.name, _public(events), _public(cancelled), reason, attempt)
            redispatch = False
        else:
            # Nothing new: the stored cancelled events are the batch, whole, reason kept.
            events = _sorted_by_created_at(self.cancelled)
            cancelled, reason = self.cancelled, self.cancel_reason
            batch = Batch(self.name, _public(events), [], reason, self.cancelled_count + 1)
            redispatch = True
        # The stored set now belongs to this batch: a re-dispatch carries its count in
        # ``attempt``; riding with new events, it has no count of its own.
        self.cancelled, self.cancel_reason, self.cancelled_count = [], None, 0
        self.flight = _Flight(batch, events, cancelled, reason, now, redispatch)
        return batch

    def put_back(self, fl: _Flight, count: int) -> None:
        """Put a batch that did not settle back: events to the front, cancelled ones stored.

        The channel stores nothing while in flight (its stored events rode with the batch), so
        the stored cancelled events are exactly the batch's again, in their stored order.
        """
        self.cancelled, self.cancel_reason = list(fl.cancelled), fl.reason
        if fl.redispatch:
            self.cancelled_count = count
        else:
            self.pending[0:0] = fl.events
            self.retry_size, self.retry_count = len(fl.events), count

    def refresh(self) -> None:
        """``pending`` changed otherwise (a batch taken or returned, an event dropped): the
        summary again, O(this channel's events), once per turn or drop."""
        received = [e.queued.received_at for e in self.pending]
        self.newest = max(received, default=-math.inf)
        self.oldest = min(received, default=math.inf)
        run = 1 if self.pending else 0
        head = self.pending[0].key if self.pending else None
        while run < len(self.pending) and run < self.cap and self.pending[run].key == head:
            run += 1
        self.run = run


def _is_finite_number(x: object) -> TypeGuard[float]:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond the float range
        return False


def _check_settle(settle: float) -> float:
    if not _is_finite_number(settle) or settle < 0:
        raise QueueError("settle must be a finite, non-negative number of seconds")
    return float(settle)


def _check_now(now: object) -> float:
    if not _is_finite_number(now):
        raise QueueError("now must be a finite number of seconds")
    return now


def _check_channel(channel: object) -> str:
    if not isinstance(channel, str):
        raise QueueError("a channel name is a string")
    return channel


def _sorted_by_created_at(entries: Iterable[_Entry]) -> list[_Entry]:
    return sorted(entries, key=lambda e: e.queued.event.created_at)  # sorted() is stable


def _public(entries: Iterable[_Entry]) -> list[QueuedEvent]:
    return [e.queued for e in entries]


class _Strangers:
    """Whose events are a stranger's (anyone but the owner), and the channels in which
    strangers hold live events: a full channel drops a stranger's event first, and strangers
    open at most ``cap`` channels (docs/queue.md, "Floods")."""

    def __init__(self, owner: str | PublicKey | None, cap: int | None) -> None:
        # hex, npub1… or a PublicKey, compared as hex with events' pubkeys
        hex_owner = None if owner is None else given_key(owner, "DispatchQueue owner", QueueError)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise QueueError("max_stranger_channels must be an integer of at least 1, or None")
        self.owner: str | None = hex_owner.hex if hex_owner is not None else None
        self.cap = cap
        self.channels: set[str] = set()  # channels whose ``strangers`` is above 0

    def of(self, entry: _Entry) -> bool:
        return entry.key[0] != self.owner

    def refuses(self, name: str, actor: str) -> bool:
        """Whether a stranger's event for channel ``name`` would open one stranger channel
        more than the cap.  Refused, not merged into another channel: each channel is its own
        conversation (and its own agent session)."""
        if self.cap is None or actor == self.owner or name in self.channels:
            return False
        return len(self.channels) >= self.cap

    def victim(self, pending: list[_Entry]) -> int:
        """The pending event a full channel drops: the earliest received of a stranger's, the
        owner's earliest only when every pending event is the owner's."""
        strangers = [i for i, e in enumerate(pending) if self.of(e)]
        return min(strangers or range(len(pending)), key=lambda i: pending[i].wait)

    def hold(self, ch: _Channel, entries: list[_Entry]) -> None:
        ch.strangers += sum(map(self.of, entries))
        if ch.strangers:
            self.channels.add(ch.name)

    def release(self, ch: _Channel, entries: list[_Entry]) -> None:
        ch.strangers -= sum(map(self.of, entries))
        if not ch.strangers:
            self.channels.discard(ch.name)


class _Remembered:
    """The delivered or dead-lettered ids, oldest first, at most ``REMEMBERED_IDS`` of them:
    the queue's duplicate memory (docs/queue.md)."""

    def __init__(self) -> None:
        self._order: deque[str] = deque()
        self._set: set[str] = set()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._set

    def add(self, event_id: str) -> None:
        self._order.append(event_id)
        self._set.add(event_id)
        if len(self._order) > REMEMBERED_IDS:
            self._set.discard(self._order.popleft())

    def discard(self, event_id: str) -> bool:
        if event_id not in self._set:
            return False
        self._set.discard(event_id)
        self._order.remove(event_id)
        return True

    def ids(self) -> list[str]:
        return list(self._order)

    def load(self, ids: list[str], live: dict[str, str]) -> None:
        """A snapshot's remembered ids, checked: unique 64-hex ids not also queued."""
        if len(ids) > REMEMBERED_IDS:
            raise corrupt("too many remembered ids")
        for event_id in ids:
            if (
                len(event_id) != 64
                or any(c not in "0123456789abcdef" for c in event_id)
                or event_id in self._set
                or event_id in live
            ):
                raise corrupt("remembered ids must be unique 64-hex ids not also queued")
            self.add(event_id)


class DispatchQueue:
    """Per-channel queues of verified events, flushed as batches at the authority boundary."""

    def __init__(
        self,
        max_batch: int = 50,
        max_pending: int = 500,
        max_attempts: int = 10,
        deadline: float = 7300,
        rng: Rng | None = None,
        *,
        owner: str | PublicKey | None = None,
        max_stranger_channels: int | None = None,
        channel_of: Callable[[Event], str] = nip10.queue_channel,
    ) -> None:
        _check_limits(max_batch=max_batch, max_pending=max_pending, max_attempts=max_attempts)
        if not _is_finite_number(deadline) or deadline < 0:
            raise QueueError("deadline must be a finite, non-negative number of seconds")
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.max_attempts = max_attempts
        self.deadline = deadline
        self._strangers = _Strangers(owner, max_stranger_channels)
        #: The actor whose events strangers' events never evict nor refuse (None: nobody), hex.
        self.owner = self._strangers.owner
        self.max_stranger_channels = max_stranger_channels
        #: An event's channel here: an opaque key the caller computes (the bot's session
        #: scope, docs/bot.md "Session scope"); by default its queue channel.
        self.channel_of = channel_of
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            # Checked here, not at the first fail, where an AttributeError would escape.
            raise QueueError("rng must have a uniform(a, b) method, like random.Random")
        # The OS CSPRNG by default, like the other randomness of the library; tests pin it.
        self._rng: Rng = rng if rng is not None else secrets.SystemRandom()
        self._channels: dict[str, _Channel] = {}
        self._index = FlushIndex(self._channels)
        self._live: dict[str, str] = {}  # channel of each id pending, in flight or stored
        self._remembered = _Remembered()
        self._next_seq = 0

    # --- intake -------------------------------------------------------------------------------

    def push(self, event: Event, prompt_tag: str = "@mention", *, now: float) -> PushResult:
        """Queue one verified event; duplicates are ignored and drops are reported."""
        if not isinstance(event, Event):
            raise QueueError(f"push: {not_an_event(event)}")
        if not isinstance(prompt_tag, str):
            raise QueueError("prompt_tag must be a string")
        if not is_utf8_encodable(prompt_tag):
            # A lone surrogate would make every later snapshot() fail.
            raise QueueError("prompt_tag must be valid Unicode (no lone surrogates)")
        received_at = _check_now(now)
        if event.id in self._live or event.id in self._remembered:
            return PushResult(accepted=False, duplicate=True, dropped=[])
        name = _check_channel(self.channel_of(event))
        if self._strangers.refuses(name, event.pubkey):
            return PushResult(accepted=False, duplicate=False, dropped=[], refused=True)
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = _Channel(name, self.max_batch)
        entry = _Entry(
            QueuedEvent(event, prompt_tag, received_at),
            self._next_seq,
            (event.pubkey, nip10.destination(event)),
        )
        self._next_seq += 1
        ch.pending.append(entry)
        ch.appended(entry)
        self._index.touch(name)
        self._hold(ch, [entry])
        dropped: list[str] = []
        while len(ch.pending) > self.max_pending:
            dropped.append(self._remove_pending(ch, self._strangers.victim(ch.pending)).id)
        accepted = entry.id not in dropped
        return PushResult(accepted=accepted, duplicate=False, dropped=dropped)

    def _hold(self, ch: _Channel, entries: list[_Entry]) -> None:
        """``entries`` became live in ``ch``."""
        for entry in entries:
            self._live[entry.id] = ch.name
        self._strangers.hold(ch, entries)

    def _release(self, ch: _Channel, entries: list[_Entry]) -> None:
        """``entries`` left ``ch`` (delivered, dead-lettered or dropped)."""
        for entry in entries:
            self._live.pop(entry.id, None)
        self._strangers.release(ch, entries)

    def _touch(self, ch: _Channel) -> None:
        """``ch`` changed (other than by an append): its summary and its place in the index."""
        ch.refresh()
        self._index.touch(ch.name)

    # --- flushing -----------------------------------------------------------------------------

    def flush_next(self, now: float, *, settle: float = 0.0) -> Batch | None:
        """Expire overdue batches, then start the batch of the channel waiting longest.

        ``settle``: seconds a channel must have been quiet before it flushes — its newest
        event received at least that long before ``now`` — so that a burst of messages sent
        together becomes one turn (docs/queue.md, "Settling").  :meth:`next_settle` says when
        to ask again."""
        now = _check_now(now)
        settle = _check_settle(settle)
        for name in self._index.overdue(now, self.deadline):
            ch = self._channels[name]
            fl = ch.flight
            assert fl is not None
            ch.flight = None
            # Expiry counts no attempt and sets no backoff: the set keeps its count.
            ch.put_back(fl, fl.batch.attempt - 1)
            self._touch(ch)
        if self._index.sync(now, settle):
            first = self._index.first_ready()
            best = None if first is None else self._channels[first]
        else:
            best = self._scan(now, settle)
        if best is None:
            return None
        batch = best.take(now)
        self._touch(best)
        return batch

    def settle_wait(self, channel: str, now: float, *, settle: float) -> float:
        """Seconds ``channel`` is still held back for ``settle`` at ``now`` (0: not held, in
        flight, or no such channel); O(1), for a caller that wonders whether the push it just
        made can change what :meth:`flush_next` does before a look it has already planned."""
        ch = self._channels.get(_check_channel(channel))
        if ch is None or ch.flight is not None:
            return 0.0
        return _quiet_wait(ch, _check_now(now), _check_settle(settle))

    def _scan(self, now: float, settle: float) -> _Channel | None:
        """:meth:`flush_next`'s choice by a look at every channel: what the index answers
        when it cannot (a clock stepped back, module :mod:`.queue_index`)."""
        best: _Channel | None = None
        for ch in self._channels.values():
            if not ch.candidate():
                continue
            if ch.backoff_until is not None and now < ch.backoff_until:
                continue
            if _quiet_wait(ch, now, settle) > 0:
                continue
            if best is None or ch.wait() < best.wait():
                best = ch
        return best

    def next_settle(self, now: float, *, settle: float) -> float | None:
        """Seconds until the first channel :meth:`flush_next` holds back for ``settle`` may
        flush (at most ``settle``); None when no channel is held back."""
        now, settle = _check_now(now), _check_settle(settle)
        if self._index.sync(now, settle):
            return self._index.first_settle(now, settle)
        idle = [ch for ch in self._channels.values() if ch.flight is None]
        waits = [w for ch in idle if (w := _quiet_wait(ch, now, settle)) > 0]
        return min(waits) if waits else None

    def _flight_of(self, batch: object) -> tuple[_Channel, _Flight] | None:
        if not isinstance(batch, Batch):
            raise QueueError("expected a Batch returned by flush_next")
        ch = self._channels.get(batch.channel)
        if ch is None or ch.flight is None or ch.flight.batch is not batch:
            return None
        return ch, ch.flight

    def _settle(self, ch: _Channel, fl: _Flight) -> None:
        ch.flight = None
        if ch.idle():
            del self._channels[ch.name]
        self._index.touch(ch.name)

    def _remember(self, ids: Iterable[str]) -> None:
        for event_id in ids:
            self._live.pop(event_id, None)
            self._remembered.add(event_id)

    # --- outcomes -----------------------------------------------------------------------------

    def complete(self, batch: Batch) -> None:
        """The turn succeeded: its events and cancelled events count as delivered."""
        found = self._flight_of(batch)
        if found is None:
            return None
        ch, fl = found
        self._release(ch, fl.held())
        self._remember(fl.ids())
        self._settle(ch, fl)
        return None

    def fail(self, batch: Batch, now: float) -> DeadLetter | None:
        """The turn failed: retry later with backoff, or dead-letter after ``max_attempts``."""
        now = _check_now(now)
        found = self._flight_of(batch)
        if found is None:
            return None
        ch, fl = found
        attempt = fl.batch.attempt
        if attempt + 1 > self.max_attempts:
            self._release(ch, fl.held())
            self._remember(fl.ids())
            self._settle(ch, fl)
            # Built from the queue's own records: the caller may have mutated the Batch lists.
            cancelled = [] if fl.redispatch else _public(fl.cancelled)
            return DeadLetter(ch.name, _public(fl.events), cancelled, attempt)
        delay = backoff_base(attempt, base=_BACKOFF_BASE, cap=_BACKOFF_CAP)
        delay *= self._rng.uniform(0.8, 1.2)
        ch.flight = None
        ch.put_back(fl, attempt)
        ch.backoff_until = now + delay
        self._touch(ch)
        return None

    def hold(self, batch: Batch, until: float) -> None:
        """The turn was not run (the agent is paused, docs/bot.md "Budgets"): the batch goes
        back as it was, no attempt counted, and the channel waits until ``until`` (or until
        :meth:`release`)."""
        until = _check_now(until)
        found = self._flight_of(batch)
        if found is None:
            return None
        ch, fl = found
        ch.flight = None
        ch.put_back(fl, fl.batch.attempt - 1)
        ch.backoff_until = until
        self._touch(ch)

    def release(self, channel: str) -> bool:
        """End the channel's wait (a hold or a backoff) now; False when it has none."""
        ch = self._channels.get(channel)
        if ch is None or ch.backoff_until is None:
            return False
        ch.backoff_until = None
        self._index.touch(ch.name)
        return True

    def requeue_cancelled(self, batch: Batch, reason: CancelReason) -> None:
        """Store a cancelled (interrupted or failed-to-steer) batch for the channel's next one."""
        if reason not in _REASONS:
            raise QueueError(f"cancel reason must be 'interrupt' or 'steer', got {reason!r}")
        found = self._flight_of(batch)
        if found is None:
            return None
        ch, fl = found
        ch.flight = None
        # Previous cancelled events first, then this batch's events (docs/queue.md); for a
        # re-dispatched batch its events are the previous cancelled events.
        stored = fl.events if fl.redispatch else [*fl.cancelled, *fl.events]
        ch.cancelled = list(stored)
        ch.cancel_reason = "interrupt" if reason == "interrupt" else "steer"
        self._index.touch(ch.name)
        return None

    def steer_result(self, event_id: str, outcome: str, now: float) -> QueuedEvent | None:
        """Record what became of a steer attempt for a pending event of a channel in flight."""
        if outcome not in _OUTCOMES:
            raise QueueError(
                f"steer outcome must be 'injected', 'started_new_turn' or 'failed', got {outcome!r}"
            )
        now = _check_now(now)
        ch = self._channels.get(self._live.get(event_id, ""))
        if ch is None or ch.flight is None:
            return None
        for i, entry in enumerate(ch.pending):
            if entry.id != event_id:
                continue
            if outcome == "failed":
                return entry.queued  # stays pending
            self._remove_pending(ch, i)
            self._remember([entry.id])
            if outcome == "injected":
                ch.flight.flushed_at = now  # delivered into the running turn
                self._index.touch(ch.name)
            return entry.queued
        return None

    def forget(self, event_id: str) -> bool:
        """Drop ``event_id`` from the remembered delivered ids, so that it can be pushed again
        (a steer the agent took into a turn that then failed was not answered after all);
        True when it was remembered."""
        return self._remembered.discard(event_id)

    def _remove_pending(self, ch: _Channel, index: int) -> _Entry:
        entry = ch.pending.pop(index)
        self._release(ch, [entry])
        if index < ch.retry_size:
            # The returned set lost an event: it is no longer that set, so its count goes.
            ch.retry_size = ch.retry_count = 0
        self._touch(ch)
        return entry

    # --- inspection ---------------------------------------------------------------------------

    def in_flight(self, channel: str) -> bool:
        ch = self._channels.get(_check_channel(channel))
        return ch is not None and ch.flight is not None

    def pending(self, channel: str) -> int:
        """Pending events of ``channel`` (stored cancelled events are not counted)."""
        ch = self._channels.get(_check_channel(channel))
        return len(ch.pending) if ch is not None else 0

    # --- replay and restart -------------------------------------------------------------------

    def channel_names(self) -> list[str]:
        """Channels with anything pending, stored or in flight."""
        return list(self._channels)

    def channel_state(self, channel: str) -> ChannelState | None:
        """``channel``'s state as a restart must see it (None when the channel is idle)."""
        ch = self._channels.get(_check_channel(channel))
        return None if ch is None else _state_of(ch)

    def knows(self, event_id: str) -> bool:
        """Whether ``event_id`` is queued (pending, in flight, stored cancelled) or remembered."""
        return event_id in self._live or event_id in self._remembered

    def remember(self, event_id: str) -> None:
        """Remember ``event_id`` as handled without queueing it (answered by an earlier run,
        docs/bot.md "Memory the network keeps"); a queued or remembered id stays as it is."""
        if not self.knows(event_id):
            self._remember([event_id])

    def is_remembered(self, event_id: str) -> bool:
        """Whether ``event_id`` is among the remembered delivered or dead-lettered ids."""
        return event_id in self._remembered

    def remembered_ids(self) -> list[str]:
        """The remembered delivered or dead-lettered ids, oldest first."""
        return self._remembered.ids()

    @property
    def next_seq(self) -> int:
        """The push order number the next accepted event gets."""
        return self._next_seq

    def snapshot(self) -> bytes:
        """Everything needed to continue, as JSON bytes.

        Batches in flight are written as already returned (events to the front, cancelled ones
        stored, no attempt counted): the process that ran them will be gone after a restore.
        """
        states = [_state_of(ch) for ch in self._channels.values()]
        return encode_snapshot(wire_snapshot(states, self._remembered.ids(), self._next_seq))

    @classmethod
    def rebuild(
        cls,
        channels: Iterable[ChannelState],
        remembered: Iterable[str],
        next_seq: int,
        rng: Rng | None = None,
        *,
        max_batch: int = 50,
        max_pending: int = 500,
        max_attempts: int = 10,
        deadline: float = 7300,
        owner: str | PublicKey | None = None,
        max_stranger_channels: int | None = None,
        channel_of: Callable[[Event], str] = nip10.queue_channel,
    ) -> DispatchQueue:
        """A queue from exported channel states (what a store kept of
        :meth:`channel_state`), remembered ids (oldest first) and ``next_seq``; checked
        exactly like :meth:`restore`, so any inconsistency raises :class:`QueueError`."""
        limits = (max_batch, max_pending, max_attempts, deadline, rng)
        q = cls(
            *limits,
            owner=owner,
            max_stranger_channels=max_stranger_channels,
            channel_of=channel_of,
        )
        q._load(wire_snapshot(channels, remembered, next_seq))
        return q

    @classmethod
    def restore(
        cls,
        data: bytes | str,
        rng: Rng | None = None,
        *,
        max_batch: int = 50,
        max_pending: int = 500,
        max_attempts: int = 10,
        deadline: float = 7300,
        owner: str | PublicKey | None = None,
        max_stranger_channels: int | None = None,
        channel_of: Callable[[Event], str] = nip10.queue_channel,
    ) -> DispatchQueue:
        """Rebuild a queue from :meth:`snapshot` output; the limits and owner are the caller's.

        Every event is verified again, and any inconsistency raises :class:`QueueError`.
        """
        limits = (max_batch, max_pending, max_attempts, deadline, rng)
        q = cls(
            *limits,
            owner=owner,
            max_stranger_channels=max_stranger_channels,
            channel_of=channel_of,
        )
        q._load(read_snapshot(data))
        return q

    def _load(self, snap: WireSnapshot) -> None:
        check_header(snap)
        seqs: set[int] = set()

        def entry(w: WireEntry, channel: str) -> _Entry:
            ev = w.event
            if self.channel_of(ev) != channel:
                raise corrupt(f"event {ev.id} is filed under the wrong channel")
            if ev.id in self._live:
                raise corrupt(f"event {ev.id} appears twice")
            if not math.isfinite(w.received_at):
                raise corrupt("received_at is not finite")
            if not 0 <= w.seq < snap.next_seq or w.seq in seqs:
                raise corrupt("push order numbers are not unique and below next_seq")
            seqs.add(w.seq)
            self._live[ev.id] = channel
            return _Entry(
                QueuedEvent(ev, w.prompt_tag, w.received_at),
                w.seq,
                (ev.pubkey, nip10.destination(ev)),
            )

        for wc in snap.channels:
            if wc.name in self._channels:
                raise corrupt(f"channel {wc.name!r} appears twice")
            ch = _Channel(wc.name, self.max_batch)
            ch.pending = [entry(w, wc.name) for w in wc.pending]
            ch.cancelled = [entry(w, wc.name) for w in wc.cancelled]
            check_channel(wc)
            ch.retry_size, ch.retry_count = wc.retry_size, wc.retry_count
            ch.cancel_reason, ch.cancelled_count = wc.cancel_reason, wc.cancelled_count
            ch.backoff_until = wc.backoff_until
            self._strangers.hold(ch, [*ch.pending, *ch.cancelled])
            self._channels[ch.name] = ch
            self._touch(ch)
        self._remembered.load(snap.remembered, self._live)
        self._next_seq = snap.next_seq


def _state_of(ch: _Channel) -> ChannelState:
    """A channel as a restart must see it: a batch in flight is back at the front (or, for a
    redispatch, its cancelled events are still stored)."""
    pending, cancelled = ch.pending, ch.cancelled
    retry_size, retry_count = ch.retry_size, ch.retry_count
    reason, count = ch.cancel_reason, ch.cancelled_count
    fl = ch.flight
    if fl is not None:
        cancelled, reason = fl.cancelled, fl.reason
        if fl.redispatch:
            count = fl.batch.attempt - 1
        else:
            pending = [*fl.events, *pending]
            retry_size, retry_count = len(fl.events), fl.batch.attempt - 1
    return ChannelState(
        name=ch.name,
        pending=[StoredEvent(e.queued, e.seq) for e in pending],
        retry_size=retry_size,
        retry_count=retry_count,
        cancelled=[StoredEvent(e.queued, e.seq) for e in cancelled],
        cancel_reason=reason,
        cancelled_count=count,
        backoff_until=ch.backoff_until,
    )


def _quiet_wait(ch: _Channel, now: float, settle: float) -> float:
    """How long ``ch`` must still wait for quiet (0: it may flush).  A channel waits until
    its newest event was received ``settle`` seconds ago, but its oldest waiting event never
    waits more than ``SETTLE_LIMIT`` windows (a flood cannot hold it).  A retried set or a
    full batch does not wait; a ``now`` before the events (a clock stepped back) holds
    nothing.  O(1): it reads the channel's summary, never its events."""
    if settle <= 0 or not ch.pending or ch.retry_size or ch.run >= ch.cap:
        return 0.0
    quiet, held, limit = now - ch.newest, now - ch.oldest, SETTLE_LIMIT * settle
    if not 0 <= quiet < settle or not 0 <= held < limit:
        return 0.0
    return min(settle - quiet, limit - held)


def _check_limits(**limits: object) -> None:
    for name, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise QueueError(f"{name} must be an integer of at least 1")
