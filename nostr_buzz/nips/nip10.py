"""Thread routing (NIP-10 markers, NIP-22 comments) and destinations — spec 01.

Pure functions over a verified :class:`~nostr_buzz.event.Event`.  Every event maps to a
:class:`ThreadRef` and a *destination*: the thread root's id, or the event's own id when it
starts a thread.  Ids in tags count only as exactly 64 lowercase hex characters, so one thread
never gets two spellings of its destination.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from nostr_buzz.event import Event

__all__ = [
    "COMMENT_KIND",
    "DIRECT_CHANNEL_PREFIX",
    "TEXT_NOTE_KIND",
    "ThreadRef",
    "channel",
    "destination",
    "is_valid_channel_id",
    "mentions",
    "thread_ref",
]

TEXT_NOTE_KIND: Final = 1
COMMENT_KIND: Final = 1111  # NIP-22
#: Reserved for the direct channels the queue assigns (spec 02); never taken from an h tag.
DIRECT_CHANNEL_PREFIX: Final = "dm-"

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
    """Normalize an event's thread position (spec 01 routing table).  ``q`` tags never route."""
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

    Later ``h`` tags are never consulted, so a bad first one means "no channel".
    """
    for tag in event.tags:
        if len(tag) >= 2 and tag[0] == "h":
            value = tag[1]
            if is_valid_channel_id(value) and not value.startswith(DIRECT_CHANNEL_PREFIX):
                return value
            return None
    return None


def mentions(event: Event) -> list[str]:
    """Every ``p`` tag value in tag order, duplicates kept, exactly as written."""
    return [tag[1] for tag in event.tags if len(tag) >= 2 and tag[0] == "p"]
