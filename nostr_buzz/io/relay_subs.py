"""The ``REQ``s open on one relay: what each received, against the budget it may take.

:class:`Subscription` is one ``REQ``'s buffer: every ``EVENT`` frame for it is charged to its
:class:`Budget` (and a pool query's :class:`SharedBudget`), then verified and matched against
its filters; what fails is counted, never passed on.  :class:`EndedSubscriptions` charges the
frames a relay still sends for a ``REQ`` it was told to ``CLOSE``.  No I/O happens here: the
inbox (io/relay_inbox.py) feeds the frames, the relay client drains the events.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nostr_buzz.errors import InvalidEvent
from nostr_buzz.event import Event
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import Filter

#: Events buffered by one query before it stops and reports ``too many events``.
MAX_QUERY_EVENTS: Final = 10_000
#: Bytes of ``EVENT`` frames one query accepts from a relay (rejected events count too); past
#: it the relay is cut off (the connection dropped) and named in the result's error.
MAX_QUERY_BYTES: Final = 32 << 20
#: Tags in the events of one query; past it the relay is cut off, as for bytes.
MAX_QUERY_TAGS: Final = 200_000
#: Tags one event may carry; an event with more is refused before it is verified (the events
#: this project reads carry a handful).
MAX_EVENT_TAGS: Final = 2_500
#: Events buffered for a live subscription whose consumer is slow; past it the subscription is
#: closed and re-opened from the last event seen, so nothing is lost and memory stays bounded.
MAX_LIVE_BUFFER: Final = 1_000
#: Bytes of events buffered for a live subscription, bounded as the count above.
MAX_LIVE_BUFFER_BYTES: Final = 16 << 20
#: Verification failure texts kept per result (the total is counted separately).
MAX_REJECTED_KEPT: Final = 100


@dataclass(frozen=True)
class Budget:
    """What one query (or one live subscription's buffer) may take from a relay."""

    events: int = MAX_QUERY_EVENTS
    bytes: int = MAX_QUERY_BYTES
    tags: int = MAX_QUERY_TAGS


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


class SharedBudget:
    """One :class:`Budget` drawn on by every relay of one pool query (io/pool.py): each relay
    keeps its own budget, and what they all send together is bounded too, so that many
    relays (hints from a stranger's nevent) cannot multiply the memory a query holds."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.events = 0
        self.bytes = 0
        self.tags = 0

    def take(self, size: int, tags: int) -> str | None:
        """Charge one ``EVENT`` frame; ``None``, or what the relays together would pass."""
        total = self.budget
        if self.events + 1 > total.events:
            return f"more than its share of {total.events} events (all relays together)"
        if self.bytes + size > total.bytes:
            return f"more than its share of {_mib(total.bytes)} of events (all relays together)"
        if self.tags + tags > total.tags:
            return f"more than its share of {total.tags} tags (all relays together)"
        self.events += 1
        self.bytes += size
        self.tags += tags
        return None


def tags_in(raw: object) -> int:
    """How many tags an ``EVENT`` frame's event says it carries (0 when it has no tag list)."""
    raw_tags = raw.get("tags") if isinstance(raw, dict) else None
    return len(raw_tags) if isinstance(raw_tags, list) else 0


class Subscription:
    """State of one ``REQ``: filled by the inbox, drained by the client's query or subscribe.

    A query charges every ``EVENT`` frame's bytes and tags against its budget; a live
    subscription charges what it buffers and is credited as the consumer drains it.
    """

    def __init__(
        self,
        sub_id: str,
        filters: list[Filter],
        *,
        live: bool,
        budget: Budget,
        shared: SharedBudget | None = None,
    ) -> None:
        self.id = sub_id
        self.filters = filters
        self.live = live
        self.cap = budget.events
        self.budget = budget
        self.shared = shared  # queries only: a live buffer is credited back, a total is not
        self.bytes = 0
        self.tags = 0
        self.sizes: deque[int] = deque()
        self.events: deque[Event] = deque()
        self.seen: set[str] = set()  # query only; live de-duplication is done by the caller
        self.rejected: list[str] = []
        self.rejected_count = 0
        self.end: tuple[str, str] | None = None  # (eose|closed|lost|overflow, detail)
        self.wake = asyncio.Event()
        #: A live subscription's caller, told when the relay has sent its stored events.
        self.on_eose: Callable[[], None] | None = None

    def finish(self, how: str, detail: str = "") -> None:
        if self.end is None:
            self.end = (how, detail)
        self.wake.set()

    def reject(self, reason: str) -> None:
        self.rejected_count += 1
        if len(self.rejected) < MAX_REJECTED_KEPT:
            self.rejected.append(reason)

    def charge(self, size: int, tags: int) -> bool:
        """Count one frame of ``size`` bytes and ``tags`` tags; False (and the end) when it
        would pass the budget."""
        if self.end is not None:
            return False
        if self.bytes + size > self.budget.bytes:
            self.finish("cut off", f"more than {_mib(self.budget.bytes)} of events")
            return False
        if self.tags + tags > self.budget.tags:
            self.finish("cut off", f"more than {self.budget.tags} tags")
            return False
        if self.shared is not None and (beyond := self.shared.take(size, tags)) is not None:
            self.finish("cut off", beyond)
            return False
        self.bytes += size
        self.tags += tags
        return True

    def refund(self, size: int, tags: int) -> None:
        """A live subscription's consumer took an event: its bytes and tags are free again."""
        if self.live:
            self.bytes -= size
            self.tags -= tags

    def receive(self, raw: object, size: int) -> str | None:
        """One ``EVENT`` frame of ``size`` bytes for this ``REQ``: charged, then verified and
        matched against the filters; returns why it was rejected (counted here), or ``None``."""
        if self.end is not None:
            return None
        tags = tags_in(raw)
        if not self.charge(size, tags):
            return None
        if tags > MAX_EVENT_TAGS:  # refused before the costly verification
            return self._refuse(size, tags, f"more than {MAX_EVENT_TAGS} tags")
        try:
            event = Event.from_dict(raw)
        except InvalidEvent as exc:
            return self._refuse(size, tags, exc.reason)
        if not nip01.matches_any(self.filters, event):
            return self._refuse(size, tags, "does not match filter")
        self.offer(event, size)
        return None

    def _refuse(self, size: int, tags: int, reason: str) -> str:
        self.refund(size, tags)
        self.reject(reason)
        return reason

    def offer(self, event: Event, size: int = 0) -> None:
        if self.end is not None:
            self.refund(size, len(event.tags))
            return
        if not self.live:
            if event.id in self.seen:
                return
            self.seen.add(event.id)
        self.events.append(event)
        self.sizes.append(size)
        self.wake.set()
        if len(self.events) >= self.cap:
            self.finish("overflow", f"stopped after {self.cap} events")

    async def next(self, timeout: float) -> Event | None:
        """Next buffered event; ``None`` once ended and drained; raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while True:
                if self.events:
                    event = self.events.popleft()
                    self.refund(self.sizes.popleft(), len(event.tags))
                    return event
                if self.end is not None:
                    return None
                self.wake.clear()
                await self.wake.wait()


class Flooding(Exception):
    """A relay went on sending events for a ``REQ`` this client closed past its budget."""


class EndedSubscriptions:
    """The subscriptions this client closed lately: frames still in flight for them are dropped,
    but charged to the budget the ``REQ`` had, so that a relay that goes on sending after
    ``CLOSE`` is cut off as if it were open (a kept connection would read it for ever)."""

    def __init__(self) -> None:
        self._used: OrderedDict[str, tuple[Budget, int, int]] = OrderedDict()

    def add(self, sub: Subscription) -> None:
        self._used[sub.id] = (sub.budget, sub.bytes, sub.tags)
        if len(self._used) > 64:
            self._used.popitem(last=False)

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self._used

    def charge(self, msg: nip01.EventMessage, size: int) -> str | None:
        """Count a late ``EVENT`` frame; what it passes, or ``None`` (also when its ``REQ`` is
        not one of ours: a malformed frame, counted elsewhere)."""
        used = self._used.get(msg.subscription_id)
        if used is None:
            return None
        budget, used_bytes, used_tags = used
        used_bytes += size
        used_tags += tags_in(msg.event)
        self._used[msg.subscription_id] = (budget, used_bytes, used_tags)
        if used_bytes > budget.bytes:
            return f"more than {_mib(budget.bytes)} of events"
        return f"more than {budget.tags} tags" if used_tags > budget.tags else None
