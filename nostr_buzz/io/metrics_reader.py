"""The owner's reader: fetch NIP-AM metrics from the owner's relays (docs/metrics.md, "The owner's
reader").

Asks every relay concurrently for ``{"kinds":[44200], "#p":[owner], "since", "until"}``,
authenticating with NIP-42 with the owner's key when a relay asks.  Relays cap a query (LocalRelay
served at most 500 events), so each relay is paged: the next page asks ``until`` = the oldest
``created_at`` of the previous one (inclusive, so events sharing that second are not skipped),
until a page brings nothing new.  The relay client has already verified every event and dropped
(and counted) the ones that fail; here the merged, de-duplicated events are opened with the
owner's key and the rest is :func:`~nostr_buzz.reports.metrics_report.build_report`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey, as_secret_key
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip_am import KIND
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url
from nostr_buzz.reports.metrics_report import MetricsReport, OpenedMetric, build_report, open_metric

from .relay import RelayClient

__all__ = ["PAGE_LIMIT", "MetricsFetch", "RelayFetch", "fetch_metrics", "read_metrics"]

#: Events asked for per page (LocalRelay's measured ceiling, docs/cli.md).
PAGE_LIMIT: Final = 500
#: Pages per relay at most: a bound on the loop (500 × 400 = 200,000 metrics).
MAX_PAGES: Final = 400
#: Bytes of metric events kept from one relay over all its pages (each page is bounded by the
#: relay client too); past it the relay is cut off and named, and what it gave so far is used.
MAX_RELAY_BYTES: Final = 48 << 20
#: Extra time past the timeout before a page is abandoned outright (the client bounds itself).
_GRACE: Final = 2.0

Progress = Callable[[str], None]


@dataclass
class RelayFetch:
    """What one relay gave: ``finished`` when its first page completed (it was reachable and
    answered); ``error`` when a page failed (a later page failing leaves a partial result);
    ``events`` fetched (valid, matching); ``rejected`` verification failures it served."""

    url: str
    finished: bool = False
    error: str | None = None
    events: int = 0
    rejected: int = 0
    pages: int = 0
    bytes: int = 0


@dataclass
class MetricsFetch:
    """Opened metrics (de-duplicated by id across relays), ignored counts per reason and
    each relay's :class:`RelayFetch`."""

    metrics: list[OpenedMetric] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    relays: dict[str, RelayFetch] = field(default_factory=dict)

    @property
    def any_finished(self) -> bool:
        return any(r.finished for r in self.relays.values())


def metric_filter(
    owner_hex: str, since: int | None, until: int | None, limit: int = PAGE_LIMIT
) -> Filter:
    return Filter(kinds=(KIND,), since=since, until=until, limit=limit, tags={"p": (owner_hex,)})


def _size(event: Event) -> int:
    """About the bytes an event holds: its content and tags (plus the fixed fields)."""
    return 200 + len(event.content) + sum(8 + sum(map(len, tag)) for tag in event.tags)


async def _fetch_relay(
    url: str,
    owner: SecretKey,
    since: int | None,
    until: int | None,
    timeout: float,
    page_limit: int,
    progress: Progress | None,
    max_bytes: int = MAX_RELAY_BYTES,
) -> tuple[RelayFetch, list[Event]]:
    report = RelayFetch(url)
    events: list[Event] = []
    seen: set[str] = set()
    upper = until
    client = RelayClient(url, secret=owner, timeout=timeout)
    try:
        for _ in range(MAX_PAGES):
            flt = metric_filter(owner.public_key.hex, since, upper, page_limit)
            try:
                async with asyncio.timeout(timeout + _GRACE):
                    result = await client.query(flt, timeout=timeout)
            except TimeoutError:
                report.error = "timeout"
                break
            report.pages += 1
            fresh = [e for e in result.events if e.id not in seen]
            # A later page that brings nothing new repeats what the previous page already
            # served (the boundary second, or all of it from a relay that ignores ``until``):
            # its verification failures were counted there.
            if fresh or report.pages == 1:
                report.rejected += result.rejected_count
            if not result.finished:
                report.error = result.error or "no answer"
                break
            report.finished = True
            if not fresh:
                if (
                    upper is not None
                    and len(result.events) >= page_limit
                    and min(e.created_at for e in result.events) == upper
                ):
                    # A full page all within the boundary second: that second holds more than
                    # a page, and paging by ``until`` cannot reach the rest of it; go on below
                    # it rather than stop and lose every older metric.
                    upper -= 1
                    continue
                break
            report.bytes += sum(_size(e) for e in fresh)
            if report.bytes > max_bytes:
                report.error = f"cut off: the relay sent more than {max_bytes >> 20} MiB of metrics"
                break
            seen.update(e.id for e in fresh)
            events.extend(fresh)
            report.events = len(events)
            if progress is not None:
                progress(f"{url}: {len(events)} metric event(s) so far…")
            # Inclusive: events of the oldest second may continue on the next page.
            upper = min(e.created_at for e in result.events)
            if since is not None and upper < since:
                break
        else:
            report.error = f"stopped after {MAX_PAGES} pages"
    finally:
        await client.close()
    return report, events


async def fetch_metrics(
    owner: SecretKey | str,
    relays: Sequence[str],
    *,
    since: int | None = None,
    until: int | None = None,
    timeout: float = 10.0,
    page_limit: int = PAGE_LIMIT,
    progress: Progress | None = None,
) -> MetricsFetch:
    """Fetch and open the owner's metrics from every relay.  ``owner``: the owner's
    :class:`SecretKey` or its 64-hex / ``nsec1…`` text (else :class:`InvalidKey`); bad URLs
    raise ``RelayError``."""
    owner = as_secret_key(owner, "the owner's secret key")
    by_key: dict[str, str] = {}
    for url in relays:  # the same relay spelt twice is asked once
        checked = check_relay_url(url)
        by_key.setdefault(normalize_relay_url(checked), checked)
    urls = list(by_key.values())
    results = await asyncio.gather(
        *(_fetch_relay(u, owner, since, until, timeout, page_limit, progress) for u in urls)
    )
    fetch = MetricsFetch()
    opened: set[str] = set()
    for report, events in results:
        fetch.relays[report.url] = report
        fetch.ignored["verification"] += report.rejected
        for event in events:
            if event.id in opened:  # the same event from another relay
                continue
            opened.add(event.id)
            outcome = open_metric(owner, event)
            if isinstance(outcome, str):
                fetch.ignored[outcome] += 1
            else:
                fetch.metrics.append(outcome)
    return fetch


async def read_metrics(
    owner: SecretKey | str,
    relays: Sequence[str],
    *,
    since: int | None = None,
    until: int | None = None,
    timeout: float = 10.0,
    page_limit: int = PAGE_LIMIT,
    progress: Progress | None = None,
    agents: Collection[str] | None = None,
) -> tuple[MetricsReport, MetricsFetch]:
    """:func:`fetch_metrics`, then the report (totals per agent, model and day); ``agents``
    are the owner's agents (None: every agent counts), see
    :func:`~nostr_buzz.reports.metrics_report.build_report`."""
    fetch = await fetch_metrics(
        owner,
        relays,
        since=since,
        until=until,
        timeout=timeout,
        page_limit=page_limit,
        progress=progress,
    )
    return build_report(fetch.metrics, fetch.ignored, agents=agents), fetch
