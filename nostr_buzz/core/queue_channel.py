"""One channel of the dispatch queue (docs/queue.md): its pending events, the batch it has in
flight and the cancelled events it stores, and its batching — which events form its next batch
(a returned set as it was, else the head's authority run, else the stored cancelled events
whole), how a batch that did not settle goes back, how long the channel still waits for quiet,
and its state as a restart must see it.

Pure: no clock, no I/O.  :class:`~nostr_buzz.core.queue.DispatchQueue` keeps the channels,
says when, and keeps the accounts of who holds what (:mod:`.queue_accounts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.core.queue_types import Batch, ChannelState, DeadLetter, QueuedEvent, StoredEvent
from nostr_buzz.core.turn_input import CancelReason
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10

__all__ = ["SETTLE_LIMIT", "Channel", "Entry", "Flight"]

#: A channel held back for quiet flushes anyway once its oldest event waited this many windows.
SETTLE_LIMIT: Final = 8


@dataclass(frozen=True)
class Entry:
    """A queued event with what the queue derives from it once."""

    queued: QueuedEvent
    seq: int  # push order, unique per queue; breaks ties between equal received_at
    key: tuple[str, str]  # authority key (actor, destination)

    @classmethod
    def of(cls, event: Event, prompt_tag: str, received_at: float, seq: int) -> Entry:
        queued = QueuedEvent(event, prompt_tag, received_at)
        return cls(queued, seq, (event.pubkey, nip10.destination(event)))

    @property
    def id(self) -> str:
        return self.queued.event.id

    @property
    def wait(self) -> tuple[float, int]:
        return (self.queued.received_at, self.seq)

    def stored(self) -> StoredEvent:
        return StoredEvent(self.queued, self.seq)


@dataclass
class Flight:
    """A channel's batch in flight, with the queue's own records of what it holds."""

    batch: Batch
    events: list[Entry]  # batch order
    cancelled: list[Entry]  # stored order
    reason: CancelReason | None
    flushed_at: float
    redispatch: bool  # the batch's events are the stored cancelled events themselves

    def held(self) -> list[Entry]:
        """Every event the batch holds, once (a re-dispatch holds its cancelled ones as events)."""
        return self.events if self.redispatch else [*self.cancelled, *self.events]

    def ids(self) -> list[str]:
        return [e.id for e in self.held()]

    def dead_letter(self) -> DeadLetter:
        """The batch given up, built from the queue's own records (the caller may have mutated
        the Batch lists)."""
        cancelled = [] if self.redispatch else public(self.cancelled)
        return DeadLetter(self.batch.channel, public(self.events), cancelled, self.batch.attempt)


@dataclass
class Channel:
    """One channel's events and its batching (see the module docstring)."""

    name: str
    cap: int  # the queue's max_batch: a head run this long is a full batch
    pending: list[Entry] = field(default_factory=list)
    # The first ``retry_size`` pending events are a returned batch's exact set, retried as is;
    # ``retry_count`` is how many times that set has failed (kept through expiry and restore).
    retry_size: int = 0
    retry_count: int = 0
    cancelled: list[Entry] = field(default_factory=list)
    cancel_reason: CancelReason | None = None
    # Failures of the stored cancelled set when it was re-dispatched whole.
    cancelled_count: int = 0
    backoff_until: float | None = None
    flight: Flight | None = None
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
        """Its head pending event's wait; with none pending, its earliest stored cancelled one's."""
        if self.pending:
            return self.pending[0].wait
        return min(e.wait for e in self.cancelled)

    def quiet_wait(self, now: float, settle: float) -> float:
        """How long it must still wait for quiet (0: it may flush).  A channel waits until
        its newest event was received ``settle`` seconds ago, but its oldest waiting event never
        waits more than ``SETTLE_LIMIT`` windows (a flood cannot hold it).  A retried set or a
        full batch does not wait; a ``now`` before the events (a clock stepped back) holds
        nothing.  O(1): it reads the channel's summary, never its events."""
        if settle <= 0 or not self.pending or self.retry_size or self.run >= self.cap:
            return 0.0
        quiet, held, limit = now - self.newest, now - self.oldest, SETTLE_LIMIT * settle
        if not 0 <= quiet < settle or not 0 <= held < limit:
            return 0.0
        return min(settle - quiet, limit - held)

    def release_at(self, settle: float) -> float:
        return min(self.newest + settle, self.oldest + SETTLE_LIMIT * settle)

    def appended(self, entry: Entry) -> None:
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
                n, attempt = self._head_run(), 1
            taken = self.pending[:n]
            del self.pending[:n]
            self.retry_size = self.retry_count = 0
            events = _sorted_by_created_at(taken)
            cancelled, reason = self.cancelled, self.cancel_reason
            batch = Batch(self.name, public(events), public(cancelled), reason, attempt)
            redispatch = False
        else:
            # Nothing new: the stored cancelled events are the batch, whole, reason kept.
            events = _sorted_by_created_at(self.cancelled)
            cancelled, reason = self.cancelled, self.cancel_reason
            batch = Batch(self.name, public(events), [], reason, self.cancelled_count + 1)
            redispatch = True
        # The stored set now belongs to this batch: a re-dispatch carries its count in
        # ``attempt``; riding with new events, it has no count of its own.
        self.cancelled, self.cancel_reason, self.cancelled_count = [], None, 0
        self.flight = Flight(batch, events, cancelled, reason, now, redispatch)
        return batch

    def put_back(self, count: int) -> None:
        """Put the batch in flight, which did not settle, back: events to the front, cancelled
        ones stored; ``count``: the failures its set has now.

        The channel stores nothing while in flight (its stored events rode with the batch), so
        the stored cancelled events are exactly the batch's again, in their stored order.
        """
        fl = self.flight
        assert fl is not None
        self.flight = None
        self.cancelled, self.cancel_reason = list(fl.cancelled), fl.reason
        if fl.redispatch:
            self.cancelled_count = count
        else:
            self.pending[0:0] = fl.events
            self.retry_size, self.retry_count = len(fl.events), count

    def store_cancelled(self, reason: CancelReason) -> None:
        """Store the batch in flight, cancelled, for the channel's next one: the previous
        cancelled events first, then the batch's events (docs/queue.md); a re-dispatched
        batch's events are the previous cancelled events."""
        fl = self.flight
        assert fl is not None
        self.flight = None
        self.cancelled = list(fl.held())
        self.cancel_reason = reason

    def index_of(self, event_id: str) -> int | None:
        """Where ``event_id`` is among the pending events (None: not pending here)."""
        return next((i for i, e in enumerate(self.pending) if e.id == event_id), None)

    def drop(self, index: int) -> Entry:
        """Take the pending event at ``index`` out (the caller refreshes the summary)."""
        entry = self.pending.pop(index)
        if index < self.retry_size:
            # The returned set lost an event: it is no longer that set, so its count goes.
            self.retry_size = self.retry_count = 0
        return entry

    def refresh(self) -> None:
        """``pending`` changed otherwise (a batch taken or returned, an event dropped): the
        summary again, O(this channel's events), once per turn or drop."""
        received = [e.queued.received_at for e in self.pending]
        self.newest = max(received, default=-math.inf)
        self.oldest = min(received, default=math.inf)
        self.run = self._head_run() if self.pending else 0

    def _head_run(self) -> int:
        """The length of the head's authority run, up to ``cap`` (``pending`` is not empty)."""
        head, run = self.pending[0].key, 1
        while run < len(self.pending) and run < self.cap and self.pending[run].key == head:
            run += 1
        return run

    def state(self) -> ChannelState:
        """This channel as a restart must see it: a batch in flight is back at the front (or,
        for a redispatch, its cancelled events are still stored), no attempt counted."""
        pending, cancelled = self.pending, self.cancelled
        retry_size, retry_count = self.retry_size, self.retry_count
        reason, count = self.cancel_reason, self.cancelled_count
        fl = self.flight
        if fl is not None:
            cancelled, reason = fl.cancelled, fl.reason
            if fl.redispatch:
                count = fl.batch.attempt - 1
            else:
                pending = [*fl.events, *pending]
                retry_size, retry_count = len(fl.events), fl.batch.attempt - 1
        return ChannelState(
            name=self.name,
            pending=[e.stored() for e in pending],
            retry_size=retry_size,
            retry_count=retry_count,
            cancelled=[e.stored() for e in cancelled],
            cancel_reason=reason,
            cancelled_count=count,
            backoff_until=self.backoff_until,
        )


def public(entries: Iterable[Entry]) -> list[QueuedEvent]:
    """The queued events of ``entries``, as the queue's callers see them."""
    return [e.queued for e in entries]


def _sorted_by_created_at(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: e.queued.event.created_at)  # sorted() is stable
