"""Channel metadata (kind 39000) counts only from trusted authors; a relay's own key comes from
its NIP-11 document (served by a real local relay over HTTP)."""

from __future__ import annotations

from hostile_relay import hostile_relay

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.nip11 import relay_public_key
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip29 import newest_group_metadata

OWNER = SecretKey.from_str("81" * 32)
RELAY = SecretKey.from_str("82" * 32)
STRANGER = SecretKey.from_str("83" * 32)


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


async def test_a_relay_announces_its_own_key_in_nip11() -> None:
    key = RELAY.public_key.hex
    async with hostile_relay("honest", nip11={"name": "r", "pubkey": key}) as relay:
        assert await relay_public_key(relay.url, timeout=5) == key
    async with hostile_relay("honest", nip11={"self": key, "pubkey": "ab" * 32}) as relay:
        assert await relay_public_key(relay.url, timeout=5) == key  # its own key first
    for document in ({"pubkey": "npub1notahexkey"}, {"pubkey": key.upper()}, {"name": "x"}):
        async with hostile_relay("honest", nip11=document) as relay:
            assert await relay_public_key(relay.url, timeout=5) is None
    async with hostile_relay("honest") as relay:  # no NIP-11 at all: a WebSocket-only server
        assert await relay_public_key(relay.url, timeout=5) is None
