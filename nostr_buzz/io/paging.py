"""Paging back through one relay's history (:meth:`RelayPool.query_back`).

A relay caps what one query returns (often 500 events, newest first).  One relay is asked page
by page backwards — ``until`` the oldest ``created_at`` of the previous page — until a page
brings nothing new, reaches the earliest ``since`` or the relay says it sent all there is
(NIP-67); a second more crowded than a page is asked for channel by channel.
"""

from __future__ import annotations

import asyncio
from typing import Final

import msgspec

from nostr_buzz.nips import nip01, nip10

from .relay import CLOSE_TIMEOUT, QueryResult, RelayClient

#: Extra time past the timeout before a page is abandoned outright (a backstop: the client
#: already bounds itself; this covers closing the socket).
_GRACE: Final = CLOSE_TIMEOUT * 3


async def read_pages(
    client: RelayClient, flts: list[nip01.Filter], page: int, max_pages: int, limit: float
) -> QueryResult:
    """One relay's part of :meth:`RelayPool.query_back` (see there), page by page."""
    floor = min(f.since or 0 for f in flts)
    collected = QueryResult(relay=client.url)
    seen: set[str] = set()
    until: int | None = None
    try:
        for _ in range(max_pages):
            bounded = [msgspec.structs.replace(f, until=until, limit=page) for f in flts]
            async with asyncio.timeout(limit + _GRACE):
                result = await client.query(bounded, timeout=limit)
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
                await _sweep_second(client, flts, until, collected, seen, page, limit)
            # The oldest second again (more events may share it), one earlier when
            # the page brought nothing new.
            until = oldest if fresh else oldest - 1
    except TimeoutError:
        collected.error = "timeout"
    return collected


async def _sweep_second(
    client: RelayClient,
    flts: list[nip01.Filter],
    second: int,
    collected: QueryResult,
    seen: set[str],
    page: int,
    limit: float,
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
        async with asyncio.timeout(limit + _GRACE):
            result = await client.query(narrowed, timeout=limit)
        fresh = [e for e in result.events if e.id not in seen]
        seen.update(e.id for e in fresh)
        collected.events.extend(fresh)
        if len(result.events) >= page:
            collected.error = f"more than {page} events in channel {channel} at {second}"
