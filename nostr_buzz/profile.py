"""Profiles from kind 0 metadata (docs/events.md "Profiles", NIP-01/NIP-24).

A profile gives a display label and whether the author is an agent.  Metadata is user-written
JSON of any shape: bad content means "no label, not an agent", never an error.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.text.unicode import sanitize_label

__all__ = ["METADATA_KIND", "Profile", "label_from_metadata"]

METADATA_KIND: Final = 0
#: Candidate label fields, in order of preference.
_LABEL_FIELDS: Final = ("display_name", "name", "nip05")


def label_from_metadata(metadata: object) -> str | None:
    """The first of display_name, name, nip05 that is a string with a non-empty sanitized form."""
    if not isinstance(metadata, dict):
        return None
    for field in _LABEL_FIELDS:
        value = metadata.get(field)
        if isinstance(value, str):
            label = sanitize_label(value)
            if label:
                return label
    return None


def _parse_metadata(content: str) -> Any:
    try:
        return msgspec.json.decode(content)
    except (msgspec.DecodeError, RecursionError):
        return None


class Profile(msgspec.Struct, frozen=True):
    """What the library knows about a pubkey from its kind 0 event."""

    pubkey: str
    label: str | None = None
    is_agent: bool = False

    @classmethod
    def from_event(cls, event: Event) -> Profile:
        """Read a verified kind 0 event.  Raises :class:`BuzzError` for any other kind."""
        if not isinstance(event, Event):
            raise BuzzError(f"a profile is read from a verified Event: {not_an_event(event)}")
        if event.kind != METADATA_KIND:
            # Not InvalidEvent: the event is valid, it is just not metadata.
            raise BuzzError(f"a profile comes from a kind 0 event, got kind {event.kind}")
        metadata = _parse_metadata(event.content)
        is_agent = isinstance(metadata, dict) and metadata.get("bot") is True  # NIP-24
        return cls(event.pubkey, label_from_metadata(metadata), is_agent)
