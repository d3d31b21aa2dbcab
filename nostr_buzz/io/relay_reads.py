"""Reading from one relay: a query and a live subscription across the ``REQ``s they send.

A query may send its ``REQ`` twice (once more after a NIP-42 ``AUTH``): :class:`Query` gathers
what both returned into one :class:`QueryResult` and says how it ended.  A live subscription
lives across connections: :class:`Live` keeps the ids it yielded, the ``since`` to re-open
from and the failures that space out its reconnects.  The relay client sends and waits; these
classes only keep the account.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.core.backoff import backoff_base
from nostr_buzz.event import Event
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import Filter

from .relay_auth import AuthRetry
from .relay_subs import MAX_REJECTED_KEPT, Subscription
from .relay_wire import now

#: Ids remembered by a live subscription for de-duplication across reconnects.
MAX_SEEN_IDS: Final = 50_000

#: A live connection that lasted this long (seconds) counts as working for the backoff.
_WORKING_CONNECTION: Final = 60.0

#: What an ``EOSE``'s NIP-67 hint (kept as its detail) says about completeness.
_COMPLETE: Final = {"finish": True, "more": False}


def eose_detail(msg: nip01.EoseMessage) -> str:
    """An ``EOSE``'s NIP-67 hint as a query's end detail (see ``_COMPLETE``)."""
    complete = msg.complete
    return "" if complete is None else "finish" if complete else "more"


@dataclass
class QueryResult:
    """What one relay returned for a query.

    ``events``: valid, matching, de-duplicated by id, in arrival order.  ``finished``: the relay
    reached ``EOSE`` or a normal ``CLOSED``.  ``error``: why it did not finish or failed
    (``timeout``, ``connect failed: …``, ``closed: auth-required: …``, ``connection lost: …``,
    ``too many events: …``).  ``rejected``: verification failures (``bad_id``,
    ``bad_signature``, ``does not match filter``, …), at most ``MAX_REJECTED_KEPT`` texts;
    ``rejected_count`` counts them all.  ``malformed_frames``: frames that were not relay
    messages for this query.
    """

    relay: str
    events: list[Event] = field(default_factory=list)
    finished: bool = False
    error: str | None = None
    rejected: list[str] = field(default_factory=list)
    rejected_count: int = 0
    malformed_frames: int = 0
    #: NIP-67: True when the relay's ``EOSE`` said ``finish`` (it sent every stored event
    #: that matches), False when it said ``more``, None when it said neither.
    complete: bool | None = None


class Query:
    """One query's ``REQ`` until ``EOSE`` or ``CLOSED``, perhaps sent twice (see
    :class:`~nostr_buzz.io.relay_auth.AuthRetry`): the result it fills, and the ids that end
    it early."""

    def __init__(
        self, relay: str, filters: list[Filter], max_events: int, end_when_ids_served: bool
    ) -> None:
        self.filters = filters
        self.max_events = max_events
        self.result = QueryResult(relay=relay)
        self.seen: set[str] = set()  # across both REQs
        self.auth = AuthRetry()
        self.wanted: set[str] | None = None
        if end_when_ids_served and all(f.ids is not None for f in filters):
            self.wanted = {i for f in filters for i in f.ids or ()}

    async def until_end(self, sub: Subscription, deadline: float) -> bool:
        """Wait for ``sub``'s end (or, with ``wanted``, for every id); True when timed out."""
        try:
            async with asyncio.timeout(max(0.0, deadline - now())):
                while sub.end is None:
                    if self.wanted is not None and self.wanted <= sub.seen:
                        sub.finish("eose")  # all there: the relay's EOSE may come late
                        break
                    sub.wake.clear()
                    await sub.wake.wait()
        except TimeoutError:
            return True
        return False

    def take(self, sub: Subscription) -> None:
        """Add ``sub``'s events (once each, at most ``max_events``) and rejections."""
        result = self.result
        for ev in sub.events:
            if ev.id not in self.seen and len(result.events) < self.max_events:
                self.seen.add(ev.id)
                result.events.append(ev)
        result.rejected.extend(sub.rejected[: MAX_REJECTED_KEPT - len(result.rejected)])
        result.rejected_count += sub.rejected_count

    def ended(self, how: str, detail: str, *, timed_out: bool) -> None:
        """Record how the ``REQ`` ended: finished at ``EOSE`` or a plain ``CLOSED``, else why."""
        result = self.result
        if timed_out:
            result.error = "timeout"
        elif how == "eose" or (how == "closed" and not detail):
            result.finished = True
            result.complete = _COMPLETE.get(detail) if how == "eose" else None
        elif how == "closed":
            result.error = f"closed: {detail}"
        elif how == "overflow":
            result.error = f"too many events: {detail}"
        elif how == "cut off":
            result.error = f"cut off: the relay sent {detail} for one query"
        else:
            result.error = f"connection lost: {detail}"


class Live:
    """One live subscription across its connections: the ids it yielded (a re-opened ``REQ``
    serves some again), the newest ``created_at`` (the next ``since``), and the consecutive
    failures that space out its reconnects."""

    def __init__(
        self, filters: list[Filter], *, base: float, cap: float, max_failures: int
    ) -> None:
        self.filters = filters
        self.base = base
        self.cap = cap
        self.max_failures = max_failures
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.last_seen: int | None = None
        self.opened = False
        self.opened_at = 0.0
        self.progressed = False
        self.failures = 0
        self.auth = AuthRetry()

    def next_filters(self, resume_since: Callable[[], int] | None) -> list[Filter]:
        resume = resume_since() if resume_since is not None and self.opened else self.last_seen
        return self.filters if resume is None else [f.with_since(resume) for f in self.filters]

    def open(self) -> None:
        self.opened = True
        self.opened_at = now()
        self.progressed = False

    def fresh(self, event: Event) -> bool:
        """True the first time ``event`` is seen (remembering it), False for a re-served one."""
        if event.id in self.seen:
            return False
        self.progressed = True
        self.seen[event.id] = None
        if len(self.seen) > MAX_SEEN_IDS:
            self.seen.popitem(last=False)
        last = self.last_seen
        self.last_seen = event.created_at if last is None else max(last, event.created_at)
        return True

    def worked(self) -> bool:
        # A connection that brought new events or lasted was working: count afresh.  Re-served
        # duplicates are no progress, so a relay that drops every connection after replaying
        # old events still runs out of attempts.
        return self.progressed or now() - self.opened_at >= _WORKING_CONNECTION

    def give_up(self, *, afresh: bool = False) -> bool:
        """Count one failed attempt (the first, when ``afresh``); True past ``max_failures``."""
        self.failures = 1 if afresh else self.failures + 1
        return self.failures > self.max_failures

    async def back_off(self) -> None:
        await asyncio.sleep(backoff_base(self.failures, base=self.base, cap=self.cap))
