"""Thread routing (NIP-10 markers, NIP-22 comments) and destinations — docs/events.md.

Pure functions over a verified :class:`~nostr_buzz.event.Event`.  Every event maps to a
:class:`ThreadRef` and a *destination*: the thread root's id, or the event's own id when it
starts a thread.  Ids in tags count only as exactly 64 lowercase hex characters, so one thread
never gets two spellings of its destination.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from nostr_buzz.event import Event, require_event
from nostr_buzz.keys import PublicKey, as_public_key
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND
from nostr_buzz.nips.nip22 import COMMENT_KIND

__all__ = [
    "COMMENT_KIND",
    "DIRECT_CHANNEL_PREFIX",
    "PRIVATE_CHANNEL_PREFIX",
    "TEXT_NOTE_KIND",
    "ThreadHistory",
    "ThreadRef",
    "channel",
    "chronological",
    "destination",
    "direct_channel",
    "is_private_channel",
    "is_valid_channel_id",
    "mentions",
    "private_channel",
    "queue_channel",
    "reply_tags",
    "thread_history",
    "thread_ref",
]

TEXT_NOTE_KIND: Final = 1
#: Reserved for the direct channels the queue assigns (docs/queue.md); never taken from an h tag.
DIRECT_CHANNEL_PREFIX: Final = "dm-"
#: The private conversations' channels, inside the reserved prefix (never an h tag's value,
#: never a public direct channel: ``dm-`` and a hex key never continues with ``private-``).
PRIVATE_CHANNEL_PREFIX: Final = DIRECT_CHANNEL_PREFIX + "private-"


def direct_channel(pubkey: str) -> str:
    """The channel name of the public direct conversation with ``pubkey`` (``dm-`` and the hex
    key): its notes and plaintext messages without a channel."""
    return DIRECT_CHANNEL_PREFIX + pubkey


def private_channel(pubkey: str) -> str:
    """The channel name of the NIP-17 private conversation with ``pubkey``
    (``dm-private-`` and the hex key)."""
    return PRIVATE_CHANNEL_PREFIX + pubkey


def is_private_channel(name: str) -> bool:
    """Whether a queue channel is a private conversation's (what it holds is private)."""
    return name.startswith(PRIVATE_CHANNEL_PREFIX)


_EVENT_ID: Final = re.compile(r"[0-9a-f]{64}")
# fullmatch, not `$`: `$` would also accept a trailing newline.
_CHANNEL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")


class ThreadRef(NamedTuple):
    """Where an event sits in a thread; both ``None`` for a top-level event."""

    root: str | None
    parent: str | None


_TOP_LEVEL: Final = ThreadRef(None, None)


def _valid_id(value: str) -> bool:
    return _EVENT_ID.fullmatch(value) is not None


def _comment_ref(event: Event) -> ThreadRef:
    """NIP-22: root from the last valid uppercase ``E``, parent from the last valid ``e``.

    Markers are not consulted: on kind 1111 the 4th element of ``E``/``e`` is a pubkey.
    """
    root: str | None = None
    parent: str | None = None
    for tag in event.tags:
        if len(tag) < 2 or not _valid_id(tag[1]):
            continue
        if tag[0] == "E":
            root = tag[1]
        elif tag[0] == "e":
            parent = tag[1]
    if root is None:
        # Rooted at an A or I scope (or nothing usable): top-level for routing.
        return _TOP_LEVEL
    return ThreadRef(root, parent if parent is not None else root)


def _marked_ref(event: Event) -> ThreadRef | None:
    """NIP-10 markers; the last valid ``root`` and the last valid ``reply`` win."""
    root: str | None = None
    reply: str | None = None
    for tag in event.tags:
        if len(tag) < 4 or tag[0] != "e" or not _valid_id(tag[1]):
            continue
        if tag[3] == "root":
            root = tag[1]
        elif tag[3] == "reply":
            reply = tag[1]
    if root is not None:
        return ThreadRef(root, reply if reply is not None else root)
    if reply is not None:
        return ThreadRef(reply, reply)
    return None


def _positional_ref(event: Event) -> ThreadRef:
    """Deprecated positional NIP-10 (kind 1 only): first unmarked valid ``e`` is the root,
    the last is the parent.  Any non-empty 4th element (e.g. ``mention``) never routes."""
    ids = [
        tag[1]
        for tag in event.tags
        if (len(tag) in (2, 3) or (len(tag) >= 4 and tag[3] == ""))
        and tag[0] == "e"
        and _valid_id(tag[1])
    ]
    if not ids:
        return _TOP_LEVEL
    return ThreadRef(ids[0], ids[-1])


def thread_ref(event: Event) -> ThreadRef:
    """Normalize an event's thread position (docs/events.md, routing table); ``q`` never routes.

    Every function here reads a verified :class:`Event` only: anything else (another library's
    event, a dict) raises :class:`~nostr_buzz.errors.InvalidEvent` saying how to convert it.
    """
    event = require_event(event)
    if event.kind == COMMENT_KIND:
        return _comment_ref(event)
    marked = _marked_ref(event)
    if marked is not None:
        return marked
    if event.kind == TEXT_NOTE_KIND:
        # On chat kinds an unmarked e tag may be a plain citation: only kind 1 falls back.
        return _positional_ref(event)
    return _TOP_LEVEL


def destination(event: Event) -> str:
    """The thread root's id, or the event's own id for a top-level event."""
    root = thread_ref(event).root
    return root if root is not None else event.id


def is_valid_channel_id(s: object) -> bool:
    """1-128 characters from ``A-Z a-z 0-9 _ -`` (NIP-29 group ids, UUIDs, ``dm-{pubkey}``)."""
    return isinstance(s, str) and _CHANNEL_ID.fullmatch(s) is not None


def channel(event: Event) -> str | None:
    """The value of the first ``h`` tag with a value, if it is a valid non-``dm-`` channel id.

    Later ``h`` tags are never consulted, so a bad first one means "no channel".  A private
    message (kind 14) is in no channel, whatever its tags: it is never answered in public.
    """
    event = require_event(event)
    return channel_from_tags(event.kind, event.tags)


def channel_from_tags(kind: int, tags: Iterable[Sequence[str]]) -> str | None:
    """:func:`channel` from an event's kind and tags alone (for a shape checked before the
    event is verified, as a turn-input file's)."""
    if kind == PRIVATE_MESSAGE_KIND:
        return None
    for tag in tags:
        if len(tag) >= 2 and tag[0] == "h":
            value = tag[1]
            if is_valid_channel_id(value) and not value.startswith(DIRECT_CHANNEL_PREFIX):
                return value
            return None
    return None


def queue_channel(event: Event) -> str:
    """The channel an event is queued (and answered) in: a private message's is the author's
    private channel ``dm-private-{pubkey}``; else its ``h`` tag, else the author's direct
    channel ``dm-{pubkey}``.  A private conversation never shares a queue channel (or an agent
    session) with anything public."""
    event = require_event(event)
    if event.kind == PRIVATE_MESSAGE_KIND:
        return private_channel(event.pubkey)
    return channel(event) or direct_channel(event.pubkey)


def mentions(event: Event) -> list[str]:
    """Every ``p`` tag value in tag order, duplicates kept, exactly as written."""
    event = require_event(event)
    return [tag[1] for tag in event.tags if len(tag) >= 2 and tag[0] == "p"]


def reply_tags(
    parent: Event,
    *,
    sender: str | PublicKey,
    root: Event | None = None,
    parent_relay: str = "",
    root_relay: str = "",
) -> list[list[str]]:
    """The thread tags of a reply to ``parent`` sent by ``sender`` (its public key: hex,
    ``npub1…`` or a :class:`~nostr_buzz.keys.PublicKey`; anything else is
    :class:`~nostr_buzz.errors.InvalidKey`).

    NIP-10 marked ``e`` tags: ``root`` alone when
    the parent starts its thread, else ``root`` then ``reply``, each with its author's pubkey
    when known (``root``: the root event, if the caller has it); ``p`` tags for the authors
    replied to (the root's, then the parent's), each once, never the sender.  The relay hints
    default to empty.  The caller adds the channel's ``h`` tag.
    """
    tags: list[list[str]] = []
    parent = require_event(parent)  # what was given first is what is said first
    sender_hex = as_public_key(sender, "reply_tags sender").hex
    if root is not None:
        require_event(root, "root")
    root_id = thread_ref(parent).root or parent.id
    if root_id == parent.id:
        tags.append(["e", parent.id, parent_relay, "root", parent.pubkey])
        authors = [parent.pubkey]
    else:
        root_author = root.pubkey if root is not None and root.id == root_id else ""
        root_tag = ["e", root_id, root_relay, "root"] + ([root_author] if root_author else [])
        tags.append(root_tag)
        tags.append(["e", parent.id, parent_relay, "reply", parent.pubkey])
        authors = ([root_author] if root_author else []) + [parent.pubkey]
    tags.extend(["p", pubkey] for pubkey in dict.fromkeys(authors) if pubkey != sender_hex)
    return tags


def chronological(events: Iterable[Event]) -> list[Event]:
    """Oldest first, each id once.  Events of the same second (common in a busy thread) keep
    their thread order: a reply's depth below other events of the list (through its parent,
    else its root) breaks the tie, then the id."""
    listed = {e.id: e for e in map(require_event, events)}
    depth: dict[str, int] = {}
    for event in listed.values():
        chain: list[str] = []
        current: str | None = event.id
        # Bounded walk up the parents that are in the list (ids are hashes: no cycles).
        while current is not None and current in listed and current not in depth:
            if len(chain) > len(listed):
                break
            chain.append(current)
            ref = thread_ref(listed[current])
            # A missing parent falls back to the root, so a reply still sorts after it.
            current = ref.parent if ref.parent in listed else ref.root
        base = depth.get(current, -1) if current is not None else -1
        for offset, node in enumerate(reversed(chain), start=1):
            depth[node] = base + offset
    return sorted(listed.values(), key=lambda e: (e.created_at, depth.get(e.id, 0), e.id))


class ThreadHistory(NamedTuple):
    """A thread as fetched: its root (when found), the newest replies kept, oldest first,
    how many replies the fetch proved to exist, and whether some were left out."""

    root: Event | None
    replies: list[Event]
    found: int
    truncated: bool


def thread_history(
    events: Iterable[Event], root_id: str, group: str | None, limit: int | None = None
) -> ThreadHistory:
    """Select one thread from fetched ``events``: the root by id, and the replies that NIP-10
    routes into ``root_id`` within channel ``group`` (an ``e`` tag alone may be a citation),
    in :func:`chronological` order; with ``limit``, only the newest ``limit`` replies."""
    listed = list(map(require_event, events))
    root = next((e for e in listed if e.id == root_id), None)
    replies = chronological(
        e
        for e in listed
        if e.id != root_id and thread_ref(e).root == root_id and channel(e) == group
    )
    found = len(replies)
    truncated = limit is not None and found > limit
    if limit is not None:
        replies = replies[-limit:] if limit > 0 else []
    return ThreadHistory(root, replies, found, truncated)
