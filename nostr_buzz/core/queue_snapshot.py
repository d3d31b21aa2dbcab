"""The dispatch queue's snapshot: its JSON schema, and the checks a stored snapshot must pass
before a queue continues from it (docs/queue.md, "Restart").  Pure: bytes in, typed values or
:class:`QueueError` out."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

import msgspec

from nostr_buzz.core.queue_types import ChannelState, StoredEvent
from nostr_buzz.core.turn_input import CancelReason
from nostr_buzz.errors import BuzzError, QueueError
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10

SNAPSHOT_VERSION: Final = 1


class WireEntry(msgspec.Struct, forbid_unknown_fields=True):
    event: Event  # decoding re-verifies id and signature (Event.__post_init__)
    prompt_tag: str
    received_at: int | float
    seq: int


class WireChannel(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    pending: list[WireEntry]
    retry_size: int
    retry_count: int
    cancelled: list[WireEntry]
    cancel_reason: CancelReason | None
    cancelled_count: int
    backoff_until: int | float | None


class WireSnapshot(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    next_seq: int
    channels: list[WireChannel]
    remembered: list[str]  # delivered or dead-lettered ids, oldest first


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(WireSnapshot).decode


def corrupt(what: str) -> QueueError:
    return QueueError(f"corrupt queue snapshot: {what}")


def wire_snapshot(
    channels: Iterable[ChannelState], remembered: Iterable[str], next_seq: int
) -> WireSnapshot:
    """Exported channel states, remembered ids (oldest first) and ``next_seq`` as one snapshot."""
    return WireSnapshot(
        SNAPSHOT_VERSION, next_seq, [_wire_channel(c) for c in channels], list(remembered)
    )


def encode_snapshot(snap: WireSnapshot) -> bytes:
    return _encode(snap)


def read_snapshot(data: object) -> WireSnapshot:
    """A snapshot's bytes decoded and its header checked, or :class:`QueueError` saying why not."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError:
            raise corrupt("not UTF-8 text") from None
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise QueueError("a queue snapshot is JSON bytes")
    try:
        return _decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise corrupt(str(exc)) from None
    except BuzzError as exc:  # in case an event error escapes msgspec's wrapping
        raise corrupt(str(exc)) from None


def check_header(snap: WireSnapshot) -> None:
    if snap.version != SNAPSHOT_VERSION:
        raise corrupt(f"unsupported version {snap.version}")
    if snap.next_seq < 0:
        raise corrupt("negative next_seq")


def check_channel(wc: WireChannel) -> None:
    """What is wrong with a stored channel's counts and sets, raised; its events are checked
    one by one where the queue files them."""
    problem = _channel_problem(wc)
    if problem is not None:
        raise corrupt(problem)


def _channel_problem(wc: WireChannel) -> str | None:
    if not wc.pending and not wc.cancelled:
        return f"channel {wc.name!r} is empty"
    if not 0 <= wc.retry_size <= len(wc.pending) or wc.retry_count < 0:
        return f"channel {wc.name!r} has a bad retry set"
    if wc.retry_size == 0 and wc.retry_count != 0:
        return f"channel {wc.name!r} counts attempts of no set"
    keys = {(w.event.pubkey, nip10.destination(w.event)) for w in wc.pending[: wc.retry_size]}
    if len(keys) > 1:
        return f"channel {wc.name!r} has a retry set with several authority keys"
    if (wc.cancel_reason is None) != (not wc.cancelled):
        return f"channel {wc.name!r} has cancelled events without a reason"
    if wc.cancelled_count < 0 or (wc.cancelled_count and not wc.cancelled):
        return f"channel {wc.name!r} has a bad cancelled attempt count"
    if wc.backoff_until is not None and not math.isfinite(wc.backoff_until):
        return "backoff_until is not finite"
    return None


def _wire_entry(e: StoredEvent) -> WireEntry:
    return WireEntry(e.queued.event, e.queued.prompt_tag, e.queued.received_at, e.seq)


def _wire_channel(state: ChannelState) -> WireChannel:
    return WireChannel(
        name=state.name,
        pending=[_wire_entry(e) for e in state.pending],
        retry_size=state.retry_size,
        retry_count=state.retry_count,
        cancelled=[_wire_entry(e) for e in state.cancelled],
        cancel_reason=state.cancel_reason,
        cancelled_count=state.cancelled_count,
        backoff_until=state.backoff_until,
    )
