"""The dispatch queue's accounts of who holds what (docs/queue.md, "Flushing" and "Floods"):
the channel each live event id is in (pending, in flight or stored cancelled), the ids
remembered as handled (the duplicate memory), and the channels strangers — any actor but the
owner — hold live events in.  Pure: no clock, no I/O."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

from nostr_buzz.core.given import given_key
from nostr_buzz.core.queue_channel import Channel, Entry
from nostr_buzz.core.queue_snapshot import corrupt
from nostr_buzz.errors import QueueError
from nostr_buzz.keys import PublicKey

__all__ = ["REMEMBERED_IDS", "Accounts", "Remembered", "Strangers"]

#: How many delivered or dead-lettered ids are remembered for duplicate detection.
REMEMBERED_IDS: Final = 10_000


class Strangers:
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

    def of(self, entry: Entry) -> bool:
        return entry.key[0] != self.owner

    def refuses(self, name: str, actor: str) -> bool:
        """Whether a stranger's event for channel ``name`` would open one stranger channel
        more than the cap.  Refused, not merged into another channel: each channel is its own
        conversation (and its own agent session)."""
        if self.cap is None or actor == self.owner or name in self.channels:
            return False
        return len(self.channels) >= self.cap

    def victim(self, pending: list[Entry]) -> int:
        """The pending event a full channel drops: the earliest received of a stranger's, the
        owner's earliest only when every pending event is the owner's."""
        strangers = [i for i, e in enumerate(pending) if self.of(e)]
        return min(strangers or range(len(pending)), key=lambda i: pending[i].wait)

    def hold(self, ch: Channel, entries: list[Entry]) -> None:
        ch.strangers += sum(map(self.of, entries))
        if ch.strangers:
            self.channels.add(ch.name)

    def release(self, ch: Channel, entries: list[Entry]) -> None:
        ch.strangers -= sum(map(self.of, entries))
        if not ch.strangers:
            self.channels.discard(ch.name)


class Remembered:
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


class Accounts:
    """Who holds what in the queue (see the module docstring): every event that becomes live
    in a channel, leaves it, or is remembered as handled passes through here."""

    def __init__(self, owner: str | PublicKey | None, max_stranger_channels: int | None) -> None:
        self.strangers = Strangers(owner, max_stranger_channels)
        self.live: dict[str, str] = {}  # channel of each id pending, in flight or stored
        self.remembered = Remembered()

    def knows(self, event_id: str) -> bool:
        """Whether ``event_id`` is live in a channel or remembered."""
        return event_id in self.live or event_id in self.remembered

    def hold(self, ch: Channel, entries: list[Entry]) -> None:
        """``entries`` became live in ``ch``."""
        for entry in entries:
            self.live[entry.id] = ch.name
        self.strangers.hold(ch, entries)

    def release(self, ch: Channel, entries: list[Entry]) -> None:
        """``entries`` left ``ch`` (delivered, dead-lettered or dropped)."""
        for entry in entries:
            self.live.pop(entry.id, None)
        self.strangers.release(ch, entries)

    def remember(self, ids: Iterable[str]) -> None:
        """``ids`` were handled (delivered or dead-lettered): duplicates from now on."""
        for event_id in ids:
            self.live.pop(event_id, None)
            self.remembered.add(event_id)
