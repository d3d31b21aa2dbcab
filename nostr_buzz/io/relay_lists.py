"""Where people read and write (NIP-65 kind 10002), where they read private messages (NIP-17
kind 10050), and what relays allow (NIP-11), looked up over the network and kept for a while.

:class:`RelayDirectory` answers three questions for the bot's delivery (bot/delivery.py): the
relays each person reads on and writes to (their newest kind 10002 found on the bot's read
relays, each direction cut to :data:`~nostr_buzz.nips.nip65.MAX_RELAYS_PER_PERSON` and to no
local address the bot has not configured: :func:`~nostr_buzz.nips.nip65.relays_to_use`), each
person's DM relays (their newest kind 10050, found on the read relays and their write relays:
:func:`~nostr_buzz.io.private.usable_dm_relays`), and each relay's announced
:class:`~nostr_buzz.io.relay_info.RelayLimits`.  A list is a read of state
(:meth:`RelayPool.query_state`): the newest version found on every relay that serves counts,
not the fastest relay's.  Answers are cached for ``ttl`` seconds, at most :data:`MAX_CACHED` of
each (the oldest dropped first), so memory stays bounded however many people write to the bot;
a person without a list is cached too (as "no list", once a relay answered to the end), so
costs one query per ``ttl``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Generic, TypeVar

from nostr_buzz.errors import BuzzError
from nostr_buzz.nips import nip65
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip65 import RelayList
from nostr_buzz.nips.relay_url import normalize_relay_url
from nostr_buzz.signer import Signer

from .pool import RelayPool
from .private import dm_relays_filter, usable_dm_relays
from .relay_info import RelayLimits, relay_limits

__all__ = [
    "DEFAULT_TTL",
    "LIMITS_TIMEOUT",
    "MAX_CACHED",
    "MAX_PEOPLE",
    "RelayDirectory",
    "TtlCache",
]

K = TypeVar("K")
V = TypeVar("V")

#: How long (seconds) a relay list or a relay's limits are trusted before they are asked again.
DEFAULT_TTL: Final = 3600.0
#: Entries kept per cache.
MAX_CACHED: Final = 2_000
#: Seconds one relay's NIP-11 document may take (a reply waits for it the first time).
LIMITS_TIMEOUT: Final = 3.0
#: People one lookup asks for (the rest are left out: a note that tags hundreds of people
#: must not make the bot send to hundreds of relays).
MAX_PEOPLE: Final = 10


class TtlCache(Generic[K, V]):
    """At most ``size`` answers, each good for ``ttl`` seconds of ``clock``."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float]) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        held = self._items.get(key)
        if held is None or held[0] <= self.clock():
            return None
        return held[1]

    def put(self, key: K, value: V) -> None:
        self._items.pop(key, None)
        self._items[key] = (self.clock() + self.ttl, value)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class RelayDirectory:
    """People's relay lists, looked up on ``read_relays``, and relays' NIP-11 limits.

    ``configured``: the bot's own relays (a local address in someone's list is used only when
    it is one of them, or one of ``local``: loopback or private relays the operator allows).
    ``own``: the keys whose listed relays the bot answers NIP-42 on (the owner and the agent:
    :meth:`RelayPool.answer_auth <nostr_buzz.io.pool.RelayPool.answer_auth>` of ``pool``);
    anyone else's relays are never authenticated to.
    """

    def __init__(
        self,
        read_relays: Sequence[str],
        configured: Iterable[str],
        *,
        signer: Signer | None,
        timeout: float,
        clock: Callable[[], float],
        ttl: float = DEFAULT_TTL,
        pool: RelayPool | None = None,
        own: Iterable[str] = (),
    ) -> None:
        self.read_relays = tuple(read_relays)
        self.own = frozenset(own)
        #: Where lookups go: the connections a kept ``pool`` holds, else one-shot ones.
        self._pool = pool
        self.configured = (*read_relays, *configured)
        self.signer = signer
        self.timeout = timeout
        self._lists: TtlCache[str, RelayList] = TtlCache(ttl, MAX_CACHED, clock)
        self._dm: TtlCache[str, tuple[str, ...]] = TtlCache(ttl, MAX_CACHED, clock)
        self._limits: TtlCache[str, RelayLimits] = TtlCache(ttl, MAX_CACHED, clock)

    async def lists(self, people: Iterable[str]) -> dict[str, RelayList]:
        """Each person's usable relay list (the first :data:`MAX_PEOPLE` people); people
        without one (or when the lookup failed) map to an empty list."""
        asked = list(dict.fromkeys(people))[:MAX_PEOPLE]
        missing = [p for p in asked if self._lists.get(p) is None]
        if missing and self.read_relays:
            for pubkey, found in (await self._look_up(missing)).items():
                self._lists.put(pubkey, found)
        return {p: self._lists.get(p) or RelayList() for p in asked}

    def _read_pool(self) -> RelayPool:
        """The read relays, on the kept connections when there are."""
        if self._pool is not None:
            return self._pool.using(self.read_relays)
        return RelayPool(self.read_relays, signer=self.signer, timeout=self.timeout)

    async def _look_up(self, people: list[str]) -> dict[str, RelayList]:
        """What the read relays hold for ``people``; "no list" only for those whose absence
        some relay vouched for (one answered to the end): a failed lookup is asked again."""
        try:
            result = await self._read_pool().query_state(
                Filter(authors=tuple(people), kinds=(nip65.KIND,)), timeout=self.timeout
            )
        except BuzzError:
            return {}
        out = {p: RelayList() for p in people} if result.any_finished else {}
        for pubkey, event in nip65.newest(result.events, people).items():
            listed = nip65.relay_list(event)
            found = out[pubkey] = RelayList(
                read=nip65.relays_to_use(listed.read, self.configured),
                write=nip65.relays_to_use(listed.write, self.configured),
            )
            if pubkey in self.own and self._pool is not None:
                self._pool.answer_auth([*found.read, *found.write])
        return out

    async def read_relays_of(self, people: Iterable[str]) -> tuple[str, ...]:
        """The read relays of ``people`` together, in order, without repeats."""
        found = await self.lists(people)
        return tuple(dict.fromkeys(u for listed in found.values() for u in listed.read))

    async def write_relays_of(self, people: Iterable[str]) -> tuple[str, ...]:
        """The write relays of ``people`` together, in order, without repeats."""
        found = await self.lists(people)
        return tuple(dict.fromkeys(u for listed in found.values() for u in listed.write))

    async def dm_relays(
        self, people: Iterable[str], *, fresh: bool = False, trusted: bool = False
    ) -> dict[str, tuple[str, ...]]:
        """The DM relays (kind 10050) of the first :data:`MAX_PEOPLE` ``people``, read on the
        read relays and their write relays; people without a usable list are left out.
        ``fresh``: asked again even when cached (a question to the owner); ``trusted``: the
        people are trusted, so their write relays are waited for before they ever answered
        (:meth:`RelayPool.query_state`)."""
        asked = list(dict.fromkeys(people))[:MAX_PEOPLE]
        missing = asked if fresh else [p for p in asked if self._dm.get(p) is None]
        if missing and self.read_relays:
            for pubkey, found in (await self._look_up_dm(missing, trusted)).items():
                self._dm.put(pubkey, found)
        return {p: urls for p in asked if (urls := self._dm.get(p))}

    async def _look_up_dm(self, people: list[str], trusted: bool) -> dict[str, tuple[str, ...]]:
        """As :meth:`_look_up`, for kind 10050 ("no list": an empty tuple)."""
        try:
            result = await self._read_pool().query_state(
                dm_relays_filter(people),
                write_relays=await self.write_relays_of(people),
                trusted_writers=trusted,
                timeout=self.timeout,
            )
        except BuzzError:
            return {}
        out: dict[str, tuple[str, ...]] = {p: () for p in people} if result.any_finished else {}
        me = self.signer.public_key.hex if self.signer is not None else None
        return out | usable_dm_relays(result.events, people, me, self.configured)

    async def limits(self, urls: Iterable[str]) -> dict[str, RelayLimits]:
        """Each relay's announced limits (asked concurrently when not cached)."""
        asked = list(dict.fromkeys(urls))
        missing = [u for u in asked if self._limits.get(u) is None]
        timeout = min(self.timeout, LIMITS_TIMEOUT)
        ours = {normalize_relay_url(u) for u in self.configured}
        found = await asyncio.gather(
            *(
                relay_limits(u, timeout=timeout, allow_local=normalize_relay_url(u) in ours)
                for u in missing
            )
        )
        for url, limits in zip(missing, found, strict=True):
            self._limits.put(url, limits)
        return {u: self._limits.get(u) or RelayLimits() for u in asked}
