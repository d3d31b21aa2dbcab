"""Listening: the live subscription, and replay of everything missed.

On start, and again each time a relay connection is re-opened, the bot pages backwards through
each read relay (``until``/``limit``, :meth:`RelayPool.query_back`) down to its saved position
minus the allowed clock skew, however many events are waiting, and handles what it finds oldest
first.  Every request asks only for what the gate could admit: ``owner-only`` → ``authors`` =
the owner; ``allowlist`` → the owner and the list; ``anyone`` → no author condition; so a flood
from strangers never pushes the owner out of a relay's capped answer.

``since`` = position − skew (10 minutes by default): an author whose clock runs behind is still
heard, and what is seen twice is refused by id (the queue remembers what it delivered).  The
position itself never moves past the clock, so a message dated in the future cannot make a
replay or a reconnect skip anything.

What a state directory forgot, the relays still know (:mod:`.recall`): before a replay's events
are handled, its gift wraps are opened once (the agent's own copies of its private answers among
them) and each page of :data:`REPLAY_PAGE` events is looked up in one query for the agent's
replies; an event answered already is not answered again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final

import msgspec

from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip59
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND

from .intake import Gate
from .recall import Recall

__all__ = ["Listener", "admissible_authors", "listen_filters"]

#: Events asked for per page of a replay.
REPLAY_PAGE: Final = 500


def admissible_authors(gate: Gate) -> list[str] | None:
    """The authors whose events the gate could admit, or None for anyone."""
    if gate.mode == "owner-only":
        return [gate.owner]
    if gate.mode == "allowlist":
        return [gate.owner, *sorted(gate.allowlist - {gate.owner})]
    return None


#: Gift wraps, stored (1059) and ephemeral (21059: live only, never replayed by a relay).
_WRAP_KINDS: Final = (nip59.GIFT_WRAP_KIND, nip59.EPHEMERAL_GIFT_WRAP_KIND)


def listen_filters(gate: Gate, since: int, channels: tuple[str, ...]) -> list[Filter]:
    """What the bot asks the relays for, from ``since`` on.  Private messages arrive as gift
    wraps addressed to the agent, dated up to two days back by their senders: that filter
    starts two days before ``since`` and names no author (a wrap's signer is a throwaway key;
    the gate judges the sender once the wrap is opened)."""
    filters: list[Filter] = []
    if PRIVATE_MESSAGE_KIND in gate.kinds:
        wraps = Filter(kinds=_WRAP_KINDS, tags={"p": (gate.agent,)})
        filters.append(wraps.with_since(since))  # two days back: see Filter.with_since
    public = tuple(sorted(gate.kinds - {PRIVATE_MESSAGE_KIND}))
    if not public:
        return filters
    authors = admissible_authors(gate)
    base = Filter(
        authors=tuple(authors) if authors is not None else None, kinds=public, since=since
    )
    mentioned = msgspec.structs.replace(base, tags={"p": (gate.agent,)})
    if gate.mentions_required:
        return [mentioned, *filters]
    if channels:
        return [mentioned, msgspec.structs.replace(base, tags={"h": channels}), *filters]
    return [base, *filters]


@dataclass
class Listener:
    """Feeds ``handle`` with live events and with replays (see the module docstring);
    ``replayed`` takes a replayed one instead when given, whose answer ``recall`` looked up
    with its page."""

    pool: RelayPool
    gate: Gate
    channels: tuple[str, ...]
    _: KW_ONLY
    since: Callable[[], int]
    handle: Callable[[Event], Awaitable[object]]
    diagnostics: DiagnosticsFeed
    stopping: Callable[[], bool]
    on_reconnect: Callable[[], None] | None = None
    recall: Recall | None = None
    replayed: Callable[[Event], Awaitable[object]] | None = None
    _wanted: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def request_replay(self, relay: str | None = None) -> None:
        """Ask for a replay (coalesced with one already asked for); ``relay``: the relay whose
        subscription was just opened again (``on_reconnect`` is told)."""
        if relay is not None and self.on_reconnect is not None:
            self.on_reconnect()
        if self.recall is not None:
            self.recall.expect_replay()
        self._wanted.set()

    async def run(self) -> None:
        """Listen until stopped; returns when every relay gave up (or closed the request)."""
        self.request_replay()
        replays = asyncio.create_task(self._replays(), name="buzz-replay")
        since = self.since()
        events = self.pool.subscribe(
            listen_filters(self.gate, since, self.channels),
            resume_since=self.since,
            on_reopen=self.request_replay,
        )
        try:
            async for event in events:
                await self.handle(event)
                if self.stopping():
                    return
        finally:
            replays.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replays
            # Closing the generator closes every relay connection and task (RelayPool).
            await events.aclose()  # type: ignore[attr-defined]

    async def _replays(self) -> None:
        try:
            while not self.stopping():
                await self._wanted.wait()
                self._wanted.clear()
                try:
                    await self.replay()
                finally:
                    if self.recall is not None and not self._wanted.is_set():
                        self.recall.replays_done()
        finally:
            if self.recall is not None:
                self.recall.replays_done()  # nobody waits for a replay that will not come

    async def replay(self) -> int:
        """One replay from the position − skew; the number of events handled."""
        since = self.since()
        found = await self.pool.query_back(
            listen_filters(self.gate, since, self.channels), since=since, page=REPLAY_PAGE
        )
        events = sorted(found.events, key=lambda e: (e.created_at, e.id))
        recall = self.recall
        if recall is not None:
            await recall.open_wraps(events)
        for start in range(0, len(events), REPLAY_PAGE):
            page = events[start : start + REPLAY_PAGE]
            if recall is not None and not self.stopping():
                await recall.look_up(page)  # one query per page
            for event in page:
                if self.stopping():
                    break
                await (self.replayed or self.handle)(event)
        errors = {url: r.error for url, r in found.per_relay.items() if r.error is not None}
        self.diagnostics.emit(
            "replay_completed", payload={"since": since, "events": len(events), "errors": errors}
        )
        return len(events)
