"""NIP-29 group metadata (kind 39000), from trusted authors only.

Anyone can sign a kind 39000 event naming any group; what it says (the channel's name and
description) is shown to the agent in every turn of that channel.  So only metadata that a
trusted key signed counts:

* the owner's, the agent's and keys listed in the configuration, whichever relay served it;
* a relay's own key (the ``pubkey`` its NIP-11 document announces; NIP-29 relays sign group
  metadata with it) only for the metadata *that relay served*: NIP-29 scopes a group to its host
  relay, and a relay's word is about its own groups.  The same event served by another relay,
  or a relay announcing somebody else's key, vouches for nothing another relay holds.

Everything else is returned apart with the reason, for a diagnostic.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Final, NamedTuple

from nostr_buzz.event import Event

__all__ = [
    "CHAT_KIND",
    "GROUP_METADATA_KIND",
    "NOT_SERVED_BY_ITS_RELAY",
    "UNTRUSTED_AUTHOR",
    "IgnoredMetadata",
    "metadata_distrust",
    "newest_group_metadata",
]

#: A NIP-C7 chat message, scoped to a channel (a NIP-29 group) by its ``h`` tag.
CHAT_KIND: Final = 9

GROUP_METADATA_KIND = 39000

#: Why a kind 39000 event was ignored (the ``reason`` of its diagnostic).
UNTRUSTED_AUTHOR: Final = "channel metadata from an untrusted author"
NOT_SERVED_BY_ITS_RELAY: Final = (
    "channel metadata signed by a relay's NIP-11 key but served by another relay"
)


class IgnoredMetadata(NamedTuple):
    """A kind 39000 event for the channel that does not count, and why."""

    event: Event
    reason: str


def metadata_distrust(
    event: Event,
    trusted: Collection[str],
    *,
    relay_keys: Mapping[str, str],
    served_by: Collection[str],
) -> str | None:
    """None when ``event`` counts, else why not.  ``trusted``: lower-case hex keys trusted
    everywhere; ``relay_keys``: relay URL → the lower-case hex key its NIP-11 document
    announces; ``served_by``: the URLs of the relays that served ``event`` themselves."""
    if event.pubkey in trusted:
        return None
    if any(relay_keys.get(url) == event.pubkey for url in served_by):
        return None  # its host relay's own word about its own group
    if event.pubkey in relay_keys.values():
        return NOT_SERVED_BY_ITS_RELAY
    return UNTRUSTED_AUTHOR


def newest_group_metadata(
    events: Iterable[Event],
    channel: str,
    trusted: Collection[str],
    *,
    relay_keys: Mapping[str, str],
    served_by: Mapping[str, Collection[str]],
) -> tuple[Event | None, list[IgnoredMetadata]]:
    """(the newest kind 39000 for ``channel`` that counts (:func:`metadata_distrust`), or None;
    the kind 39000 events for ``channel`` that do not, with why, in the order given).
    ``trusted`` and ``relay_keys``: hex public keys (any case); ``served_by``: event id → the
    relays that served it (``PoolQueryResult.served_by``)."""
    keys = {key.lower() for key in trusted}
    hosts = {url: key.lower() for url, key in relay_keys.items()}
    newest: Event | None = None
    ignored: list[IgnoredMetadata] = []
    for event in events:
        if event.kind != GROUP_METADATA_KIND or channel not in event.tag_values("d"):
            continue
        why = metadata_distrust(
            event, keys, relay_keys=hosts, served_by=served_by.get(event.id, ())
        )
        if why is not None:
            ignored.append(IgnoredMetadata(event, why))
        elif newest is None or event.created_at > newest.created_at:
            newest = event
    return newest, ignored
