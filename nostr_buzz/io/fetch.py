"""Fetch one event by id from relays: the first verified copy wins, relays that served a
forgery are named (docs/cli.md, "buzz messages raw").

Every relay (and, for an ``nevent``, each of its hint relays: at most
:data:`~nostr_buzz.io.pool.MAX_HINT_RELAYS`, never authenticated to) is asked at once for
``{"ids": [id]}``; the first relay whose answer holds a valid copy ends the wait, so a dead or
silent relay listed first costs nothing once another answered.  Only the id goes into the
filter: an nevent's author and kind are hints and never narrow the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip19 import EventRef, parse_event_ref

from .pool import PoolQueryResult, RelayPool, is_usable_url
from .relay import QueryResult

__all__ = ["FetchResult", "fetch_event", "fetch_event_result"]


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch_event_result` found.

    ``event``: the verified event with the id asked for, or None when no relay served a valid
    copy.  ``served_by``: the relays whose answer held it.  ``forgers``: each relay that served
    something for this id that failed verification (a forged signature, an id that is not the
    hash of the content, an event that does not match the id asked for) → the checks it failed;
    a relay named here may also have served the real copy.  ``unanswered``: each relay that did
    not finish → why (``timeout``, ``connect failed: …``, ``not waited for`` once another
    relay had answered).  ``query``: the pool's whole result, each relay's own answer.
    """

    id: str
    event: Event | None
    served_by: tuple[str, ...] = ()
    forgers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)
    query: PoolQueryResult = field(default_factory=PoolQueryResult)

    @property
    def any_answered(self) -> bool:
        """At least one relay answered (EOSE or a normal CLOSED), or served the event."""
        return self.event is not None or self.query.any_finished

    @classmethod
    def of(cls, event_id: str, query: PoolQueryResult) -> FetchResult:
        """The result for ``event_id`` from a pool query's result."""
        found = next((e for e in query.events if e.id == event_id), None)
        return cls(
            id=event_id,
            event=found,
            served_by=tuple(
                url
                for url, one in query.per_relay.items()
                if any(e.id == event_id for e in one.events)
            ),
            forgers={
                url: tuple(dict.fromkeys(one.rejected))
                for url, one in query.per_relay.items()
                if one.rejected_count
            },
            unanswered={
                url: one.error or "no answer"
                for url, one in query.per_relay.items()
                if not one.finished
            },
            query=query,
        )


def _ref(ref: str | EventRef) -> EventRef:
    if isinstance(ref, EventRef):
        return parse_event_ref(ref.id)._replace(relays=tuple(ref.relays))
    if not isinstance(ref, str):
        raise TypeError("ref must be an event id: 64 hex characters, note1…, nevent1… or EventRef")
    return parse_event_ref(ref)


async def fetch_event(
    ref: str | EventRef,
    relays: Sequence[str] | None = None,
    *,
    pool: RelayPool | None = None,
    timeout: float = 10.0,
) -> Event | None:
    """The event ``ref`` names, verified, fetched as :func:`fetch_event_result` does; None
    when no relay served a valid copy (not found, no relay answered, or only forgeries: the
    result of :func:`fetch_event_result` tells them apart and names the relays)."""
    result = await fetch_event_result(ref, relays, pool=pool, timeout=timeout)
    return result.event


async def fetch_event_result(
    ref: str | EventRef,
    relays: Sequence[str] | None = None,
    *,
    pool: RelayPool | None = None,
    timeout: float = 10.0,
    wait_all: bool = False,
) -> FetchResult:
    """Fetch the event ``ref`` names (64 hex characters, ``note1…``, ``nevent1…`` with its relay
    hints, or a :class:`~nostr_buzz.nips.nip19.EventRef`) from ``relays`` or ``pool`` (give one;
    a pool brings its own NIP-42 key) and its hint relays.

    Returns a :class:`FetchResult` whatever was found: ``.event`` is the first verified copy, None
    when not found; ``.forgers`` names the relays that served forgeries.  ``timeout``: seconds for
    each relay (connect plus answer).  ``wait_all``: wait for every relay, to learn which ones
    misbehave, rather than return at the first valid copy.  A bad reference raises
    :class:`~nostr_buzz.errors.Nip19Error`; a bad relay URL, or no relay at all,
    :class:`~nostr_buzz.errors.RelayError`.  Network failures are never raised: they are in
    ``.unanswered``.
    """
    parsed = _ref(ref)
    if pool is not None and relays is not None:
        raise RelayError("give relays or a pool, not both")
    if pool is None:
        pool = RelayPool(relays or (), timeout=timeout)
    if not pool.urls and not any(map(is_usable_url, parsed.relays)):
        raise RelayError("no relay to ask: give relays, a pool, or an nevent with relay hints")

    def found(one: QueryResult) -> bool:
        return any(e.id == parsed.id for e in one.events)

    result = await pool.query(
        Filter(ids=(parsed.id,)),
        extra_urls=parsed.relays,
        timeout=timeout,
        enough=None if wait_all else found,
    )
    return FetchResult.of(parsed.id, result)
