"""NIP-42 client authentication, pure: the kind 22242 event.

Relay URLs are checked and compared in :mod:`nostr_buzz.nips.relay_url` (re-exported here).
"""

from __future__ import annotations

from typing import Final

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url, same_relay
from nostr_buzz.signer import EventTemplate, sign_template, template

__all__ = [
    "AUTH_KIND",
    "auth_event",
    "auth_template",
    "check_relay_url",
    "normalize_relay_url",
    "same_relay",
]

AUTH_KIND: Final = 22242


def auth_template(*, relay_url: str, challenge: str, created_at: int) -> EventTemplate:
    """The unsigned kind 22242 event answering ``challenge`` for ``relay_url`` (for a signer)."""
    tags = (("relay", relay_url), ("challenge", challenge))
    return template(kind=AUTH_KIND, content="", tags=tags, created_at=created_at)


def auth_event(
    secret: SecretKey,
    *,
    relay_url: str,
    challenge: str,
    created_at: int,
    aux_rand: bytes | None = None,
) -> Event:
    """The signed kind 22242 event answering ``challenge`` for ``relay_url``."""
    unsigned = auth_template(relay_url=relay_url, challenge=challenge, created_at=created_at)
    return sign_template(secret, unsigned, aux_rand)
