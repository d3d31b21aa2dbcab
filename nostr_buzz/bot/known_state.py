"""The profiles (kind 0) and channel metadata (kind 39000) a turn shows, read as state and kept
for a while.

Both are replaceable (addressable) state: they are read with :meth:`RelayPool.query_state`, which
waits for every relay that serves, so the newest version counts, not the fastest relay's.  What
a read found is kept :data:`STATE_TTL` seconds per person and per channel (at most
:data:`MAX_KEPT` of each, the oldest dropped first), so that a slow relay costs a conversation
one wait, not one per turn; a read that no relay answered to the end is not kept.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay_lists import TtlCache
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip29 import GROUP_METADATA_KIND
from nostr_buzz.profile import METADATA_KIND

__all__ = ["MAX_KEPT", "STATE_TTL", "Known", "KnownState", "newest_profiles"]

#: Seconds a person's profile or a channel's metadata is reused.
STATE_TTL: Final = 60.0
#: People and channels kept.
MAX_KEPT: Final = 1_024


@dataclass(frozen=True)
class Known:
    """What one turn gets: the profiles and metadata events, and which relays served each
    metadata event (NIP-29: a relay's key vouches only for what it served itself)."""

    events: list[Event] = field(default_factory=list)
    served_by: dict[str, frozenset[str]] = field(default_factory=dict)


def newest_profiles(found: Sequence[Event], people: Sequence[str]) -> dict[str, Event]:
    """The newest kind 0 profile among ``found`` of each of ``people`` (on a tie of
    ``created_at``, the lowest id: NIP-01)."""
    wanted = set(people)
    newest: dict[str, Event] = {}
    for event in found:
        if event.kind == METADATA_KIND and event.pubkey in wanted:
            known = newest.get(event.pubkey)
            if known is None or nip01.is_newer(event, known):
                newest[event.pubkey] = event
    return newest


class KnownState:
    """People's profiles and channels' metadata, read through ``pool`` (see the module)."""

    def __init__(
        self,
        pool: RelayPool,
        timeout: float,
        *,
        ttl: float = STATE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.timeout = timeout
        #: Person → (their newest profile, None for none,): a 1-tuple, so "none" is kept too.
        self._profiles: TtlCache[str, tuple[Event | None]] = TtlCache(ttl, MAX_KEPT, clock)
        self._channels: TtlCache[str, Known] = TtlCache(ttl, MAX_KEPT, clock)

    async def read(
        self,
        people: Sequence[str],
        channel: str | None,
        their_relays: Callable[[list[str]], Awaitable[tuple[str, ...]]],
    ) -> Known:
        """The profiles of ``people`` and ``channel``'s metadata; what is not kept is read,
        also on ``their_relays(missing people)`` (anyone's write relays: waited for only once
        they have answered a query, since a stranger's list may name silent relays)."""
        missing = [p for p in people if self._profiles.get(p) is None]
        metadata = self._channels.get(channel) if channel is not None else Known()
        if not missing and metadata is not None:
            return self._known(people, metadata)
        filters = [Filter(authors=tuple(missing), kinds=(METADATA_KIND,))] if missing else []
        if metadata is None and channel is not None:
            filters.append(Filter(kinds=(GROUP_METADATA_KIND,), tags={"d": (channel,)}))
        result = await self.pool.query_state(
            filters,
            timeout=self.timeout,
            write_relays=await their_relays(missing or list(people)),
            trusted_writers=False,
        )
        found = Known(
            [e for e in result.events if e.kind == GROUP_METADATA_KIND], result.served_by()
        )
        newest = newest_profiles(result.events, missing)
        if not result.any_finished:  # kept nothing: this turn uses what was found
            return self._known(people, metadata or found, list(newest.values()))
        for person in missing:
            self._profiles.put(person, (newest.get(person),))
        if metadata is None and channel is not None:
            self._channels.put(channel, found)
        return self._known(people, metadata or found)

    def _known(self, people: Sequence[str], metadata: Known, unkept: Sequence[Event] = ()) -> Known:
        """The kept profiles of ``people``, ``unkept`` ones, and ``metadata``."""
        profiles = [e for p in people if (e := (self._profiles.get(p) or (None,))[0]) is not None]
        return Known([*profiles, *unkept, *metadata.events], metadata.served_by)
