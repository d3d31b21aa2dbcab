"""NIP-22 comments (kind 1111), pure: the tags of a comment that answers another comment.

A comment names its *root scope* with uppercase tags (``E``/``A``/``I`` for the root item,
``K`` its kind, ``P`` its author) and its *parent* with lowercase ones (``e``/``a``/``i``,
``k``, ``p``).  A reply to a comment keeps the comment's root scope and makes the comment its
parent.
"""

from __future__ import annotations

import re
from typing import Final

from nostr_buzz.event import Event

__all__ = ["COMMENT_KIND", "reply_tags"]

COMMENT_KIND: Final = 1111

_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_ROOT_NAMES: Final = ("E", "A", "I", "K", "P")


def _root_scope(parent: Event) -> list[list[str]] | None:
    """A comment's own root-scope tags (for each of E/A/I/K/P, the last one with a value), or
    None when it has no usable root (no E/A/I with a K, or an E that is not an event id)."""
    last: dict[str, tuple[str, ...]] = {}
    for tag in parent.tags:
        if len(tag) >= 2 and tag[0] in _ROOT_NAMES and tag[1]:
            last[tag[0]] = tag
    has_root = any(name in last for name in ("E", "A", "I")) and "K" in last
    if "E" in last and not _HEX64.fullmatch(last["E"][1]):
        has_root = False
    if not has_root:
        return None
    return [list(last[name]) for name in _ROOT_NAMES if name in last]


def reply_tags(parent: Event, *, relay_hint: str = "") -> list[list[str]]:
    """The tags of a kind 1111 answer to ``parent``: the parent's root scope (uppercase), then
    the parent itself as ``e`` (with its author), ``k`` (its kind) and ``p`` (its author).

    A parent that is not itself a comment, or a comment without a usable root scope, is both
    root and parent.
    """
    root = _root_scope(parent) if parent.kind == COMMENT_KIND else None
    if root is None:
        root = [
            ["E", parent.id, relay_hint, parent.pubkey],
            ["K", str(parent.kind)],
            ["P", parent.pubkey],
        ]
    return [
        *root,
        ["e", parent.id, relay_hint, parent.pubkey],
        ["k", str(parent.kind)],
        ["p", parent.pubkey],
    ]
