"""The context of a turn, as pure functions: what the compiler gets besides the batch.

* history: :func:`select_thread_history` (the root and the newest replies of a thread, with
  the total and truncation the fetch proved), :func:`select_dm_history` (a direct
  conversation), and :func:`turn_context`, the compiler's :class:`TurnContext` of either minus
  what the session was already given;
* the channel of any event: :func:`channel_info_of` — a channel's kind 39000 metadata signed
  by a trusted key, a NIP-17 conversation's or a plaintext direct message's synthetic ``dm-``
  channel, a public note's or comment's nameless public channel (:func:`direct_channel_type`);

The fetching is :mod:`nostr_buzz.io.context` (:func:`~nostr_buzz.io.context.fetch_history`,
:func:`~nostr_buzz.io.context.fetch_turn_context`); ``buzz run`` uses these same functions.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.core.given import given_key_set
from nostr_buzz.core.turn_input import ChannelInfo, ContextMessage, TurnContext
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, require_event
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip29 import IgnoredMetadata, newest_group_metadata
from nostr_buzz.nips.standing import rfc3339_seconds

__all__ = [
    "NO_HISTORY",
    "History",
    "channel_info",
    "channel_info_of",
    "direct_channel_type",
    "select_dm_history",
    "select_thread_history",
    "turn_context",
]


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


def utc_timestamp(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS+00:00`` of a Unix time (as ``datetime.isoformat`` writes it),
    without reading any clock; "unknown" outside the years 1970-9999 (a sender chooses its
    ``created_at``)."""
    stamp = rfc3339_seconds(seconds)
    return "unknown" if stamp is None else stamp.removesuffix("Z") + "+00:00"


def turn_context(
    history: History,
    delivered: Collection[str] = (),
    in_batch: Collection[str] = (),
    after: str | None = None,
) -> TurnContext | None:
    """The compiler's context: history minus what the session was already given
    (``delivered``: event ids), what the batch itself holds (``in_batch``) and, ``after`` a
    thread checkpoint's covered event, everything up to it (when the history holds it: else
    nothing is left out for it, since a message seen twice costs less than one lost); None when
    nothing is left."""
    messages = history.messages
    ids = [e.id for e in messages]
    if after is not None and after in ids:
        messages = messages[ids.index(after) + 1 :]
    kept = [e for e in messages if e.id not in delivered and e.id not in in_batch]
    if history.kind is None or not kept:
        return None
    return TurnContext(
        kind=history.kind,
        messages=tuple(
            ContextMessage(
                pubkey=e.pubkey,
                content=e.content,
                event_id=e.id,
                timestamp=utc_timestamp(e.created_at),
            )
            for e in kept
        ),
        total=history.total,
        truncated=history.truncated,
    )


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


def channel_info_of(
    event: Event,
    metadata: Iterable[Event] = (),
    *,
    trusted: Collection[str] = (),
    label: str | None = None,
) -> ChannelInfo | None:
    """The channel the compiler shows for a turn whose newest event is ``event``.

    A channel message (``h`` tag): the newest of its kind 39000 ``metadata`` signed by a
    ``trusted`` key (hex), else None (no snapshot: nobody vouches for its name).  A NIP-17
    private message or a plaintext direct message: its ``dm-`` conversation, named after its
    author (``label``, else the key).  A public note or comment outside any channel: a public
    channel with no name.  ``buzz run`` also trusts a relay's own NIP-11 key for the metadata
    that relay served (:func:`channel_info`).  ``trusted`` keys may be hex, ``npub1…`` or
    :class:`~nostr_buzz.keys.PublicKey`."""
    event = require_event(event, "channel_info_of")
    trusted = given_key_set(trusted, "channel_info_of trusted", BuzzError)
    direct = (nip10.queue_channel(event), direct_channel_type(event))
    info, _ = channel_info(metadata, nip10.channel(event), event.pubkey, label, trusted, direct)
    return info
