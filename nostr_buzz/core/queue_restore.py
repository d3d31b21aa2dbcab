"""A dispatch queue's channels and memory rebuilt from a snapshot (docs/queue.md, "Replay and
restart"): every event filed under the channel it belongs to, once, with a finite arrival
time and a push order number of its own below ``next_seq``; every channel's counts and sets
consistent (:func:`~nostr_buzz.core.queue_snapshot.check_channel`); the remembered ids unique
and not also queued.  Anything else raises :class:`~nostr_buzz.errors.QueueError`.  Pure: no
clock, no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable

from nostr_buzz.core.queue_accounts import Accounts
from nostr_buzz.core.queue_channel import Channel, Entry
from nostr_buzz.core.queue_snapshot import (
    WireChannel,
    WireEntry,
    WireSnapshot,
    check_channel,
    check_header,
    corrupt,
)
from nostr_buzz.event import Event

__all__ = ["restored_channels"]


def restored_channels(
    snap: WireSnapshot, accounts: Accounts, channel_of: Callable[[Event], str], cap: int
) -> list[Channel]:
    """The channels of ``snap``, in its order, each of batch size ``cap``, with their events
    held and the remembered ids loaded into ``accounts`` (a new queue's)."""
    check_header(snap)
    seqs: set[int] = set()
    channels: dict[str, Channel] = {}
    for wc in snap.channels:
        if wc.name in channels:
            raise corrupt(f"channel {wc.name!r} appears twice")
        channels[wc.name] = _channel(wc, snap, seqs, accounts, channel_of, cap)
    accounts.remembered.load(snap.remembered, accounts.live)
    return list(channels.values())


def _channel(
    wc: WireChannel,
    snap: WireSnapshot,
    seqs: set[int],
    accounts: Accounts,
    channel_of: Callable[[Event], str],
    cap: int,
) -> Channel:
    def entry(w: WireEntry) -> Entry:
        ev = w.event
        if channel_of(ev) != wc.name:
            raise corrupt(f"event {ev.id} is filed under the wrong channel")
        if ev.id in accounts.live:
            raise corrupt(f"event {ev.id} appears twice")
        if not math.isfinite(w.received_at):
            raise corrupt("received_at is not finite")
        if not 0 <= w.seq < snap.next_seq or w.seq in seqs:
            raise corrupt("push order numbers are not unique and below next_seq")
        seqs.add(w.seq)
        accounts.live[ev.id] = wc.name
        return Entry.of(ev, w.prompt_tag, w.received_at, w.seq)

    ch = Channel(wc.name, cap)
    ch.pending = [entry(w) for w in wc.pending]
    ch.cancelled = [entry(w) for w in wc.cancelled]
    check_channel(wc)
    ch.retry_size, ch.retry_count = wc.retry_size, wc.retry_count
    ch.cancel_reason, ch.cancelled_count = wc.cancel_reason, wc.cancelled_count
    ch.backoff_until = wc.backoff_until
    accounts.strangers.hold(ch, [*ch.pending, *ch.cancelled])
    return ch
