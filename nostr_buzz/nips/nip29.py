"""NIP-29 group metadata (kind 39000), from trusted authors only.

Anyone can sign a kind 39000 event naming any group; what it says (the channel's name and
description) is shown to the agent in every turn of that channel.  So only metadata signed by a
trusted key counts: the owner, keys listed in the configuration, and the relay's own key where
its NIP-11 document announces one (NIP-29 relays sign group metadata with it).  Everything else
is returned apart, for a diagnostic.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from nostr_buzz.event import Event

__all__ = ["CHAT_KIND", "GROUP_METADATA_KIND", "newest_group_metadata"]

#: A NIP-C7 chat message, scoped to a channel (a NIP-29 group) by its ``h`` tag.
CHAT_KIND: Final = 9

GROUP_METADATA_KIND = 39000


def newest_group_metadata(
    events: Iterable[Event], channel: str, trusted: Collection[str]
) -> tuple[Event | None, list[Event]]:
    """(the newest kind 39000 for ``channel`` by a trusted author, or None; the kind 39000
    events for ``channel`` by anyone else, in the order given).  ``trusted``: hex public keys
    (any case)."""
    keys = {key.lower() for key in trusted}
    newest: Event | None = None
    untrusted: list[Event] = []
    for event in events:
        if event.kind != GROUP_METADATA_KIND or channel not in event.tag_values("d"):
            continue
        if event.pubkey not in keys:
            untrusted.append(event)
        elif newest is None or event.created_at > newest.created_at:
            newest = event
    return newest, untrusted
