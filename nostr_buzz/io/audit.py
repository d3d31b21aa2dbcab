"""Fetching what an audit checks: each event a manifest names, from every relay (docs/cli.md,
"buzz audit"; the verdicts are :mod:`nostr_buzz.reports.audit`'s).

Each id is one :func:`~nostr_buzz.io.fetch.fetch_event_result` that waits for every relay
(``wait_all``): an audit wants each relay's answer, so that a relay serving a forged copy is
named even when another relay served the real one.  At most :data:`CONCURRENCY` ids are asked
for at once; each relay's wait is bounded by ``timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

from nostr_buzz.reports.audit import Lookup

from .fetch import fetch_event_result
from .pool import RelayPool

__all__ = ["CONCURRENCY", "look_up_events"]

#: Event ids asked for at once (each asks every relay).
CONCURRENCY: Final = 8


async def look_up_events(
    ids: Iterable[str], pool: RelayPool, *, timeout: float
) -> dict[str, Lookup]:
    """What the relays of ``pool`` say about each event id (verified copy, forgers, answer)."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(event_id: str) -> tuple[str, Lookup]:
        async with gate:
            found = await fetch_event_result(event_id, pool=pool, timeout=timeout, wait_all=True)
        lookup = Lookup(
            event=found.event,
            answered=found.any_answered,
            served_by=found.served_by,
            forgers=found.forgers,
            unanswered=found.unanswered,
        )
        return event_id, lookup

    return dict(await asyncio.gather(*(one(i) for i in dict.fromkeys(ids))))
