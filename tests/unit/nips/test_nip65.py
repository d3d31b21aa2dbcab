"""NIP-65 relay lists: build, parse strictly, and never amplify a hostile list."""

from __future__ import annotations

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip65

KEY = SecretKey.from_str("11" * 32)


def listed(tags: list[list[str]], created_at: int = 100) -> Event:
    return sign_event(KEY, kind=nip65.KIND, content="", tags=tags, created_at=created_at)


def test_a_built_list_reads_back_as_it_was_made() -> None:
    unsigned = nip65.relay_list_template(
        ["wss://both.example", "wss://in.example"],
        ["wss://both.example", "wss://out.example"],
        created_at=5,
    )
    assert unsigned.kind == 10002
    assert unsigned.tags == (
        ("r", "wss://both.example"),
        ("r", "wss://out.example", "write"),
        ("r", "wss://in.example", "read"),
    )
    event = sign_event(KEY, kind=unsigned.kind, content="", tags=unsigned.tags, created_at=5)
    assert nip65.relay_list(event) == nip65.RelayList(
        read=("wss://both.example", "wss://in.example"),
        write=("wss://both.example", "wss://out.example"),
    )


def test_markers_bad_urls_and_other_tags_are_read_strictly() -> None:
    event = listed(
        [
            ["r", "wss://a.example", "read"],
            ["r", "https://not-a-relay.example"],
            ["r", "wss://b.example", "sometimes"],  # unknown marker: skipped
            ["r", "wss://c.example", "write", "extra"],  # malformed: skipped
            ["relay", "wss://d.example"],
            ["r", "wss://e.example"],
            ["r", "wss://a.example", "read"],  # a repeat
        ]
    )
    assert nip65.relay_list(event) == nip65.RelayList(
        read=("wss://a.example", "wss://e.example"), write=("wss://e.example",)
    )


def test_another_kind_is_not_a_relay_list() -> None:
    event = sign_event(KEY, kind=10050, content="", tags=[], created_at=1)
    with pytest.raises(RelayError):
        nip65.relay_list(event)


def test_a_hostile_list_of_300_relays_and_local_addresses_does_not_amplify() -> None:
    tags = [["r", "ws://127.0.0.1:7777"], ["r", "ws://192.168.1.1"], ["r", "ws://[::1]:1"]]
    tags += [["r", f"wss://relay{i}.example"] for i in range(300)]
    found = nip65.relay_list(listed(tags))
    assert len(found.read) <= nip65.MAX_TAGS  # only the first tags are looked at
    used = nip65.relays_to_use(found.read, ["wss://mine.example"])
    assert used == ("wss://relay0.example", "wss://relay1.example", "wss://relay2.example")
    # A local address is used only when the reader configured it.
    assert nip65.relays_to_use(found.read, ["ws://127.0.0.1:7777"])[0] == "ws://127.0.0.1:7777"


def test_the_newest_list_of_each_author_wins() -> None:
    old = listed([["r", "wss://old.example"]], created_at=1)
    new = listed([["r", "wss://new.example"]], created_at=2)
    other = sign_event(SecretKey.from_str("22" * 32), kind=1, content="", tags=[], created_at=9)
    assert nip65.newest([new, old, other], [KEY.public_key.hex, other.pubkey]) == {
        KEY.public_key.hex: new
    }
