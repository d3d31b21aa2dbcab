"""Many relays at once: concurrent publish fan-out, merged queries and live subscriptions.

Each operation opens one :class:`RelayClient` per relay, runs them concurrently, each bounded by
the pool's timeout (connect plus operation), and closes them all before returning: one dead or
silent relay never stalls the others, and no task outlives the call (for a live subscription:
the iterator).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip01, nip10
from nostr_buzz.nips.nip01 import FilterLike
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url
from nostr_buzz.signer import Signer, signer_of

from .relay import (
    CLOSE_TIMEOUT,
    MAX_QUERY_BYTES,
    MAX_QUERY_EVENTS,
    MAX_QUERY_TAGS,
    MAX_SEEN_IDS,
    Budget,
    QueryResult,
    RelayClient,
    SharedBudget,
    Verdict,
)

#: Extra time past the timeout before the pool abandons a relay outright (a backstop: the
#: client already bounds itself; this covers closing the socket).
_GRACE: Final = CLOSE_TIMEOUT * 3
#: Live events waiting for the consumer of :meth:`RelayPool.subscribe`: few, since an event
#: may be up to a frame (1 MiB); each relay client buffers more, bounded by bytes.
_LIVE_QUEUE: Final = 64
#: Hint relays (from a stranger's nevent) one query asks besides the listed relays: a code can
#: name hundreds, and each would be a connection and a budget of its own (docs/cli.md).
MAX_HINT_RELAYS: Final = 8
#: What all the relays of one query may send together (each relay keeps its own budget of one
#: query's worth, io/relay.py): twice one relay's, so that more relays never mean more memory.
TOTAL_QUERY_BUDGET: Final = Budget(2 * MAX_QUERY_EVENTS, 2 * MAX_QUERY_BYTES, 2 * MAX_QUERY_TAGS)


@dataclass
class PublishResult:
    """Each relay's verdict; ``ok`` when at least ``min_ok`` relays have the event."""

    event_id: str
    verdicts: dict[str, Verdict]
    min_ok: int = 1

    @property
    def accepted(self) -> list[str]:
        """Relays that accepted the event or already had it."""
        return [url for url, v in self.verdicts.items() if v.ok]

    @property
    def failed(self) -> list[str]:
        return [url for url, v in self.verdicts.items() if not v.ok]

    @property
    def ok(self) -> bool:
        return len(self.accepted) >= self.min_ok


@dataclass
class PoolQueryResult:
    """Merged events (valid, matching, de-duplicated by id, first arrival wins) and each
    relay's own :class:`QueryResult`."""

    events: list[Event] = field(default_factory=list)
    per_relay: dict[str, QueryResult] = field(default_factory=dict)

    @property
    def any_finished(self) -> bool:
        return any(r.finished for r in self.per_relay.values())

    @property
    def rejected(self) -> dict[str, list[str]]:
        """Verification failures by relay (only relays that had some)."""
        return {url: r.rejected for url, r in self.per_relay.items() if r.rejected_count}

    def served_by(self) -> dict[str, frozenset[str]]:
        """Each event's id → the relays whose own answer held it: an event several relays
        served names each of them, so what a relay vouches for is only what it served."""
        relays: dict[str, set[str]] = {}
        for url, result in self.per_relay.items():
            for event in result.events:
                relays.setdefault(event.id, set()).add(url)
        return {event_id: frozenset(urls) for event_id, urls in relays.items()}


def _unique_urls(urls: Iterable[str]) -> list[str]:
    """Checked URLs in order, without repeats of the same relay."""
    if isinstance(urls, str):  # one URL, not an iterable of its characters
        urls = [urls]
    out: list[str] = []
    seen: set[str] = set()
    for url in urls:
        checked = check_relay_url(url)
        key = normalize_relay_url(checked)
        if key not in seen:
            seen.add(key)
            out.append(checked)
    return out


def is_usable_url(url: str) -> bool:
    """A relay URL a query can use (ws:// or wss://, well formed)."""
    try:
        check_relay_url(url)
    except RelayError:
        return False
    return True


def _merge(results: Iterable[tuple[str, QueryResult]]) -> PoolQueryResult:
    """Each relay's result, and their events merged by id (first arrival wins)."""
    merged = PoolQueryResult()
    seen: set[str] = set()
    for url, result in results:
        merged.per_relay[url] = result
        for event in result.events:
            if event.id not in seen:
                seen.add(event.id)
                merged.events.append(event)
    return merged


class RelayPool:
    """A set of relays.  Bad URLs raise :class:`~nostr_buzz.errors.RelayError` here.

    NIP-42: the configured relays are answered with ``secret`` or through ``signer`` (at most
    one; a :class:`~nostr_buzz.signer.Signer` keeps the key out of this process).
    """

    def __init__(
        self,
        urls: Iterable[str],
        *,
        secret: SecretKey | None = None,
        signer: Signer | None = None,
        timeout: float = 10.0,
        total_budget: Budget = TOTAL_QUERY_BUDGET,
    ) -> None:
        self.urls = _unique_urls(urls)
        self.signer = signer_of(secret, signer)
        self.timeout = float(timeout)
        #: What all relays of one :meth:`query` may send together (one budget they share).
        self.total_budget = total_budget
        #: Told ``(url, why)`` whenever a relay is cut off for sending more than its bounds.
        self.on_cut_off: Callable[[str, str], None] | None = None

    async def publish(
        self, event: Event, *, min_ok: int = 1, timeout: float | None = None
    ) -> PublishResult:
        """Send ``event`` to every relay concurrently and collect the verdicts."""
        limit = self.timeout if timeout is None else float(timeout)

        async def one(url: str) -> Verdict:
            client = RelayClient(url, signer=self.signer, timeout=limit)
            try:
                async with asyncio.timeout(limit + _GRACE):
                    return await client.publish(event)
            except TimeoutError:
                return Verdict(url, event.id, False, False, "error:", "timeout")
            finally:
                await client.close()

        verdicts = await asyncio.gather(*(one(url) for url in self.urls))
        return PublishResult(event.id, dict(zip(self.urls, verdicts, strict=True)), min_ok)

    async def query(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        extra_urls: Sequence[str] = (),
        timeout: float | None = None,
        enough: Callable[[QueryResult], bool] | None = None,
        max_hints: int = MAX_HINT_RELAYS,
    ) -> PoolQueryResult:
        """Ask every relay (plus ``extra_urls``, hint relays never authenticated to: at most
        ``max_hints`` of them, the first usable ones not listed already).  All of them draw on
        one :attr:`total_budget`: the relay whose frame would pass it is cut off.

        ``enough``: when one relay's finished result satisfies it, the relays still working
        are abandoned (closed at once) and reported as unfinished with the error
        ``"not waited for"``: a fetch by id needs only the first valid copy.  With it, a relay
        that has served every id asked for is finished without waiting for its EOSE.
        """
        flts = nip01.as_filters(filters)
        limit = self.timeout if timeout is None else float(timeout)
        configured = {normalize_relay_url(u) for u in self.urls}
        # Hints come from untrusted nevents: ones that are not ws/wss URLs are skipped
        # (docs/cli.md).
        usable = _unique_urls(u for u in extra_urls if is_usable_url(u))
        hints = [u for u in usable if normalize_relay_url(u) not in configured][:max_hints]
        targets = [(u, True) for u in self.urls] + [(u, False) for u in hints]
        shared = SharedBudget(self.total_budget)

        async def one(url: str, auth: bool) -> QueryResult:
            client = RelayClient(
                url,
                signer=self.signer if auth else None,
                timeout=limit,
                auth=auth,
                on_cut_off=self.on_cut_off,
            )
            try:
                async with asyncio.timeout(limit + _GRACE):
                    return await client.query(
                        flts, end_when_ids_served=enough is not None, shared=shared
                    )
            except TimeoutError:
                return QueryResult(relay=url, error="timeout")
            finally:
                await client.close()

        tasks = [asyncio.create_task(one(u, a), name=f"pool-query {u}") for u, a in targets]
        try:
            if enough is None:
                await asyncio.gather(*tasks)
            else:
                for finished in asyncio.as_completed(tasks):
                    if enough(await finished):
                        break
        finally:
            for task in tasks:
                task.cancel()  # a no-op for the finished ones
            await asyncio.gather(*tasks, return_exceptions=True)
        results = [
            t.result()
            if not t.cancelled() and t.exception() is None
            else QueryResult(relay=url, error="not waited for")
            for t, (url, _) in zip(tasks, targets, strict=True)
        ]
        return _merge((url, result) for (url, _), result in zip(targets, results, strict=True))

    async def query_back(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        since: int,
        page: int = 500,
        max_pages: int = 1_000,
        timeout: float | None = None,
    ) -> PoolQueryResult:
        """Everything matching ``filters`` from ``since`` on (a filter's own ``since`` wins),
        however much there is: each relay is asked page by page backwards (``until`` = the
        oldest ``created_at`` of the previous page, ``limit`` = ``page``) until a page brings
        nothing new or reaches the earliest ``since``.

        A relay caps what one query returns (often 500, newest first); paging makes the cap
        irrelevant.  ``timeout`` bounds each page.  Events are merged and de-duplicated by id.
        """
        flts = [
            f if f.since is not None else msgspec.structs.replace(f, since=since)
            for f in nip01.as_filters(filters)
        ]
        floor = min(f.since or 0 for f in flts)
        limit = self.timeout if timeout is None else float(timeout)

        async def one(url: str) -> QueryResult:
            client = RelayClient(url, signer=self.signer, timeout=limit, on_cut_off=self.on_cut_off)
            collected = QueryResult(relay=url)
            seen: set[str] = set()
            until: int | None = None
            try:
                for _ in range(max_pages):
                    bounded = [msgspec.structs.replace(f, until=until, limit=page) for f in flts]
                    async with asyncio.timeout(limit + _GRACE):
                        result = await client.query(bounded)
                    fresh = [e for e in result.events if e.id not in seen]
                    seen.update(e.id for e in fresh)
                    collected.events.extend(fresh)
                    collected.rejected.extend(result.rejected)
                    collected.rejected_count += result.rejected_count
                    collected.error, collected.finished = result.error, result.finished
                    collected.complete = result.complete
                    if result.error is not None or not result.events or result.complete:
                        break  # NIP-67 "finish": the relay sent all there is
                    oldest = min(e.created_at for e in result.events)
                    if oldest <= floor:
                        break
                    if not fresh and until is not None and oldest == until:
                        # A whole page of one second, all seen: that second holds more than a
                        # relay returns at once.  Ask for it channel by channel.
                        await self._sweep_second(client, flts, until, collected, seen, page)
                    # The oldest second again (more events may share it), one earlier when
                    # the page brought nothing new.
                    until = oldest if fresh else oldest - 1
            except TimeoutError:
                collected.error = "timeout"
            finally:
                await client.close()
            return collected

        results = await asyncio.gather(*(one(url) for url in self.urls))
        return _merge(zip(self.urls, results, strict=True))

    async def _sweep_second(
        self,
        client: RelayClient,
        flts: list[nip01.Filter],
        second: int,
        collected: QueryResult,
        seen: set[str],
        page: int,
    ) -> None:
        """The events of one crowded second, one channel (``h`` tag) at a time: each channel
        seen in that second is asked for on its own.  What still overflows is reported in
        ``collected.error``."""
        channels = sorted(
            {c for e in collected.events if e.created_at == second and (c := nip10.channel(e))}
        )
        for channel in channels:
            narrowed = [
                msgspec.structs.replace(
                    f, since=second, until=second, limit=page, tags={**f.tags, "h": (channel,)}
                )
                for f in flts
                if "h" not in f.tags or channel in f.tags["h"]
            ]
            if not narrowed:
                continue
            async with asyncio.timeout(client.timeout + _GRACE):
                result = await client.query(narrowed)
            fresh = [e for e in result.events if e.id not in seen]
            seen.update(e.id for e in fresh)
            collected.events.extend(fresh)
            if len(result.events) >= page:
                collected.error = f"more than {page} events in channel {channel} at {second}"

    async def subscribe(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        reconnect_delay: float = 0.25,
        max_reconnect_delay: float = 10.0,
        resume_since: Callable[[], int] | None = None,
        on_reopen: Callable[[str], None] | None = None,
    ) -> AsyncIterator[Event]:
        """Live events from every relay, merged and de-duplicated by id.

        Each relay runs :meth:`RelayClient.subscribe` (reconnect with backoff, ``since``
        resume; ``resume_since`` and ``on_reopen`` are passed on); a relay that fails does not
        stop the others.  Use with ``contextlib.aclosing``: closing the iterator closes every
        connection and task.
        """
        flts = nip01.as_filters(filters)
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=_LIVE_QUEUE)
        clients = [
            RelayClient(u, signer=self.signer, timeout=self.timeout, on_cut_off=self.on_cut_off)
            for u in self.urls
        ]

        async def pump(client: RelayClient) -> None:
            async for event in client.subscribe(
                flts,
                reconnect_delay=reconnect_delay,
                max_reconnect_delay=max_reconnect_delay,
                resume_since=resume_since,
                on_reopen=(lambda: on_reopen(client.url)) if on_reopen is not None else None,
            ):
                await queue.put(event)  # backpressure: a slow consumer slows the relays down

        tasks = [asyncio.create_task(pump(c), name=f"pool-sub {c.url}") for c in clients]
        seen: OrderedDict[str, None] = OrderedDict()
        try:
            while not all(t.done() for t in tasks) or not queue.empty():
                try:
                    async with asyncio.timeout(self.timeout):
                        event = await queue.get()
                except TimeoutError:
                    continue
                if event.id in seen:
                    continue
                seen[event.id] = None
                if len(seen) > MAX_SEEN_IDS:
                    seen.popitem(last=False)
                yield event
        finally:
            for client in clients:
                await client.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
