"""The dispatch queue: which events become one turn (docs/queue.md).

Pure: no clock, no I/O.  Callers pass ``now`` (seconds, any monotonic-ish number) and, for the
retry jitter, an RNG.  Events are queued per channel and batched at the authority boundary
``(actor, destination)``; a channel runs at most one batch at a time.  A channel is an opaque
key: :func:`~nostr_buzz.nips.nip10.queue_channel` unless the caller gives ``channel_of`` (the
bot's session scope, :mod:`nostr_buzz.core.session_key`).

Its parts: one channel's batching (:mod:`.queue_channel`), the accounts of who holds what
(:mod:`.queue_accounts`), the flush order (:mod:`.queue_index`), the snapshot's schema and the
checks a restart passes (:mod:`.queue_snapshot`, :mod:`.queue_restore`), the value types
(:mod:`.queue_types`); this module keeps the channels and says what each call does to them.

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
from collections.abc import Callable, Iterable
from typing import Final, TypedDict, TypeGuard, Unpack, get_args

from nostr_buzz.core.backoff import Rng, backoff_base
from nostr_buzz.core.queue_accounts import REMEMBERED_IDS as REMEMBERED_IDS  # re-exported
from nostr_buzz.core.queue_accounts import Accounts
from nostr_buzz.core.queue_channel import SETTLE_LIMIT as SETTLE_LIMIT  # re-exported
from nostr_buzz.core.queue_channel import Channel, Entry, Flight
from nostr_buzz.core.queue_index import FlushIndex, scan_ready, scan_settle
from nostr_buzz.core.queue_restore import restored_channels
from nostr_buzz.core.queue_snapshot import (
    WireSnapshot,
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

_BACKOFF_BASE: Final = 5.0
_BACKOFF_CAP: Final = 300.0


class QueueOptions(TypedDict, total=False):
    """The constructor's keyword options, as :meth:`DispatchQueue.rebuild` and
    :meth:`DispatchQueue.restore` take them: its limits, owner and channel key."""

    max_batch: int
    max_pending: int
    max_attempts: int
    deadline: float
    owner: str | PublicKey | None
    max_stranger_channels: int | None
    channel_of: Callable[[Event], str]


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


def _check_limits(**limits: object) -> None:
    for name, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise QueueError(f"{name} must be an integer of at least 1")


class DispatchQueue:
    """Per-channel queues of verified events, flushed as batches at the authority boundary:
    the channels' table and their flush order, the limits, and what each outcome of a batch
    does (a channel's own batching is :class:`.queue_channel.Channel`'s, who holds what is
    :class:`.queue_accounts.Accounts`', a restart's checks are :mod:`.queue_restore`'s)."""

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
        self._accounts = Accounts(owner, max_stranger_channels)
        #: The actor whose events strangers' events never evict nor refuse (None: nobody), hex.
        self.owner = self._accounts.strangers.owner
        self.max_stranger_channels = max_stranger_channels
        #: An event's channel here: an opaque key the caller computes (the bot's session
        #: scope, docs/bot.md "Session scope"); by default its queue channel.
        self.channel_of = channel_of
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            # Checked here, not at the first fail, where an AttributeError would escape.
            raise QueueError("rng must have a uniform(a, b) method, like random.Random")
        # The OS CSPRNG by default, like the other randomness of the library; tests pin it.
        self._rng: Rng = rng if rng is not None else secrets.SystemRandom()
        self._channels: dict[str, Channel] = {}
        self._index = FlushIndex(self._channels)
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
        if self._accounts.knows(event.id):
            return PushResult(accepted=False, duplicate=True, dropped=[])
        name = _check_channel(self.channel_of(event))
        if self._accounts.strangers.refuses(name, event.pubkey):
            return PushResult(accepted=False, duplicate=False, dropped=[], refused=True)
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = Channel(name, self.max_batch)
        entry = Entry.of(event, prompt_tag, received_at, self._next_seq)
        self._next_seq += 1
        ch.pending.append(entry)
        ch.appended(entry)
        self._index.touch(name)
        self._accounts.hold(ch, [entry])
        dropped: list[str] = []
        while len(ch.pending) > self.max_pending:
            victim = self._accounts.strangers.victim(ch.pending)
            dropped.append(self._remove_pending(ch, victim).id)
        accepted = entry.id not in dropped
        return PushResult(accepted=accepted, duplicate=False, dropped=dropped)

    def _touch(self, ch: Channel) -> None:
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
            # Expiry counts no attempt and sets no backoff: the set keeps its count.
            ch.put_back(fl.batch.attempt - 1)
            self._touch(ch)
        if self._index.sync(now, settle):
            first = self._index.first_ready()
            best = None if first is None else self._channels[first]
        else:
            best = scan_ready(self._channels.values(), now, settle)
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
        return ch.quiet_wait(_check_now(now), _check_settle(settle))

    def next_settle(self, now: float, *, settle: float) -> float | None:
        """Seconds until the first channel :meth:`flush_next` holds back for ``settle`` may
        flush (at most ``settle``); None when no channel is held back."""
        now, settle = _check_now(now), _check_settle(settle)
        if self._index.sync(now, settle):
            return self._index.first_settle(now, settle)
        return scan_settle(self._channels.values(), now, settle)

    def _flight_of(self, batch: object) -> tuple[Channel, Flight] | None:
        if not isinstance(batch, Batch):
            raise QueueError("expected a Batch returned by flush_next")
        ch = self._channels.get(batch.channel)
        if ch is None or ch.flight is None or ch.flight.batch is not batch:
            return None
        return ch, ch.flight

    def _settle(self, ch: Channel, fl: Flight) -> None:
        """``fl``'s events are handled (delivered or dead-lettered): remembered, and the
        channel gone if nothing else is in it."""
        self._accounts.release(ch, fl.held())
        self._accounts.remember(fl.ids())
        ch.flight = None
        if ch.idle():
            del self._channels[ch.name]
        self._index.touch(ch.name)

    # --- outcomes -----------------------------------------------------------------------------

    def complete(self, batch: Batch) -> None:
        """The turn succeeded: its events and cancelled events count as delivered."""
        found = self._flight_of(batch)
        if found is not None:
            self._settle(*found)

    def fail(self, batch: Batch, now: float) -> DeadLetter | None:
        """The turn failed: retry later with backoff, or dead-letter after ``max_attempts``."""
        now = _check_now(now)
        found = self._flight_of(batch)
        if found is None:
            return None
        ch, fl = found
        attempt = fl.batch.attempt
        if attempt + 1 > self.max_attempts:
            self._settle(ch, fl)
            return fl.dead_letter()
        delay = backoff_base(attempt, base=_BACKOFF_BASE, cap=_BACKOFF_CAP)
        delay *= self._rng.uniform(0.8, 1.2)
        ch.put_back(attempt)
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
        ch.put_back(fl.batch.attempt - 1)
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
        ch, _ = found
        ch.store_cancelled("interrupt" if reason == "interrupt" else "steer")
        self._index.touch(ch.name)
        return None

    def steer_result(self, event_id: str, outcome: str, now: float) -> QueuedEvent | None:
        """Record what became of a steer attempt for a pending event of a channel in flight."""
        if outcome not in _OUTCOMES:
            raise QueueError(
                f"steer outcome must be 'injected', 'started_new_turn' or 'failed', got {outcome!r}"
            )
        now = _check_now(now)
        ch = self._channels.get(self._accounts.live.get(event_id, ""))
        if ch is None or ch.flight is None:
            return None
        index = ch.index_of(event_id)
        if index is None:
            return None
        if outcome == "failed":
            return ch.pending[index].queued  # stays pending
        entry = self._remove_pending(ch, index)
        self._accounts.remember([entry.id])
        if outcome == "injected":
            ch.flight.flushed_at = now  # delivered into the running turn
            self._index.touch(ch.name)
        return entry.queued

    def forget(self, event_id: str) -> bool:
        """Drop ``event_id`` from the remembered delivered ids, so that it can be pushed again
        (a steer the agent took into a turn that then failed was not answered after all);
        True when it was remembered."""
        return self._accounts.remembered.discard(event_id)

    def _remove_pending(self, ch: Channel, index: int) -> Entry:
        entry = ch.drop(index)
        self._accounts.release(ch, [entry])
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
        return None if ch is None else ch.state()

    def knows(self, event_id: str) -> bool:
        """Whether ``event_id`` is queued (pending, in flight, stored cancelled) or remembered."""
        return self._accounts.knows(event_id)

    def remember(self, event_id: str) -> None:
        """Remember ``event_id`` as handled without queueing it (answered by an earlier run,
        docs/bot.md "Memory the network keeps"); a queued or remembered id stays as it is."""
        if not self.knows(event_id):
            self._accounts.remember([event_id])

    def is_remembered(self, event_id: str) -> bool:
        """Whether ``event_id`` is among the remembered delivered or dead-lettered ids."""
        return event_id in self._accounts.remembered

    def remembered_ids(self) -> list[str]:
        """The remembered delivered or dead-lettered ids, oldest first."""
        return self._accounts.remembered.ids()

    @property
    def next_seq(self) -> int:
        """The push order number the next accepted event gets."""
        return self._next_seq

    def snapshot(self) -> bytes:
        """Everything needed to continue, as JSON bytes.

        Batches in flight are written as already returned (events to the front, cancelled ones
        stored, no attempt counted): the process that ran them will be gone after a restore.
        """
        states = [ch.state() for ch in self._channels.values()]
        return encode_snapshot(wire_snapshot(states, self.remembered_ids(), self._next_seq))

    @classmethod
    def rebuild(
        cls,
        channels: Iterable[ChannelState],
        remembered: Iterable[str],
        next_seq: int,
        rng: Rng | None = None,
        **options: Unpack[QueueOptions],
    ) -> DispatchQueue:
        """A queue from exported channel states (what a store kept of
        :meth:`channel_state`), remembered ids (oldest first) and ``next_seq``, with the
        constructor's ``options``; checked exactly like :meth:`restore`, so any inconsistency
        raises :class:`QueueError`."""
        return cls(rng=rng, **options)._load(wire_snapshot(channels, remembered, next_seq))

    @classmethod
    def restore(
        cls, data: bytes | str, rng: Rng | None = None, **options: Unpack[QueueOptions]
    ) -> DispatchQueue:
        """Rebuild a queue from :meth:`snapshot` output; the limits and owner are the caller's
        (the constructor's ``options``).

        Every event is verified again, and any inconsistency raises :class:`QueueError`.
        """
        return cls(rng=rng, **options)._load(read_snapshot(data))

    def _load(self, snap: WireSnapshot) -> DispatchQueue:
        """This new queue continues from ``snap`` (checked by :mod:`.queue_restore`)."""
        for ch in restored_channels(snap, self._accounts, self.channel_of, self.max_batch):
            self._channels[ch.name] = ch
            self._touch(ch)
        self._next_seq = snap.next_seq
        return self
