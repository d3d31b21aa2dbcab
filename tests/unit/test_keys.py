"""Keys and NIP-19: round trips, strict prefixes and case, length cap, secrets never shown."""

from __future__ import annotations

import contextlib
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pynostr import bech32

from nostr_buzz.errors import InvalidKey, Nip19Error
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip19
from nostr_buzz.nips.nip19 import EventPointer, ProfilePointer

# The examples of NIP-19 (docs/events.md).
NPUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
NSEC_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
EVENT_ID = "b9f5441e45ca39179320e0031cfb18e34078673dcc3d3e3a3b3a981760aa5696"

hex32 = st.binary(min_size=32, max_size=32).map(bytes.hex)
relay_urls = st.lists(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30).filter(
        lambda s: len(s.encode("utf-8")) <= 255
    ),
    max_size=4,
)


def _bech32(hrp: str, payload: bytes) -> str:
    return str(
        bech32.bech32_encode(hrp, bech32.convertbits(payload, 8, 5, True), bech32.Encoding.BECH32)
    )


# --- NIP-19 examples and round trips -----------------------------------------------------


def test_nip19_examples_round_trip() -> None:
    assert nip19.encode("npub", NPUB_HEX) == NPUB
    assert nip19.decode(NPUB) == ("npub", NPUB_HEX)
    assert nip19.encode("nsec", NSEC_HEX) == NSEC
    assert nip19.decode(NSEC) == ("nsec", NSEC_HEX)
    assert nip19.encode("npub", bytes.fromhex(NPUB_HEX)) == NPUB


def test_keys_from_the_nip19_examples() -> None:
    public = PublicKey.from_str(NPUB)
    assert public.hex == NPUB_HEX and public.bech32 == NPUB
    assert PublicKey.from_str(NPUB_HEX) == public
    assert PublicKey.from_str(NPUB_HEX.upper()) == public
    secret = SecretKey.from_str(NSEC)
    assert secret.hex == NSEC_HEX and secret.bech32 == NSEC
    assert SecretKey.from_str(NSEC_HEX.upper()) == secret
    assert SecretKey.from_str(NSEC_HEX).public_key == secret.public_key


def test_all_uppercase_bech32_is_accepted() -> None:
    assert nip19.decode(NPUB.upper()) == ("npub", NPUB_HEX)
    assert PublicKey.from_str(NPUB.upper()).hex == NPUB_HEX
    assert SecretKey.from_str(NSEC.upper()).hex == NSEC_HEX


def test_note_round_trip() -> None:
    note = nip19.encode("note", EVENT_ID)
    assert note.startswith("note1")
    assert nip19.decode(note) == ("note", EVENT_ID)


@settings(max_examples=200, deadline=None)
@given(
    event_id=hex32,
    relays=relay_urls,
    author=st.none() | hex32,
    kind=st.none() | st.integers(min_value=0, max_value=2**32 - 1),
)
def test_nevent_tlv_round_trip(
    event_id: str, relays: list[str], author: str | None, kind: int | None
) -> None:
    encoded = nip19.encode("nevent", event_id, relays=relays, author=author, kind=kind)
    assert nip19.decode(encoded) == ("nevent", EventPointer(event_id, tuple(relays), author, kind))


@settings(max_examples=200, deadline=None)
@given(pubkey=hex32, relays=relay_urls)
def test_nprofile_tlv_round_trip(pubkey: str, relays: list[str]) -> None:
    encoded = nip19.encode("nprofile", pubkey, relays=relays)
    assert nip19.decode(encoded) == ("nprofile", ProfilePointer(pubkey, tuple(relays)))


def test_nevent_with_hints_is_longer_than_bip173_allows_and_still_decodes() -> None:
    relays = ["wss://relay.example.com", "wss://nos.lol"]
    encoded = nip19.encode("nevent", EVENT_ID, relays=relays, author=NPUB_HEX, kind=1)
    assert len(encoded) > 90
    assert nip19.decode(encoded) == ("nevent", EventPointer(EVENT_ID, tuple(relays), NPUB_HEX, 1))


def test_unknown_tlv_types_are_ignored() -> None:
    tlv = bytes([9, 3]) + b"abc" + bytes([0, 32]) + bytes.fromhex(EVENT_ID) + bytes([200, 0])
    assert nip19.decode(_bech32("nevent", tlv)) == ("nevent", EventPointer(EVENT_ID))
    tlv = bytes([0, 32]) + bytes.fromhex(NPUB_HEX) + bytes([1, 3]) + b"wss" + bytes([7, 1, 0])
    assert nip19.decode(_bech32("nprofile", tlv)) == (
        "nprofile",
        ProfilePointer(NPUB_HEX, ("wss",)),
    )


@pytest.mark.parametrize(
    "tlv",
    [
        b"",  # no id record
        bytes([1, 3]) + b"wss",  # relays only
        bytes([0, 31]) + bytes(31),  # short id
        bytes([0, 32]) + bytes(31),  # runs past the end
        bytes([0, 32]) + bytes(32) + bytes([3, 2, 0, 1]),  # kind not 4 bytes
        bytes([0, 32]) + bytes(32) + bytes([2, 31]) + bytes(31),  # author not 32 bytes
        bytes([0, 32]) + bytes(32) + bytes([1]),  # truncated record header
        bytes([0, 32]) + bytes(32) + bytes([1, 1, 0xFF]),  # relay not UTF-8
    ],
)
def test_broken_tlv_is_nip19_error(tlv: bytes) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(_bech32("nevent", tlv))


# --- strictness --------------------------------------------------------------------------


def test_mixed_case_is_rejected() -> None:
    mixed = NPUB[:10] + NPUB[10:].upper()
    with pytest.raises(Nip19Error, match="mixes upper and lower case"):
        nip19.decode(mixed)
    with pytest.raises(InvalidKey):
        PublicKey.from_str(mixed)


def test_strings_over_5000_characters_are_refused() -> None:
    relays = ["wss://" + "r" * 240] * 20
    tlv = bytes([0, 32]) + bytes.fromhex(EVENT_ID)
    tlv += b"".join(bytes([1, len(r)]) + r.encode() for r in relays)
    long_nevent = _bech32("nevent", tlv)
    assert len(long_nevent) > 5000
    # encode() refuses to produce what decode() would refuse.
    with pytest.raises(Nip19Error, match="5000"):
        nip19.encode("nevent", EVENT_ID, relays=relays)
    with pytest.raises(Nip19Error, match="5000"):
        nip19.decode(long_nevent)
    with pytest.raises(Nip19Error, match="5000"):
        nip19.decode("n" * 5001)
    fits = nip19.encode("nevent", EVENT_ID, relays=relays[:10])
    assert 90 < len(fits) <= 5000
    assert nip19.decode(fits)[1] == EventPointer(EVENT_ID, tuple(relays[:10]))


@pytest.mark.parametrize(
    "text",
    [
        NPUB[:-1] + ("q" if NPUB[-1] != "q" else "p"),  # checksum
        "npub1",
        "",
        "npub1" + "b" * 10,  # "b" is not in the bech32 alphabet
        _bech32("npub", bytes(31)),  # wrong payload size
        _bech32("note", bytes(33)),
        _bech32("nrelay", bytes(32)),  # unsupported prefix
        str(
            bech32.bech32_encode(
                "npub", bech32.convertbits(bytes(32), 8, 5, True), bech32.Encoding.BECH32M
            )
        ),
    ],
)
def test_bad_bech32_is_nip19_error(text: str) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(text)


@pytest.mark.parametrize(
    ("hrp", "kwargs"),
    [
        ("npub", {"relays": ["wss://x"]}),
        ("note", {"kind": 1}),
        ("nprofile", {"author": NPUB_HEX}),
        ("nevent", {"kind": -1}),
        ("nevent", {"kind": 2**32}),
        ("nevent", {"relays": [""]}),
        ("nevent", {"relays": ["x" * 256]}),
        ("nevent", {"relays": "wss://x"}),
        ("nevent", {"relays": [5]}),
        ("nevent", {"relays": ["\ud800"]}),
        ("nevent", {"author": "xyz"}),
        ("naddr", {}),
    ],
)
def test_bad_encode_arguments_are_nip19_error(hrp: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(Nip19Error):
        nip19.encode(hrp, EVENT_ID, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["abc", EVENT_ID[:-2], bytes(31), 5, None])
def test_bad_encode_value_is_nip19_error(value: object) -> None:
    with pytest.raises(Nip19Error):
        nip19.encode("note", value)  # type: ignore[arg-type]


def test_nsec_where_npub_expected_is_rejected_by_name() -> None:
    with pytest.raises(InvalidKey, match="expected npub, got nsec") as info:
        PublicKey.from_str(NSEC)
    assert NSEC not in str(info.value) and NSEC_HEX not in str(info.value)
    with pytest.raises(InvalidKey, match="expected npub, got nsec"):
        PublicKey.from_str(NSEC.upper())
    with pytest.raises(InvalidKey, match="expected nsec, got npub"):
        SecretKey.from_str(NPUB)
    for other in (nip19.encode("note", EVENT_ID), nip19.encode("nprofile", NPUB_HEX)):
        with pytest.raises(InvalidKey, match="expected npub, got n"):
            PublicKey.from_str(other)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00" * 31,
        "00" * 33,
        "zz" * 32,
        "0" * 64,  # x = 0 is not on the curve
        "eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34",  # off-curve
        "f" * 64,  # >= field size
        "npub1xyz",
    ],
)
def test_bad_public_keys_are_invalid_key(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        PublicKey.from_str(text)
    if len(text) > 8:
        assert text not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "0" * 64,  # zero
        "ffffffffffffffffffffffffffffffffbaaedce6af48a03bbfd25e8cd0364141",  # = n
        "f" * 64,  # > n
        "ab" * 31,
        "nsec1" + "q" * 58,  # bad checksum
        NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p"),
    ],
)
def test_bad_secret_keys_never_repeat_the_input(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        SecretKey.from_str(text)
    message = str(info.value) + repr(info.value)
    assert text not in message
    assert text[5:20] not in message


def test_non_string_key_inputs_are_invalid_key() -> None:
    for value in (None, 5, bytes(32)):
        with pytest.raises(InvalidKey):
            PublicKey.from_str(value)  # type: ignore[arg-type]
        with pytest.raises(InvalidKey):
            SecretKey.from_str(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidKey):
        SecretKey(b"short")
    with pytest.raises(InvalidKey):
        PublicKey("00" * 32)  # type: ignore[arg-type]


# --- secrets stay hidden -----------------------------------------------------------------


def test_secret_key_repr_and_str_hide_the_secret() -> None:
    secret = SecretKey.from_str(NSEC)
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret])):
        assert NSEC_HEX not in shown and NSEC not in shown
        assert NSEC_HEX[:16] not in shown
    assert secret.public_key.hex in repr(secret)


def test_secret_key_is_not_picklable() -> None:
    with pytest.raises(TypeError):
        pickle.dumps(SecretKey.from_str(NSEC))


def test_nip19_errors_never_repeat_a_secret() -> None:
    broken = NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p")
    with pytest.raises(Nip19Error) as info:
        nip19.decode(broken)
    assert "looks like a secret key" in str(info.value)
    assert broken[5:] not in str(info.value)
    with pytest.raises(Nip19Error) as info:
        nip19.decode(NSEC_HEX)  # raw hex might be a secret too: not echoed either
    assert NSEC_HEX not in str(info.value) and NSEC_HEX[:12] not in str(info.value)


def test_generated_keys_round_trip() -> None:
    secret = SecretKey.generate()
    assert SecretKey.from_str(secret.bech32) == secret
    assert SecretKey.from_str(secret.hex) == secret
    assert PublicKey.from_str(secret.public_key.bech32) == secret.public_key
    assert secret != SecretKey.generate()


# --- hostile input -----------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(max_size=120)
    | st.from_regex(r"n(pub|sec|ote|event|profile)1[a-z0-9]{0,80}", fullmatch=True)
)
def test_arbitrary_text_only_raises_typed_errors(text: str) -> None:
    with contextlib.suppress(Nip19Error):
        nip19.decode(text)
    for parse in (PublicKey.from_str, SecretKey.from_str):
        try:
            parse(text)
        except InvalidKey as exc:
            if len(text) >= 12:
                assert text.strip() not in str(exc)


def test_parse_event_ref_is_a_library_function() -> None:
    event_id = "ab" * 32
    assert nip19.parse_event_ref(event_id.upper()) == nip19.EventRef(event_id)
    assert nip19.parse_event_ref(nip19.encode("note", event_id)).id == event_id
    for bad in ("nsec1" + "q" * 58, "npub1" + "q" * 58, "hello"):
        with pytest.raises(Nip19Error) as info:
            nip19.parse_event_ref(bad)
        assert "q" * 20 not in str(info.value)
