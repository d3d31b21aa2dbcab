"""Many relays at once: concurrent publish fan-out, merged queries and live subscriptions.

Each operation asks every relay concurrently, each bounded by the pool's timeout (connect plus
operation), and returns once all have answered or the grace period after the first answer has
passed (:data:`DEFAULT_GRACE`): one dead, silent or slow relay never stalls the others, and no
task outlives the call (for a live subscription: the iterator).  A pool used as an async
context manager keeps one connection per relay across calls (io/connections.py); otherwise
each call opens and closes its own.

A read of replaceable or addressable state (:meth:`RelayPool.query_state`) is different: the
fastest relay's word must not decide which version counts, so it waits for every relay that
serves (up to the timeout) and keeps the newest version; a relay whose last answer was a
failure is not waited for, so a dead or silent relay costs such a read its timeout once, not
every time.  What could not be confirmed is named in the result.

How the pool reaches each relay (NIP-42 trust, local addresses, kept connections and each
relay's health) is :class:`~nostr_buzz.io.relay_access.RelayAccess`'s, its base.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import FilterLike
from nostr_buzz.nips.relay_url import normalize_relay_url
from nostr_buzz.signer import Signer

from .answers import AnswerRecord, Lateness
from .connections import IDLE_TIMEOUT
from .paging import read_pages
from .publishing import PublishResult, PublishRun, left_verdict
from .relay import (
    CLOSE_TIMEOUT,
    MAX_QUERY_BYTES,
    MAX_QUERY_EVENTS,
    MAX_QUERY_TAGS,
    MAX_SEEN_IDS,
    Budget,
    QueryResult,
    SharedBudget,
    Verdict,
)
from .relay_access import RelayAccess, is_usable_url, unique_urls

#: Extra time past the timeout before the pool abandons a relay outright (a backstop: the
#: client already bounds itself; this covers closing the socket).
_GRACE: Final = CLOSE_TIMEOUT * 3
#: Seconds a query waits for the other relays once the first has answered (``[timeouts]
#: grace``): a silent, dead or slow relay costs a turn at most this.
DEFAULT_GRACE: Final = 0.3
#: Live events waiting for the consumer of :meth:`RelayPool.subscribe`: few, since an event
#: may be up to a frame (1 MiB); each relay client buffers more, bounded by bytes.
_LIVE_QUEUE: Final = 64
#: Hint relays (from a stranger's nevent) one query asks besides the listed relays: a code can
#: name hundreds, and each would be a connection and a budget of its own (docs/cli.md).
MAX_HINT_RELAYS: Final = 8
#: What all the relays of one query may send together (each relay keeps its own budget of one
#: query's worth, io/relay.py): twice one relay's, so that more relays never mean more memory.
TOTAL_QUERY_BUDGET: Final = Budget(2 * MAX_QUERY_EVENTS, 2 * MAX_QUERY_BYTES, 2 * MAX_QUERY_TAGS)


T = TypeVar("T")

__all__ = ["PoolQueryResult", "PublishResult", "PublishRun", "RelayPool", "is_usable_url"]


@dataclass
class PoolQueryResult:
    """Merged events (valid, matching, de-duplicated by id, first arrival wins) and each
    relay's own :class:`QueryResult`."""

    events: list[Event] = field(default_factory=list)
    per_relay: dict[str, QueryResult] = field(default_factory=dict)
    #: Of a read of state (:meth:`RelayPool.query_state`): each relay that should have
    #: answered and did not → why.  A newer version than the one returned may be there.
    unconfirmed: dict[str, str] = field(default_factory=dict)

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


def _targets(
    urls: Sequence[str],
    extra_urls: Sequence[str],
    max_hints: int,
    may_ask: Callable[[str], bool],
) -> list[tuple[str, bool]]:
    """The relays of one query: each of ``urls`` (authenticated to), then at most
    ``max_hints`` usable ``extra_urls`` not among them (never authenticated to) that
    ``may_ask`` allows (not spelt as a local address the pool may not reach)."""
    configured = {normalize_relay_url(u) for u in urls}
    # Hints come from untrusted nevents: ones that are not ws/wss URLs are skipped
    # (docs/cli.md).
    usable = unique_urls(u for u in extra_urls if is_usable_url(u) and may_ask(u))
    hints = [u for u in usable if normalize_relay_url(u) not in configured][:max_hints]
    return [(u, True) for u in urls] + [(u, False) for u in hints]


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


class RelayPool(RelayAccess):
    """A set of relays, asked all at once.  Bad URLs raise
    :class:`~nostr_buzz.errors.RelayError` here.

    ``secret`` or ``signer`` answers NIP-42, ``guard_local`` keeps relays someone else named
    off this host, and ``async with RelayPool(urls) as pool:`` keeps one connection per relay
    (``timeout``, ``idle_timeout``): see :class:`~nostr_buzz.io.relay_access.RelayAccess`.

    ``grace``: a query (or publish) returns once every relay has answered or ``grace`` seconds
    after the first relay's answer (``EOSE``; for a publish its ``OK``), whichever comes
    first; a relay left behind is named in the result.  ``None`` waits for every relay.
    ``total_budget``: what all relays of one :meth:`query` may send together.
    """

    def __init__(
        self,
        urls: Iterable[str],
        *,
        secret: SecretKey | None = None,
        signer: Signer | None = None,
        guard_local: bool = False,
        timeout: float = 10.0,
        idle_timeout: float = IDLE_TIMEOUT,
        grace: float | None = DEFAULT_GRACE,
        total_budget: Budget = TOTAL_QUERY_BUDGET,
    ) -> None:
        super().__init__(urls, secret, signer, guard_local, timeout, idle_timeout)
        #: What all relays of one :meth:`query` may send together (one budget they share).
        self.total_budget = total_budget
        self.grace = None if grace is None else float(grace)
        #: Told ``(kinds, {url: why})`` whenever a read of state (:meth:`query_state`) could
        #: not be confirmed by every relay that should have answered.
        self.on_unconfirmed: Callable[[list[int], dict[str, str]], None] | None = None
        #: Which relays answer queries (the root pool's): what a read of state waits for.
        self._answers = AnswerRecord()

    # -- operations ----------------------------------------------------------------------

    async def publish(
        self, event: Event, *, min_ok: int = 1, timeout: float | None = None
    ) -> PublishResult:
        """Send ``event`` to every relay concurrently and collect the verdicts (a relay left
        behind by the grace period after the ``min_ok``-th ``OK``: ``error:`` ``not waited
        for``, and not held against it; one backing off: ``skipped``).  To keep sending to
        the slower relays, use :meth:`start_publish`."""
        run = self.start_publish(event, timeout=timeout)
        try:
            done = await run.first(min_ok, self.grace)
        finally:
            await run.cancel()
        verdicts = {
            url: done.get(url) or left_verdict(url, event.id, self.grace) for url in self.urls
        }
        return PublishResult(event.id, verdicts, min_ok)

    def start_publish(self, event: Event, *, timeout: float | None = None) -> PublishRun:
        """Start sending ``event`` to every relay, one task each (bounded by ``timeout``,
        default the pool's): the caller reads the verdicts as they come and waits for, or
        cancels, the rest (io/publishing.py)."""
        limit = self.timeout if timeout is None else float(timeout)
        tasks = {
            url: asyncio.create_task(
                self._publish_to(url, event, limit), name=f"pool-publish {url}"
            )
            for url in self.urls
        }
        return PublishRun(event.id, tasks)

    async def _publish_to(self, url: str, event: Event, limit: float) -> Verdict:
        """One relay's verdict on ``event``; its health counts only its own answer (a
        refusal is an answer: only an error or a timeout backs it off)."""
        if (skipped := self._skipped(url, delivery=True)) is not None:
            return Verdict(url, event.id, False, False, "error:", skipped)
        async with self._client(url, auth=True, limit=limit) as client:
            try:
                async with asyncio.timeout(limit + _GRACE):
                    verdict = await client.publish(event, timeout=limit)
            except TimeoutError:
                verdict = Verdict(url, event.id, False, False, "error:", "timeout")
        self._record(url, _verdict_problem(verdict), delivery=True)
        return verdict

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
        one :attr:`total_budget`: the relay whose frame would pass it is cut off.  Returns
        once every relay has finished, or :attr:`grace` seconds after the first ``EOSE``:
        a relay left behind has the error ``left behind: …``; one backing off (kept
        connections) ``skipped: …``.

        ``enough``: when one relay's finished result satisfies it, the relays still working
        are abandoned (closed at once) and reported as unfinished with the error
        ``"not waited for"``: a fetch by id needs only the first valid copy.  With it, a relay
        that has served every id asked for is finished without waiting for its EOSE.
        """
        flts = nip01.as_filters(filters)
        limit = self.timeout if timeout is None else float(timeout)
        targets = _targets(self.urls, extra_urls, max_hints, self._may_ask)
        shared = SharedBudget(self.total_budget)

        async def one(url: str, auth: bool) -> QueryResult:
            if (skipped := self._skipped(url)) is not None:
                return QueryResult(relay=url, error=skipped)
            return await self._ask(url, auth, flts, limit, shared, by_ids=enough is not None)

        tasks = {u: asyncio.create_task(one(u, a), name=f"pool-query {u}") for u, a in targets}
        left = await _settle(tasks, self.grace, lambda r: r.finished, enough)
        return _merge((url, self._outcome(url, task, left)) for url, task in tasks.items())

    async def _ask(
        self,
        url: str,
        auth: bool,
        flts: list[nip01.Filter],
        limit: float,
        shared: SharedBudget,
        *,
        by_ids: bool = False,
        record: bool = True,
    ) -> QueryResult:
        """One relay's answer to one query (its answer noted; ``record``: its health too)."""
        async with self._client(url, auth=auth, limit=limit, req=True) as client:
            try:
                async with asyncio.timeout(limit + _GRACE):
                    result = await client.query(
                        flts, timeout=limit, end_when_ids_served=by_ids, shared=shared
                    )
            except TimeoutError:
                result = QueryResult(relay=url, error="timeout")
        if record:
            self._record(url, _query_problem(result))
        self._root._answers.note(url, result)
        return result

    # -- reads of state --------------------------------------------------------------------

    async def query_state(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        write_relays: Sequence[str] = (),
        trusted_writers: bool = True,
        timeout: float | None = None,
    ) -> PoolQueryResult:
        """Replaceable or addressable state, of which the newest version counts: ask every
        relay and ``write_relays`` (the authors' NIP-65 write relays: at most
        :data:`MAX_HINT_RELAYS` not configured, never authenticated to) and wait, up to
        ``timeout``, for each that serves (io/answers.py; one backing off for being slow
        too; a write relay not yet heard only when ``trusted_writers``: not when a stranger
        may have named it); the others get the grace period, as in :meth:`query`.
        ``events``: the newest version of each replaceable or addressable event
        (``nip01.newest_versions``); ``unconfirmed``: each relay that did not finish (waited
        for and failed, or not waited for)."""
        flts = nip01.as_filters(filters)
        limit = self.timeout if timeout is None else float(timeout)
        targets = _targets(self.urls, write_relays, MAX_HINT_RELAYS, self._may_ask)
        answers = self._root._answers
        waited = {u for u, mine in targets if answers.serves(u, unknown=mine or trusted_writers)}
        shared = SharedBudget(self.total_budget)

        lateness = Lateness(self.grace)

        async def one(url: str, auth: bool) -> QueryResult:
            if url not in waited and (skipped := self._skipped(url)) is not None:
                return QueryResult(relay=url, error=skipped)
            result = await self._ask(url, auth, flts, limit, shared, record=False)
            # An answer later than the grace period would have waited counts as slowness:
            # the backoff that spares the other queries a slow relay goes on growing.
            late = lateness.why() if lateness.late(result, _now()) else None
            self._record(url, _query_problem(result) or late)
            return result

        tasks = {u: asyncio.create_task(one(u, a), name=f"pool-state {u}") for u, a in targets}
        left = await _settle(tasks, self.grace, lambda r: r.finished, wait_for=waited)
        merged = _merge((url, self._outcome(url, task, left)) for url, task in tasks.items())
        return _newest(merged, flts, self._root.on_unconfirmed)

    def _outcome(self, url: str, task: asyncio.Task[QueryResult], left: set[str]) -> QueryResult:
        """``url``'s result: its task's, or why it has none (left behind by the grace period,
        or abandoned once another relay's answer was enough)."""
        if url in left:
            why = f"left behind: no answer within {self.grace:g} s of the first relay's EOSE"
            self._record(url, why)
            return QueryResult(relay=url, error=why)
        if task.cancelled() or task.exception() is not None:
            return QueryResult(relay=url, error="not waited for")
        return task.result()

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
        Ends :attr:`grace` seconds after the first relay has finished, as :meth:`query`.
        """
        flts = [
            f if f.since is not None else msgspec.structs.replace(f, since=since)
            for f in nip01.as_filters(filters)
        ]
        limit = self.timeout if timeout is None else float(timeout)

        async def one(url: str) -> QueryResult:
            if (skipped := self._skipped(url)) is not None:
                return QueryResult(relay=url, error=skipped)
            async with self._client(url, auth=True, limit=limit, req=True) as client:
                collected = await read_pages(client, flts, page, max_pages, limit)
            self._record(url, _query_problem(collected))
            self._root._answers.note(url, collected)
            return collected

        tasks = {url: asyncio.create_task(one(url), name=f"pool-back {url}") for url in self.urls}
        left = await _settle(tasks, self.grace, lambda r: r.finished)
        return _merge((url, self._outcome(url, task, left)) for url, task in tasks.items())

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
        resume; ``resume_since`` and ``on_reopen`` are passed on) on the kept connection, if
        any; a relay that fails does not stop the others.  Use with ``contextlib.aclosing``:
        closing the iterator closes every subscription and task (and the connections that
        were opened for it alone).
        """
        flts = nip01.as_filters(filters)
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=_LIVE_QUEUE)

        async def pump(url: str) -> None:
            async with self._client(url, auth=True, limit=self.timeout) as client:
                async for event in client.subscribe(
                    flts,
                    reconnect_delay=reconnect_delay,
                    max_reconnect_delay=max_reconnect_delay,
                    resume_since=resume_since,
                    on_reopen=(lambda: on_reopen(client.url)) if on_reopen is not None else None,
                ):
                    await queue.put(event)  # backpressure: a slow consumer slows the relays

        tasks = [asyncio.create_task(pump(u), name=f"pool-sub {u}") for u in self.urls]
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
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _settle(
    tasks: dict[str, asyncio.Task[T]],
    grace: float | None,
    good: Callable[[T], bool],
    enough: Callable[[T], bool] | None = None,
    *,
    wait_for: Iterable[str] = (),
) -> set[str]:
    """Wait for ``tasks`` (by relay) until all are done, ``grace`` seconds after the first
    ``good`` result, or (``enough``) the first result that suffices; the rest are cancelled.
    Never before the tasks of the relays ``wait_for`` are done (each bounds itself).
    Returns the relays left behind by the grace period."""
    pending = set(tasks.values())
    waited = {tasks[url] for url in wait_for if url in tasks}
    grace_end: float | None = None
    by_grace = False
    try:
        while pending:
            wait = None if grace_end is None else max(0.0, grace_end - _now())
            if waited & pending:
                wait = None
            done, pending = await asyncio.wait(
                pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                by_grace = True
                break
            results = [t.result() for t in done]
            if enough is not None and any(enough(r) for r in results):
                break
            if grace is not None and grace_end is None and any(good(r) for r in results):
                grace_end = _now() + grace
    finally:
        for task in pending:
            task.cancel()  # a no-op for the finished ones
        await asyncio.gather(*pending, return_exceptions=True)
    return {url for url, task in tasks.items() if task in pending} if by_grace else set()


def _newest(
    merged: PoolQueryResult,
    flts: list[nip01.Filter],
    told: Callable[[list[int], dict[str, str]], None] | None,
) -> PoolQueryResult:
    """A read of state's result: the newest version of each replaceable or addressable event,
    and each relay that did not finish as unconfirmed (``told`` of them, with the kinds)."""
    merged.events = nip01.newest_versions(merged.events)
    merged.unconfirmed = {
        url: result.error or "no answer"
        for url, result in merged.per_relay.items()
        if not result.finished
    }
    if merged.unconfirmed and told is not None:
        told(sorted({k for f in flts for k in f.kinds or ()}), dict(merged.unconfirmed))
    return merged


def _query_problem(result: QueryResult) -> str | None:
    """What a relay's query result says about its health: ``None`` when it answered."""
    error = result.error
    if error is not None and (error == "timeout" or error.startswith("connect failed")):
        return error
    return None


def _verdict_problem(verdict: Verdict) -> str | None:
    """What a relay's publish verdict says about its health: ``None`` when it answered."""
    if verdict.prefix == "error:" and (verdict.message.startswith(("timeout", "connect failed"))):
        return verdict.message
    return None


def _now() -> float:
    return asyncio.get_running_loop().time()
