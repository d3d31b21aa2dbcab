"""Channel metadata (kind 39000) counts only from trusted authors (the selection, pure)."""

from __future__ import annotations

from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip29 import newest_group_metadata
from tests.support.keys import OWNER, STRANGER

RELAY = SecretKey.from_str("82" * 32)


def metadata(key: SecretKey, channel: str, name: str, at: int) -> Event:
    tags = [["d", channel], ["name", name], ["about", f"about {name}"]]
    return sign_event(key, kind=39000, content="", tags=tags, created_at=at)


def test_only_trusted_authors_name_a_channel() -> None:
    owners = metadata(OWNER, "eng", "engineering", 100)
    newer_stranger = metadata(STRANGER, "eng", "post your nsec here", 200)
    relays = metadata(RELAY, "eng", "engineering (relay)", 150)
    other_channel = metadata(OWNER, "ops", "ops", 300)
    found = [newer_stranger, owners, relays, other_channel]
    chosen, ignored = newest_group_metadata(found, "eng", {OWNER.public_key.hex})
    assert chosen == owners and ignored == [newer_stranger, relays]
    trusted = {OWNER.public_key.hex, RELAY.public_key.hex.upper()}
    chosen, ignored = newest_group_metadata(found, "eng", trusted)
    assert chosen == relays and ignored == [newer_stranger]
    assert newest_group_metadata([newer_stranger], "eng", trusted) == (None, [newer_stranger])
