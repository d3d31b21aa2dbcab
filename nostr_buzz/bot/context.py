"""Context resolution: what the compiler gets besides the batch's own events.

Thread history for a threaded newest event (the root by id plus the newest ``limit`` replies in
the thread and channel; ``limit + 1`` are fetched so that truncation is proven, not guessed),
DM history for a direct message — for a private message (NIP-17), the conversation read back
from the gift wraps addressed to the agent, its own copies included, so that nothing private
travels in plaintext — nothing for a top-level channel message; profiles (kind 0) of
every author and mention; channel metadata (kind 39000) signed by a trusted key (the owner,
the agent, ``[gate] trusted``; a relay's own NIP-11 key only for the metadata that same relay
served, ``nips/nip29.py``), anyone else's ignored with a diagnostic that says why.
A real channel without trusted metadata gets no ``channel`` input (no snapshot).  The queries
are the only I/O; selecting and shaping what they returned are pure functions below.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from nostr_buzz.core.queue import Batch
from nostr_buzz.core.turn_input import (
    ChannelInfo,
    ContextMessage,
    ProfileInfo,
    TurnContext,
    TurnEvent,
    TurnInput,
)
from nostr_buzz.event import Event
from nostr_buzz.io.pool import MAX_HINT_RELAYS, RelayPool
from nostr_buzz.io.private import conversation
from nostr_buzz.io.relay_info import relay_pubkeys
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip29 import GROUP_METADATA_KIND, IgnoredMetadata, newest_group_metadata
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.profile import METADATA_KIND, Profile
from nostr_buzz.signer import Signer

from .supervisor import ChannelSession

__all__ = [
    "ContextResolver",
    "History",
    "direct_channel_type",
    "select_dm_history",
    "select_thread_history",
]

_HEX64: Final = re.compile(r"[0-9a-f]{64}")
#: Seconds allowed for asking the read relays for their NIP-11 keys (once per bot).
RELAY_KEYS_TIMEOUT: Final = 3.0


@dataclass(frozen=True)
class History:
    """Fetched history: its kind, the messages (chronological), ``total`` and ``truncated`` as
    the fetch proved them (spec: filtering later keeps them)."""

    kind: Literal["thread", "dm"] | None
    messages: list[Event]
    total: int
    truncated: bool


NO_HISTORY: Final = History(None, [], 0, False)


def select_thread_history(
    events: Iterable[Event], root_id: str, channel: str | None, limit: int
) -> History:
    """The root (when a relay returned it) and the newest ``limit`` replies; ``total`` = 1
    (the root exists even when no relay returns it) + the replies the fetch proved to exist."""
    thread = nip10.thread_history(events, root_id, channel, limit)
    root = [thread.root] if thread.root is not None else []
    return History("thread", root + thread.replies, 1 + thread.found, thread.truncated)


def select_dm_history(events: Iterable[Event], limit: int) -> History:
    """The newest ``limit`` direct messages, chronological; ``truncated`` when the limit was
    reached, and then ``total`` counts one more."""
    direct = nip10.chronological(e for e in events if nip10.channel(e) is None)
    kept = direct[-limit:] if limit > 0 else []
    truncated = len(kept) >= limit
    return History("dm", kept, len(kept) + (1 if truncated else 0), truncated)


def _utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def turn_context(history: History, delivered: set[str], in_batch: set[str]) -> TurnContext | None:
    """The compiler's context: history minus what the session was already given and what the
    batch itself holds; None when nothing is left."""
    kept = [e for e in history.messages if e.id not in delivered and e.id not in in_batch]
    if history.kind is None or not kept:
        return None
    return TurnContext(
        kind=history.kind,
        messages=tuple(
            ContextMessage(
                pubkey=e.pubkey, content=e.content, event_id=e.id, timestamp=_utc(e.created_at)
            )
            for e in kept
        ),
        total=history.total,
        truncated=history.truncated,
    )


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


def newest_profiles(found: Iterable[Event], people: Sequence[str]) -> dict[str, Event]:
    wanted = set(people)
    newest: dict[str, Event] = {}
    for event in found:
        if event.kind == METADATA_KIND and event.pubkey in wanted:
            known = newest.get(event.pubkey)
            if known is None or event.created_at > known.created_at:
                newest[event.pubkey] = event
    return newest


def direct_channel_type(event: Event) -> Literal["stream", "dm"]:
    """How an event outside any channel is compiled: a public note or comment (kind 1, 1111)
    is answered in public (``stream``: scope ``thread`` or ``channel``, never ``dm``); a
    private message or a plaintext chat message (kind 9) is a direct message (``dm``)."""
    return "stream" if event.kind in (nip10.TEXT_NOTE_KIND, nip10.COMMENT_KIND) else "dm"


def channel_info(
    found: Iterable[Event],
    channel: str | None,
    actor: str,
    actor_label: str | None,
    trusted: Collection[str] = (),
    direct: tuple[str, Literal["stream", "dm"]] | None = None,
    *,
    relay_keys: Mapping[str, str] | None = None,
    served_by: Mapping[str, Collection[str]] | None = None,
) -> tuple[ChannelInfo | None, list[IgnoredMetadata]]:
    """A direct conversation's synthetic channel (``direct``: its queue channel and type; by
    default the actor's ``dm-`` channel as a DM), a channel's kind 39000 metadata (the newest
    that counts: signed by a ``trusted`` key, or by the NIP-11 key in ``relay_keys`` of a relay
    that served it, ``served_by``), or None; and the channel's kind 39000 events that do not
    count, with why (ignored).  A public note's synthetic channel has no name: it is nobody's
    channel."""
    if channel is None:
        direct_id, kind = direct or (nip10.direct_channel(actor), "dm")
        name = (actor_label or actor) if kind == "dm" else ""
        return ChannelInfo(name=name, id=direct_id, type=kind), []
    metadata, untrusted = newest_group_metadata(
        found, channel, trusted, relay_keys=relay_keys or {}, served_by=served_by or {}
    )
    if metadata is None:
        return None, untrusted
    names = metadata.tag_values("name")
    about = metadata.tag_values("about")
    info = ChannelInfo(
        name=names[0] if names else channel,
        id=channel,
        type="stream",
        description=about[0] if about else None,
    )
    return info, untrusted


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
    ) -> None:
        self.pool = pool
        #: Only the owner's messages may carry a slash command.
        self.owner = owner
        #: Whose channel metadata counts from any relay (the owner, the agent, ``[gate]
        #: trusted``: the same authors as a channel's standing documents).
        self._trusted_authors = trusted_authors
        #: Told ``(event, why)`` for each kind 39000 event of the channel that does not count.
        self._on_untrusted = on_untrusted
        #: Read relay URL → its NIP-11 key, asked once (a relay's key is stable).
        self._relay_keys: dict[str, str] | None = None
        self._relay_keys_lock = asyncio.Lock()
        self.agent = agent
        #: The agent's signer opens the gift wraps of a private conversation's history.
        self.signer = signer
        # Private messages are never fetched as plaintext events.
        self.kinds = tuple(k for k in kinds if k != nip17.PRIVATE_MESSAGE_KIND)
        self.limit = limit
        self.timeout = timeout
        #: Agents known from configuration or a NIP-24 ``bot`` profile seen (shared, grows).
        self.known_agents = known_agents
        #: People's relay lists (NIP-65): history and profiles are also read on the write
        #: relays of the people concerned (None: only on the read relays).
        self.directory: RelayDirectory | None = None

    async def _their_relays(self, people: Iterable[str]) -> tuple[str, ...]:
        """The write relays of ``people`` (:class:`RelayDirectory` bounds them), asked as
        hint relays besides the read relays (at most :data:`MAX_HINT_RELAYS`)."""
        if self.directory is None:
            return ()
        return (await self.directory.write_relays_of(people))[:MAX_HINT_RELAYS]

    async def history(self, newest: Event) -> History:
        if isinstance(newest, PrivateEvent):
            return await self.private_history(newest)
        root_id = nip10.thread_ref(newest).root
        channel = nip10.channel(newest)
        if root_id is not None:
            tags: dict[str, tuple[str, ...]] = {"e": (root_id,)}
            if channel is not None:
                tags["h"] = (channel,)
            replies = Filter(kinds=self.kinds, limit=self.limit + 1, tags=tags)
            found = await self.pool.query(
                [Filter(ids=(root_id,)), replies],
                timeout=self.timeout,
                extra_urls=await self._their_relays([newest.pubkey, *nip10.mentions(newest)]),
            )
            return select_thread_history(found.events, root_id, channel, self.limit)
        if channel is not None:
            return NO_HISTORY
        actor = newest.pubkey
        between = [(actor, self.agent), (self.agent, actor)]  # each way: author, mentioned
        found = await self.pool.query(
            [
                Filter(authors=(author,), kinds=self.kinds, limit=self.limit, tags={"p": (to,)})
                for author, to in between
            ],
            timeout=self.timeout,
            extra_urls=await self._their_relays([actor]),
        )
        return select_dm_history(found.events, self.limit)

    async def private_history(self, newest: PrivateEvent) -> History:
        """The newest ``limit`` messages of the private conversation with the sender."""
        if self.signer is None:
            return NO_HISTORY
        messages, truncated = await conversation(
            self.signer, self.pool.urls, newest.pubkey, limit=self.limit, timeout=self.timeout
        )
        kept: list[Event] = list(messages)
        return History("dm", kept, len(kept) + (1 if truncated else 0), truncated)

    async def resolve(self, batch: Batch, session: ChannelSession) -> tuple[TurnInput, list[str]]:
        """The compiler's input for ``batch``, and the ids of the history messages fetched
        (committed as delivered after a successful turn)."""
        events = [q.event for q in batch.events]
        cancelled = [q.event for q in batch.cancelled_events]
        newest = events[-1]
        history = await self.history(newest)
        fetched_ids = [e.id for e in history.messages]
        in_batch = {e.id for e in events} | {e.id for e in cancelled}
        context = turn_context(history, session.delivered, in_batch)
        kept = list(context.messages) if context is not None else []
        kept_events = [e for e in history.messages if e.id in {m.event_id for m in kept}]
        profiles, info = await self.profiles_and_channel(
            [*events, *cancelled, *kept_events],
            nip10.channel(newest),
            newest.pubkey,
            direct=(batch.channel, direct_channel_type(newest)),
        )
        start = session.start
        turn_input = TurnInput(
            events=tuple(TurnEvent(q.event, q.prompt_tag) for q in batch.events),
            cancelled_events=tuple(
                TurnEvent(q.event, q.prompt_tag) for q in batch.cancelled_events
            ),
            cancel_reason=batch.cancel_reason or "steer",
            channel=info,
            context=context,
            context_had_delivered_events=any(i in session.delivered for i in fetched_ids),
            profiles=profiles,
            standing=session.standing,
            system_prompt_support=start.system_prompt_support,
            standing_context_sent=start.standing_context_sent or session.turns > 0,
            owner=self.owner,
        )
        return turn_input, fetched_ids

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
        filters = [Filter(authors=tuple(people), kinds=(METADATA_KIND,))]
        if channel is not None:
            filters.append(Filter(kinds=(GROUP_METADATA_KIND,), tags={"d": (channel,)}))
        extra = await self._their_relays(people)
        result = await self.pool.query(filters, timeout=self.timeout, extra_urls=extra)
        found = result.events
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
            served_by=result.served_by(),
        )
        if self._on_untrusted is not None:
            for event, why in untrusted:
                self._on_untrusted(event, why)
        return profiles, info
