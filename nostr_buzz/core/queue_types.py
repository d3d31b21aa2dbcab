"""The dispatch queue's value types: what goes in, what comes out, what a restart keeps
(docs/queue.md).  Pure data; :mod:`nostr_buzz.core.queue` re-exports every name."""

from __future__ import annotations

from dataclasses import dataclass

from nostr_buzz.core.turn_input import CancelReason
from nostr_buzz.event import Event


@dataclass(frozen=True)
class QueuedEvent:
    """A verified event in the queue: the prompt tag it arrived under (``@mention``, …) and
    when it was received (the caller's ``now`` at :meth:`DispatchQueue.push`)."""

    event: Event
    prompt_tag: str
    received_at: float


@dataclass(frozen=True)
class PushResult:
    """What :meth:`DispatchQueue.push` did: queued it (``accepted``), or not because it was a
    ``duplicate`` (pending, in flight, delivered or dead-lettered already) or ``refused``;
    ``dropped``: ids of pending events the channel's cap evicted to make room."""

    accepted: bool
    duplicate: bool
    dropped: list[str]
    #: Not queued: strangers already hold ``max_stranger_channels`` channels.
    refused: bool = False


@dataclass(frozen=True, eq=False)
class Batch:
    """One turn's worth of events, and the handle for settling that turn.

    Compared and hashed by identity: only the object ``flush_next`` returned is live, so a
    batch can key a dict of running turns, and an earlier batch with the same events (before
    an expiry, say) is a different, stale handle on which every operation does nothing.
    """

    channel: str
    events: list[QueuedEvent]
    cancelled_events: list[QueuedEvent]
    cancel_reason: CancelReason | None
    attempt: int


@dataclass(frozen=True)
class DeadLetter:
    """A batch given up after ``attempts`` failures (:meth:`DispatchQueue.fail`): its channel,
    events and the cancelled events it carried; the bot posts a short notice to its thread."""

    channel: str
    events: list[QueuedEvent]
    cancelled_events: list[QueuedEvent]
    attempts: int


@dataclass(frozen=True)
class ChannelState:
    """One channel's state as :meth:`DispatchQueue.channel_state` exports it.

    A batch in flight is shown as already returned (its events at the front of ``pending``,
    its cancelled events stored, no attempt counted), exactly as :meth:`DispatchQueue.snapshot`
    writes it: this is what a restart must continue from.
    """

    name: str
    pending: list[StoredEvent]
    retry_size: int
    retry_count: int
    cancelled: list[StoredEvent]
    cancel_reason: CancelReason | None
    cancelled_count: int
    backoff_until: float | None


@dataclass(frozen=True)
class StoredEvent:
    """A live event as a store keeps it: the queued event and its push order number."""

    queued: QueuedEvent
    seq: int
