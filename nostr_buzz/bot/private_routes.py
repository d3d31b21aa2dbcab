"""Where a private answer goes (docs/bot.md, "Private messages"): who is in the conversation
(the room, narrowed to ``max_recipients``) and each person's DM relays (kind 10050), read as
state and looked up while the turn runs, so the answer leaves as soon as it is signed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips.nip59 import PrivateEvent

from .config import PluginConfig
from .outputs import private_audience

__all__ = ["DmRelays", "PrivateRoutes"]

#: Each person's DM relays (public key hex to relay URLs); a person missing from it has none.
DmRelays = dict[str, tuple[str, ...]]


class PrivateRoutes:
    """The bot's routes for private answers, through its pool and its relay directory."""

    def __init__(self, config: PluginConfig, pool: RelayPool, directory: RelayDirectory) -> None:
        self.config = config
        self.pool = pool
        self.directory = directory
        self.agent = config.signer.public_key.hex

    def audience(self, target: PrivateEvent) -> tuple[list[str], str | None]:
        """Who the answer to ``target`` goes to, and why the room was narrowed (if it was)."""
        owner = self.config.owner.hex
        return private_audience(self.agent, owner, target.rumor(), self.config.max_recipients)

    async def relays(self, targets: Iterable[Event]) -> DmRelays:
        """The DM relays (kind 10050) of everyone a private answer to ``targets`` goes to;
        an empty map when there is none, or when the lookup fails (write relays then)."""
        people: list[str] = []
        for target in targets:
            if isinstance(target, PrivateEvent):
                people += [*self.audience(target)[0], self.agent]
        if not people:
            return {}
        return await self.relays_of(people)

    def look_up(self, target: Event) -> asyncio.Task[DmRelays]:
        """Start looking up the DM relays a private answer to ``target`` goes to, so that the
        lookup (a round trip to the relays) runs while the turn prepares and prompts, not after
        the agent answered; :meth:`relays_for` takes its result."""
        return asyncio.create_task(self.relays([target]), name="buzz-dm-relays")

    async def relays_for(self, early: asyncio.Task[DmRelays], targets: Sequence[Event]) -> DmRelays:
        """The DM relays for a private answer to each of ``targets``: ``early`` (started by
        :meth:`look_up` for the first), and a lookup of its own for the rest when any of them
        is a private message too (a steer taken into the turn)."""
        found = dict(await early)
        later = [t for t in targets[1:] if isinstance(t, PrivateEvent)]
        if later:
            found.update(await self.relays(later))
        return found

    async def relays_of(self, people: list[str], *, fresh: bool = False) -> DmRelays:
        """The DM relays (kind 10050) of ``people``, read as state (the newest list, not the
        fastest relay's), kept like relay lists; ``fresh``: read again (a question to the
        owner, whose people are trusted).  An empty map when the lookup fails."""
        try:
            found = await self.directory.dm_relays(people, fresh=fresh, trusted=fresh)
        except BuzzError:
            return {}
        # NIP-42 only on the owner's and the agent's own DM relays, never a stranger's.
        self.pool.answer_auth(
            u for p in (self.config.owner.hex, self.agent) for u in found.get(p, ())
        )
        return found
