"""The context of a turn from relays: the history of the thread or conversation an event is in.

:func:`fetch_history` asks the relays, :func:`fetch_turn_context` shapes the answer for the
compiler (:func:`nostr_buzz.core.context.turn_context`).  For a threaded event: the root by id
plus the newest ``limit`` replies in the thread and channel (``limit + 1`` are fetched so that
truncation is proven, not guessed).  For a direct message outside any channel: the newest
``limit`` messages between its author and the agent, each way.  For a NIP-17 private message:
the conversation read back from the gift wraps addressed to the agent (the agent's key or
signer opens them; without it there is no history), so that nothing private travels in
plaintext.  A top-level channel message has no history.  ``buzz run`` fetches with these
same functions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nostr_buzz.core.context import (
    NO_HISTORY,
    History,
    select_dm_history,
    select_thread_history,
    turn_context,
)
from nostr_buzz.core.given import given_key
from nostr_buzz.core.turn_input import TurnContext
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, require_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.signer import Signer

from .pool import RelayPool
from .private import conversation

__all__ = ["fetch_history", "fetch_turn_context"]


async def fetch_history(
    pool: RelayPool,
    event: Event,
    *,
    agent: str | PublicKey,
    limit: int = 20,
    kinds: Sequence[int] | None = None,
    timeout: float | None = None,
    signer: SecretKey | Signer | None = None,
    extra_urls: Sequence[str] = (),
) -> History:
    """The history ``event`` is part of, from ``pool``'s relays (see the module docstring).

    ``agent``: the bot's public key (hex, ``npub1…`` or a :class:`PublicKey`); ``kinds``: the kinds
    a thread or conversation is made of (default: ``event``'s own; a private message's kind is never
    fetched in plaintext); ``signer``: the agent's key or signer, which opens a private
    conversation's gift wraps (without it a private message has no history); ``extra_urls``: relays
    asked too, as hints (:meth:`RelayPool.query`; the bot gives the NIP-65 write relays of the
    people concerned).
    """
    event = require_event(event, "fetch_history")
    agent_hex = given_key(agent, "fetch_history agent", BuzzError).hex
    if isinstance(event, PrivateEvent):
        if signer is None:
            return NO_HISTORY
        messages, truncated = await conversation(
            signer, pool, event.pubkey, limit=limit, timeout=timeout or pool.timeout
        )
        kept: list[Event] = list(messages)
        return History("dm", kept, len(kept) + (1 if truncated else 0), truncated)
    wanted = tuple(kinds) if kinds is not None else (event.kind,)
    wanted = tuple(k for k in wanted if k != nip17.PRIVATE_MESSAGE_KIND)
    root_id = nip10.thread_ref(event).root
    channel = nip10.channel(event)
    if root_id is not None:
        tags: dict[str, tuple[str, ...]] = {"e": (root_id,)}
        if channel is not None:
            tags["h"] = (channel,)
        replies = Filter(kinds=wanted, limit=limit + 1, tags=tags)
        found = await pool.query(
            [Filter(ids=(root_id,)), replies], timeout=timeout, extra_urls=extra_urls
        )
        return select_thread_history(found.events, root_id, channel, limit)
    if channel is not None:
        return NO_HISTORY
    actor = event.pubkey
    between = [(actor, agent_hex), (agent_hex, actor)]  # each way: author, mentioned
    found = await pool.query(
        [
            Filter(authors=(author,), kinds=wanted, limit=limit, tags={"p": (to,)})
            for author, to in between
        ],
        timeout=timeout,
        extra_urls=extra_urls,
    )
    return select_dm_history(found.events, limit)


async def fetch_turn_context(
    pool: RelayPool,
    event: Event,
    *,
    agent: str | PublicKey,
    limit: int = 20,
    kinds: Sequence[int] | None = None,
    timeout: float | None = None,
    signer: SecretKey | Signer | None = None,
    delivered: Collection[str] = (),
    in_batch: Collection[str] = (),
) -> TurnContext | None:
    """The compiler's :class:`TurnContext` for a turn whose newest event is ``event``: its
    history (:func:`fetch_history`) minus the ids in ``delivered`` (what the agent's session
    was already given) and ``in_batch`` (the turn's own events); None when nothing is left."""
    history = await fetch_history(
        pool, event, agent=agent, limit=limit, kinds=kinds, timeout=timeout, signer=signer
    )
    return turn_context(history, delivered, {event.id, *in_batch})
