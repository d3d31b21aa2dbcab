"""NIP-42, pure: the AUTH event's shape and relay URL comparison (the relays' side is in
tests/e2e/io/test_nip42.py)."""

from __future__ import annotations

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event
from nostr_buzz.nips import nip42
from tests.support.keys import NIP19_SECRET as SECRET

NOW = 1_790_000_000


# --- pure --------------------------------------------------------------------------------------


def test_auth_event_shape() -> None:
    ev = nip42.auth_event(
        SECRET,
        relay_url="wss://relay.example",
        challenge="abc",
        created_at=NOW,
        aux_rand=b"\0" * 32,
    )
    assert ev.kind == 22242 and ev.content == "" and ev.created_at == NOW
    assert ev.tags == (("relay", "wss://relay.example"), ("challenge", "abc"))
    assert ev.pubkey == SECRET.public_key.hex
    assert Event.from_json(ev.to_json()) == ev


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("wss://Relay.Example/", "wss://relay.example"),
        ("WSS://relay.example:443", "wss://relay.example"),
        ("ws://relay.example:80/", "ws://relay.example"),
        (" ws://127.0.0.1:7777 ", "ws://127.0.0.1:7777/"),
        ("wss://relay.example/path/", "wss://relay.example/path"),
    ],
)
def test_same_relay(a: str, b: str) -> None:
    assert nip42.same_relay(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("ws://relay.example", "wss://relay.example"),
        ("wss://relay.example:444", "wss://relay.example"),
        ("ws://localhost:7777", "ws://127.0.0.1:7777"),
        ("wss://relay.example/a", "wss://relay.example/b"),
    ],
)
def test_different_relays(a: str, b: str) -> None:
    assert not nip42.same_relay(a, b)


@pytest.mark.parametrize("url", ["https://relay.example", "relay.example", "ws:///x", "ws://h:x"])
def test_bad_relay_urls(url: str) -> None:
    with pytest.raises(RelayError):
        nip42.normalize_relay_url(url)
