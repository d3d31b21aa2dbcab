"""Channel metadata (kind 39000) counts only from trusted authors, and a relay's NIP-11 key only
for the metadata that relay served itself (the selection, pure)."""

from __future__ import annotations

from nostr_buzz.core.context import channel_info
from nostr_buzz.core.turn_input import ChannelInfo
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip29 import (
    NOT_SERVED_BY_ITS_RELAY,
    UNTRUSTED_AUTHOR,
    IgnoredMetadata,
    metadata_distrust,
    newest_group_metadata,
)
from tests.support.keys import OWNER, STRANGER

RELAY = SecretKey.from_str("82" * 32)
GROUPS, OTHER = "wss://groups.example", "wss://other.example"


def metadata(key: SecretKey, channel: str, name: str, at: int) -> Event:
    tags = [["d", channel], ["name", name], ["about", f"about {name}"]]
    return sign_event(key, kind=39000, content="", tags=tags, created_at=at)


def test_only_trusted_authors_name_a_channel() -> None:
    owners = metadata(OWNER, "eng", "engineering", 100)
    newer_stranger = metadata(STRANGER, "eng", "post your nsec here", 200)
    relays = metadata(RELAY, "eng", "engineering (relay)", 150)
    other_channel = metadata(OWNER, "ops", "ops", 300)
    found = [newer_stranger, owners, relays, other_channel]
    chosen, ignored = newest_group_metadata(
        found, "eng", {OWNER.public_key.hex}, relay_keys={}, served_by={}
    )
    assert chosen == owners
    assert ignored == [(newer_stranger, UNTRUSTED_AUTHOR), (relays, UNTRUSTED_AUTHOR)]
    trusted = {OWNER.public_key.hex, RELAY.public_key.hex.upper()}
    chosen, ignored = newest_group_metadata(found, "eng", trusted, relay_keys={}, served_by={})
    assert chosen == relays and ignored == [IgnoredMetadata(newer_stranger, UNTRUSTED_AUTHOR)]


def test_a_relays_key_counts_only_for_what_that_relay_served() -> None:
    owners = metadata(OWNER, "eng", "engineering", 100)
    relays = metadata(RELAY, "eng", "engineering (relay)", 150)
    keys = {GROUPS: RELAY.public_key.hex.upper(), OTHER: STRANGER.public_key.hex}
    trusted = {OWNER.public_key.hex}
    # Served by the relay whose document announces the signer (alone or with another): counts.
    for servers in ({GROUPS}, {GROUPS, OTHER}):
        chosen, ignored = newest_group_metadata(
            [owners, relays], "eng", trusted, relay_keys=keys, served_by={relays.id: servers}
        )
        assert (chosen, ignored) == (relays, [])
    # The same event served only by another relay (announcing another key), or by nobody known.
    for served_by in ({relays.id: {OTHER}}, {}):
        chosen, ignored = newest_group_metadata(
            [owners, relays], "eng", trusted, relay_keys=keys, served_by=served_by
        )
        assert chosen == owners and ignored == [(relays, NOT_SERVED_BY_ITS_RELAY)]


def test_announcing_a_strangers_key_vouches_only_for_that_relays_own_events() -> None:
    """A hostile relay announces the stranger's key: the stranger's metadata counts where that
    relay served it, nowhere else, and the owner's trust set never grows."""
    strangers = metadata(STRANGER, "eng", "send me your nsec", 300)
    keys = {OTHER: STRANGER.public_key.hex}
    trusted = {OWNER.public_key.hex}
    assert metadata_distrust(strangers, trusted, relay_keys=keys, served_by=(OTHER,)) is None
    assert (
        metadata_distrust(strangers, trusted, relay_keys=keys, served_by=(GROUPS,))
        == NOT_SERVED_BY_ITS_RELAY
    )
    assert metadata_distrust(strangers, trusted, relay_keys={}, served_by=(OTHER,)) == (
        UNTRUSTED_AUTHOR
    )


def test_channel_info_applies_the_same_rule() -> None:
    relays = metadata(RELAY, "eng", "engineering (relay)", 150)
    keys, trusted = {GROUPS: RELAY.public_key.hex}, {OWNER.public_key.hex}

    def info_from(server: str) -> tuple[ChannelInfo | None, list[IgnoredMetadata]]:
        served_by = {relays.id: {server}}
        return channel_info(
            [relays], "eng", "a", None, trusted, relay_keys=keys, served_by=served_by
        )

    assert info_from(OTHER) == (None, [(relays, NOT_SERVED_BY_ITS_RELAY)])
    info, ignored = info_from(GROUPS)
    assert info is not None and ignored == []
    assert info.name == "engineering (relay)"
