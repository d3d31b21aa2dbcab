"""NIP-27 references: the tags a text calls for (nostr_buzz.nips.nip27), read by an independent
encoder (nostr-sdk builds every code), and what a reply or a private message gets from them."""

from __future__ import annotations

import nostr_sdk
import pytest

from nostr_buzz.core.reply import build_reply, reply_template
from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip19, nip27
from nostr_buzz.signer import EventTemplate

ALICE = nostr_sdk.Keys.generate()
BOB = nostr_sdk.Keys.generate()
ID = "ab" * 32


def npub(keys: nostr_sdk.Keys) -> str:
    return keys.public_key().to_bech32()


def nprofile(keys: nostr_sdk.Keys, *relays: str) -> str:
    urls = [nostr_sdk.RelayUrl.parse(u) for u in relays]
    return nostr_sdk.Nip19Profile(keys.public_key(), urls).to_bech32()


def nevent(author: nostr_sdk.Keys | None, *relays: str) -> str:
    urls = [nostr_sdk.RelayUrl.parse(u) for u in relays]
    who = author.public_key() if author is not None else None
    return nostr_sdk.Nip19Event(nostr_sdk.EventId.parse(ID), who, None, urls).to_bech32()


def naddr(author: nostr_sdk.Keys, identifier: str, *relays: str) -> str:
    where = nostr_sdk.Coordinate(nostr_sdk.Kind(30023), author.public_key(), identifier)
    urls = [nostr_sdk.RelayUrl.parse(u) for u in relays]
    return nostr_sdk.Nip19Coordinate(where, urls).to_bech32()


def hex_of(keys: nostr_sdk.Keys) -> str:
    return keys.public_key().to_hex()


def test_each_kind_of_reference_calls_for_its_tag() -> None:
    note = nostr_sdk.EventId.parse(ID).to_bech32()
    text = (
        f"hi nostr:{npub(ALICE)}, nostr:{nprofile(BOB, 'wss://bob.example')} quoted "
        f"nostr:{note} and nostr:{nevent(ALICE, 'wss://r.example/')} and "
        f"nostr:{naddr(BOB, 'post', 'wss://a.example')}"
    )
    content, tags = nip27.tag_references(text, [])
    assert content == text
    assert tags == (
        ("p", hex_of(ALICE)),
        ("p", hex_of(BOB)),
        ("q", ID, "wss://r.example/"),
        ("q", f"30023:{hex_of(BOB)}:post", "wss://a.example"),
    )  # the note is the nevent's event: a quote with a hint comes first (as NDK adds it)
    quoted = nip27.tag_references(f"nostr:{nevent(BOB, 'wss://r.example/')}", [])[1]
    assert quoted == (("q", ID, "wss://r.example/"), ("p", hex_of(BOB)))


def test_an_at_code_is_written_as_a_nostr_code_and_bad_codes_are_left_alone() -> None:
    good, bad = npub(ALICE), npub(ALICE)[:-1] + ("q" if npub(ALICE)[-1] != "q" else "p")
    text = f"@{good} and nostr:{bad} and nostr:{good}x and nostr:nsec1abc"
    content, tags = nip27.tag_references(text, [])
    assert content == f"nostr:{good} and nostr:{bad} and nostr:{good}x and nostr:nsec1abc"
    assert tags == (("p", hex_of(ALICE)),)


def test_tags_already_there_are_not_repeated_and_the_given_ones_come_first() -> None:
    text = f"nostr:{npub(ALICE)} nostr:{npub(ALICE)} #Buzz #buzz #Buzz"
    given = [["e", ID, "", "root"], ["p", hex_of(ALICE), "wss://hint.example"]]
    _, tags = nip27.tag_references(text, given)
    assert tags == (
        ("e", ID, "", "root"),
        ("p", hex_of(ALICE), "wss://hint.example"),
        ("t", "Buzz"),
        ("t", "buzz"),
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("#a #b.c (#d) x#e #f!", ["a", "b", "f"]),
        ("# Heading\n## Sub\nissue #30.", ["30"]),
        ("\u00a0#nbsp \ufeff#bom \x1c#fs", ["nbsp", "bom"]),  # JavaScript's spaces
        ("#日本 #🙂", ["日本", "🙂"]),
    ],
)
def test_hashtags_are_read_as_ndk_reads_them(text: str, words: list[str]) -> None:
    assert nip27.hashtags(text) == words


def test_a_private_message_names_no_one_new_in_its_room() -> None:
    agent, owner = SecretKey.generate(), SecretKey.generate()
    text = f"ask nostr:{npub(ALICE)} about nostr:{nevent(BOB)}"
    rumor = nip17.message(agent.public_key.hex, [owner.public_key.hex], text, created_at=5)
    assert nip17.receivers(rumor) == [owner.public_key.hex]
    assert ["q", ID, ""] in [list(t) for t in rumor.tags]
    assert hex_of(ALICE) not in rumor.tag_values("p") and hex_of(BOB) not in rumor.tag_values("p")


def test_a_reply_carries_what_its_text_references_built_or_signed() -> None:
    agent, owner = SecretKey.generate(), SecretKey.generate()
    note = sign_event(owner, kind=1, content="hi", tags=[], created_at=1)
    text = f"you said: @{npub(ALICE)} #buzz"
    unsigned = reply_template(note, text, sender=agent.public_key.hex, created_at=2)
    assert unsigned.content == f"you said: nostr:{npub(ALICE)} #buzz"
    assert unsigned.tags[-2:] == (("p", hex_of(ALICE)), ("t", "buzz"))
    signed = build_reply(agent, note, text, 2)
    assert (signed.content, signed.tags) == (unsigned.content, unsigned.tags)


def test_naddr_decoding_refuses_what_is_incomplete() -> None:
    pointer = nip19.decode_address(naddr(ALICE, "", "wss://x.example"))
    assert pointer == nip19.AddressPointer(30023, hex_of(ALICE), "", ("wss://x.example",))
    with pytest.raises(nip19.Nip19Error, match="expected naddr"):
        nip19.decode_address(npub(ALICE))
    assert nip27.references(f"nostr:{npub(ALICE)[:-6]}")[1] == []


def test_an_event_template_without_references_is_returned_as_it_is() -> None:
    unsigned = EventTemplate(9, "plain text", (("h", "x"),), 1)
    assert nip27.with_references(unsigned) is unsigned
