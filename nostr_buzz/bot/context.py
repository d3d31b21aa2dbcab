"""Context resolution in ``buzz run``: what the compiler gets besides the batch's own events.

The history of the thread or conversation (:func:`nostr_buzz.io.context.fetch_history`, public,
with the pure selection in :mod:`nostr_buzz.core.context`); profiles (kind 0) of every author
and mention; channel metadata (kind 39000) signed by a trusted key (the owner, the agent,
``[gate] trusted``; a relay's own NIP-11 key only for the metadata that same relay served,
``nips/nip29.py``), anyone else's ignored with a diagnostic that says why
(:func:`nostr_buzz.core.context.channel_info`).  A real channel without trusted metadata gets
no ``channel`` input (no snapshot).  Profiles and metadata come in one read of state, kept a
while per person and per channel (:mod:`.known_state`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, Literal

from nostr_buzz.core.context import History, channel_info, direct_channel_type, turn_context
from nostr_buzz.core.queue import Batch
from nostr_buzz.core.turn_input import (
    BUZZ_RETRIEVAL,
    ChannelInfo,
    ProfileInfo,
    Retrieval,
    ThreadCheckpointInput,
    TurnEvent,
    TurnInput,
    retrieval_for,
)
from nostr_buzz.event import Event
from nostr_buzz.io.context import fetch_history
from nostr_buzz.io.pool import MAX_HINT_RELAYS, RelayPool
from nostr_buzz.io.relay_info import relay_pubkeys
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip29 import GROUP_METADATA_KIND
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.profile import Profile
from nostr_buzz.signer import Signer

from .config import PluginConfig
from .known_state import KnownState, newest_profiles
from .supervisor import ChannelSession

__all__ = ["ContextResolver", "newest_profiles", "people_of"]

_HEX64: Final = re.compile(r"[0-9a-f]{64}")
#: Seconds allowed for asking the read relays for their NIP-11 keys (once per bot).
RELAY_KEYS_TIMEOUT: Final = 3.0


def people_of(events: Iterable[Event], agent: str) -> list[str]:
    """Every author and hex mention of ``events``, the agent first, each once."""
    people: dict[str, None] = {agent: None}
    for event in events:
        people[event.pubkey] = None
        for mention in nip10.mentions(event):
            lowered = mention.lower()
            if _HEX64.fullmatch(lowered):
                people[lowered] = None
    return list(people)


class ContextResolver:
    """Resolves a batch's context through the read relays."""

    def __init__(
        self,
        pool: RelayPool,
        *,
        agent: str,
        kinds: tuple[int, ...],
        limit: int,
        timeout: float,
        known_agents: set[str],
        signer: Signer | None = None,
        owner: str | None = None,
        trusted_authors: Callable[[], Collection[str]] | None = None,
        on_untrusted: Callable[[Event, str], None] | None = None,
        retrieval: Retrieval = BUZZ_RETRIEVAL,
    ) -> None:
        self.pool = pool
        self.agent = agent
        #: The agent's signer opens the gift wraps of a private conversation's history.
        self.signer = signer
        self.timeout = timeout
        #: How the thread's or conversation's history is read (:func:`fetch_history`): its
        #: kinds, at most ``limit`` messages, a private one opened through ``signer``.
        self._fetch_history = functools.partial(
            fetch_history, agent=agent, limit=limit, kinds=kinds, timeout=timeout, signer=signer
        )
        #: How the envelope tells the model to fetch more history (``PluginConfig.retrieval``).
        self.retrieval = retrieval
        #: The agent has a shell and the bot's configuration: buzz's commands may be named.
        self.cli = True
        #: Read relay URL → its NIP-11 key, asked once (a relay's key is stable).
        self._relay_keys: dict[str, str] | None = None
        self._relay_keys_lock = asyncio.Lock()
        #: Only the owner's messages may carry a slash command.
        self.owner = owner
        #: Whose channel metadata counts from any relay (the owner, the agent, ``[gate]
        #: trusted``: the same authors as a channel's standing documents).
        self._trusted_authors = trusted_authors
        #: Told ``(event, why)`` for each kind 39000 event of the channel that does not count.
        self._on_untrusted = on_untrusted
        #: Agents known from configuration or a NIP-24 ``bot`` profile seen (shared, grows).
        self.known_agents = known_agents
        #: People's relay lists (NIP-65): history and profiles are also read on the write
        #: relays of the people concerned (None: only on the read relays).
        self.directory: RelayDirectory | None = None
        #: Profiles and channel metadata, read as state and kept a while (.known_state).
        self._known = KnownState(pool, timeout)

    @classmethod
    def of(
        cls,
        config: PluginConfig,
        pool: RelayPool,
        known_agents: set[str],
        trusted_authors: Callable[[], Collection[str]],
        on_untrusted: Callable[[Event, str], None],
    ) -> ContextResolver:
        """A bot's resolver: its configured kinds, limits, signer, owner and retrieval hint."""
        return cls(
            pool,
            agent=config.signer.public_key.hex,
            kinds=config.kinds,
            limit=config.context_message_limit,
            timeout=config.relay_timeout,
            known_agents=known_agents,
            signer=config.signer,
            owner=config.owner.hex,
            trusted_authors=trusted_authors,
            on_untrusted=on_untrusted,
            retrieval=config.retrieval,
        )

    async def _their_relays(self, people: Iterable[str]) -> tuple[str, ...]:
        """The write relays of ``people`` (:class:`RelayDirectory` bounds them), asked as
        hint relays besides the read relays (at most :data:`MAX_HINT_RELAYS`)."""
        if self.directory is None:
            return ()
        return (await self.directory.write_relays_of(people))[:MAX_HINT_RELAYS]

    async def history(self, newest: Event) -> History:
        # The write relays of the author and the people tagged: where their thread is.
        private = isinstance(newest, PrivateEvent)
        people = [] if private else [newest.pubkey, *nip10.mentions(newest)]
        extra = await self._their_relays(people)
        return await self._fetch_history(self.pool, newest, extra_urls=extra)

    async def resolve(
        self,
        batch: Batch,
        session: ChannelSession,
        checkpoint: ThreadCheckpointInput | None = None,
    ) -> tuple[TurnInput, list[str]]:
        """The compiler's input for ``batch`` (a new session's ``checkpoint`` with it, and the
        history after what it covers), and the ids of the history messages fetched (committed
        as delivered after a successful turn)."""
        events = [q.event for q in batch.events]
        cancelled = [q.event for q in batch.cancelled_events]
        newest = events[-1]
        history = await self.history(newest)
        fetched_ids = [e.id for e in history.messages]
        in_batch = {e.id for e in events} | {e.id for e in cancelled}
        after = checkpoint.covers_through if checkpoint is not None else None
        context = turn_context(history, session.delivered, in_batch, after)
        kept = list(context.messages) if context is not None else []
        kept_events = [e for e in history.messages if e.id in {m.event_id for m in kept}]
        profiles, info = await self.profiles_and_channel(
            [*events, *cancelled, *kept_events],
            nip10.channel(newest),
            newest.pubkey,
            # The real channel, whatever the session scope keys the batch by.
            direct=(nip10.queue_channel(newest), direct_channel_type(newest)),
        )
        start = session.start
        turn_input = TurnInput(
            events=tuple(TurnEvent(q.event, q.prompt_tag) for q in batch.events),
            cancelled_events=tuple(
                TurnEvent(q.event, q.prompt_tag) for q in batch.cancelled_events
            ),
            cancel_reason=batch.cancel_reason or "steer",
            channel=info,
            retrieval=self.retrieval_of(session),
            context=context,
            context_had_delivered_events=any(i in session.delivered for i in fetched_ids),
            profiles=profiles,
            standing=session.standing,
            system_prompt_support=start.system_prompt_support,
            standing_context_sent=start.standing_context_sent or session.turns > 0,
            owner=self.owner,
            thread_checkpoint=checkpoint,
        )
        return turn_input, fetched_ids

    def retrieval_of(self, session: ChannelSession) -> Retrieval:
        """The history hint of ``session``'s turns and steers (:func:`retrieval_for`): the
        bot's tools where the session was offered them."""
        return retrieval_for(self.retrieval, tools=session.tool_grant is not None, cli=self.cli)

    def _trusted(self) -> Collection[str]:
        if self._trusted_authors is not None:
            return self._trusted_authors()
        return {self.owner} if self.owner is not None else set()

    async def relay_keys(self) -> dict[str, str]:
        """Each read relay that announces a NIP-11 key → that key (asked on first use)."""
        async with self._relay_keys_lock:
            if self._relay_keys is None:
                timeout = min(self.timeout, RELAY_KEYS_TIMEOUT)
                self._relay_keys = await relay_pubkeys(self.pool.urls, timeout=timeout)
            return self._relay_keys

    async def profiles_and_channel(
        self,
        events: Sequence[Event],
        channel: str | None,
        actor: str,
        direct: tuple[str, Literal["stream", "dm"]] | None = None,
    ) -> tuple[dict[str, ProfileInfo], ChannelInfo | None]:
        people = people_of(events, self.agent)
        known = await self._known.read(people, channel, self._their_relays)
        found = known.events
        newest = newest_profiles(found, people)
        profiles: dict[str, ProfileInfo] = {}
        for pubkey in people:
            label: str | None = None
            is_agent = pubkey in self.known_agents or pubkey == self.agent
            source = newest.get(pubkey)
            if source is not None:
                profile = Profile.from_event(source)
                label = profile.label
                if profile.is_agent:
                    is_agent = True
                    self.known_agents.add(pubkey)
            profiles[pubkey] = ProfileInfo(label=label, is_agent=is_agent)
        trusted = {key.lower() for key in self._trusted()}
        # Relays are asked for their keys only when some metadata needs one.
        relay_keys = (
            await self.relay_keys()
            if any(e.kind == GROUP_METADATA_KIND and e.pubkey not in trusted for e in found)
            else None
        )
        info, untrusted = channel_info(
            found,
            channel,
            actor,
            profiles.get(actor, ProfileInfo()).label,
            trusted,
            direct,
            relay_keys=relay_keys,
            served_by=known.served_by,
        )
        if self._on_untrusted is not None:
            for event, why in untrusted:
                self._on_untrusted(event, why)
        return profiles, info
