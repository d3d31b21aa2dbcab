"""Keys and NIP-19: round trips, strict prefixes and case, length cap, secrets never shown."""

from __future__ import annotations

import contextlib
import functools
import inspect
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pynostr import bech32

from nostr_buzz.errors import InvalidKey, Nip19Error
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip19
from nostr_buzz.nips.nip19 import EventPointer, ProfilePointer
from tests.support.reference import (
    N_ORDER,
    NPUB,
    NPUB_HEX,
    NSEC,
    NSEC_HEX,
    OFF_CURVE,
    ref_bech32,
    ref_pubkey,
    tlv,
)

# The examples of NIP-19 (docs/events.md) are in tests/support/reference.py.
EVENT_ID = "b9f5441e45ca39179320e0031cfb18e34078673dcc3d3e3a3b3a981760aa5696"

hex32 = st.binary(min_size=32, max_size=32).map(bytes.hex)
relay_urls = st.lists(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30).filter(
        lambda s: len(s.encode("utf-8")) <= 255
    ),
    max_size=4,
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
    assert nip19.decode(ref_bech32("nevent", tlv)) == ("nevent", EventPointer(EVENT_ID))
    tlv = bytes([0, 32]) + bytes.fromhex(NPUB_HEX) + bytes([1, 3]) + b"wss" + bytes([7, 1, 0])
    assert nip19.decode(ref_bech32("nprofile", tlv)) == (
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
        nip19.decode(ref_bech32("nevent", tlv))


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
    long_nevent = ref_bech32("nevent", tlv)
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
        ref_bech32("npub", bytes(31)),  # wrong payload size
        ref_bech32("note", bytes(33)),
        ref_bech32("nrelay", bytes(32)),  # unsupported prefix
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


# =================================================================================================
# Conformance: keys, NIP-19 and event references checked from docs/events.md, against the
# reference bech32 and NIP-19 TLV of tests/support/reference.py and against nostr-sdk.
# =================================================================================================


# --- keys ---------------------------------------------------------------------------------------


def test_nip19_key_examples_round_trip() -> None:
    assert PublicKey.from_str(NPUB).hex == NPUB_HEX
    assert PublicKey.from_str(NPUB_HEX).bech32 == NPUB
    assert SecretKey.from_str(NSEC).hex == NSEC_HEX
    assert SecretKey.from_str(NSEC_HEX).bech32 == NSEC
    assert nip19.encode("npub", NPUB_HEX) == NPUB
    assert nip19.encode("nsec", bytes.fromhex(NSEC_HEX)) == NSEC
    assert nip19.decode(NPUB) == ("npub", NPUB_HEX)
    assert nip19.decode(NSEC) == ("nsec", NSEC_HEX)


def test_secret_key_forms() -> None:
    expected_pub = ref_pubkey(NSEC_HEX)
    for text in [NSEC_HEX, NSEC_HEX.upper(), NSEC, NSEC.upper()]:
        sk = SecretKey.from_str(text)
        assert sk.hex == NSEC_HEX
        assert sk.bech32 == NSEC
        assert sk.public_key.hex == expected_pub
        assert isinstance(sk.public_key, PublicKey)


def test_public_key_forms() -> None:
    for text in [NPUB_HEX, NPUB, NPUB.upper()]:
        pk = PublicKey.from_str(text)
        assert pk.hex == NPUB_HEX
        assert pk.bech32 == NPUB


def test_properties_not_methods() -> None:
    for cls, names in [
        (SecretKey, ["hex", "bech32", "public_key"]),
        (PublicKey, ["hex", "bech32"]),
    ]:
        for name in names:
            attr = inspect.getattr_static(cls, name)
            assert isinstance(attr, (property, functools.cached_property)), (cls, name)


def test_generate() -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    assert a.hex != b.hex
    assert len(a.hex) == 64 and a.hex == a.hex.lower()
    assert a.public_key.hex == ref_pubkey(a.hex)


def test_secret_hidden_in_repr_and_str() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    for text in (repr(sk), str(sk), f"{sk}", f"{sk!r}", repr([sk]), repr({"k": sk})):
        assert NSEC_HEX not in text and NSEC not in text
        assert NSEC_HEX[:16] not in text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (NSEC, "expected npub, got nsec"),
        (nip19.encode("note", NSEC_HEX), "expected npub"),
    ],
)
def test_public_key_wrong_hrp(text: str, needle: str) -> None:
    with pytest.raises(InvalidKey) as info:
        PublicKey.from_str(text)
    msg = str(info.value)
    assert needle in msg
    assert text not in msg and text.lower() not in msg and NSEC_HEX not in msg


def test_secret_key_wrong_hrp() -> None:
    with pytest.raises(InvalidKey) as info:
        SecretKey.from_str(NPUB)
    msg = str(info.value)
    assert "expected nsec" in msg and "npub" in msg
    assert NPUB not in msg and NPUB_HEX not in msg


BAD_KEY_INPUTS = [
    "",
    NSEC_HEX[:-1],
    NSEC_HEX + "0",
    "g" + NSEC_HEX[1:],
    NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p"),
    NSEC[:10] + NSEC[10:].upper(),
    "nsec1" + "q" * 20,
    NSEC_HEX + "\n" + NSEC_HEX,
    "0x" + NSEC_HEX[2:],
]


@pytest.mark.parametrize("text", BAD_KEY_INPUTS)
def test_bad_secret_key_inputs(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        SecretKey.from_str(text)
    msg = str(info.value)
    assert msg
    if text:
        assert text not in msg and text.strip() not in msg and NSEC_HEX not in msg


@pytest.mark.parametrize("value", [0, N_ORDER, N_ORDER + 1, 2**256 - 1])
def test_secret_key_out_of_range(value: int) -> None:
    with pytest.raises(InvalidKey):
        SecretKey.from_str(f"{value:064x}")


@pytest.mark.parametrize(
    "text",
    [
        "",
        NPUB_HEX[:-1],
        NPUB[:-1] + "x",
        NPUB[:12] + NPUB[12:].upper(),
        OFF_CURVE,
        "f" * 64,
        nip19.encode("npub", OFF_CURVE),
    ],
)
def test_bad_public_key_inputs(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        PublicKey.from_str(text)
    if text:
        assert text not in str(info.value)


@pytest.mark.parametrize("bad", [None, 5, b"00" * 32, [NSEC_HEX]])
def test_key_from_str_non_str_is_typed(bad: Any) -> None:
    with pytest.raises(InvalidKey):
        SecretKey.from_str(bad)
    with pytest.raises(InvalidKey):
        PublicKey.from_str(bad)


@pytest.mark.parametrize("pad", [" ", "\n", "\t", " \n"])
def test_surrounding_whitespace_never_escapes_untyped(pad: str) -> None:
    # docs/events.md does not say whether whitespace is trimmed; either the key parses to the same
    # value or InvalidKey is raised — and the secret never appears in the message.
    for text, cls, hexval in [
        (pad + NSEC_HEX + pad, SecretKey, NSEC_HEX),
        (pad + NSEC + pad, SecretKey, NSEC_HEX),
        (pad + NPUB + pad, PublicKey, NPUB_HEX),
    ]:
        try:
            key = cls.from_str(text)  # type: ignore[attr-defined]
        except InvalidKey as exc:
            assert NSEC_HEX not in str(exc) and NSEC not in str(exc)
        else:
            assert key.hex == hexval


# --- NIP-19 -------------------------------------------------------------------------------------

EID = "b9f5441e45ca39179320e0031cfb18e34078673dcc3d3e3a3b3a981760aa5696"


def test_note_round_trip_and_bytes_value() -> None:
    s = nip19.encode("note", EID)
    assert s == ref_bech32("note", bytes.fromhex(EID))
    assert nip19.encode("note", bytes.fromhex(EID)) == s
    assert nip19.decode(s) == ("note", EID)
    assert nip19.decode(s.upper()) == ("note", EID)


def test_nevent_round_trip_with_all_fields() -> None:
    s = nip19.encode(
        "nevent", EID, relays=("wss://a.example", "wss://b.example"), author=NPUB_HEX, kind=30023
    )
    hrp, ptr = nip19.decode(s)
    assert hrp == "nevent"
    assert isinstance(ptr, EventPointer)
    assert ptr.id == EID
    assert tuple(ptr.relays) == ("wss://a.example", "wss://b.example")
    assert ptr.author == NPUB_HEX
    assert ptr.kind == 30023
    assert ptr == EventPointer(EID, ptr.relays, NPUB_HEX, 30023)


def test_nevent_minimal() -> None:
    s = nip19.encode("nevent", EID)
    assert s == ref_bech32("nevent", tlv(0, bytes.fromhex(EID)))
    _hrp, ptr = nip19.decode(s)
    assert isinstance(ptr, EventPointer)
    assert (ptr.id, tuple(ptr.relays), ptr.author, ptr.kind) == (EID, (), None, None)


def test_nevent_independent_encoding_decodes() -> None:
    payload = (
        tlv(0, bytes.fromhex(EID))
        + tlv(1, b"wss://r.one")
        + tlv(9, b"future-extension")  # unknown TLV type: ignored
        + tlv(2, bytes.fromhex(NPUB_HEX))
        + tlv(3, (1111).to_bytes(4, "big"))
        + tlv(1, b"wss://r.two")
    )
    hrp, ptr = nip19.decode(ref_bech32("nevent", payload))
    assert hrp == "nevent"
    assert isinstance(ptr, EventPointer)
    assert ptr.id == EID
    assert tuple(ptr.relays) == ("wss://r.one", "wss://r.two")
    assert ptr.author == NPUB_HEX
    assert ptr.kind == 1111


def test_nprofile_nip19_example() -> None:
    s = (
        "nprofile1qqsrhuxx8l9ex335q7he0f09aej04zpazpl0ne2cgukyawd24mayt8gpp4mhxue69uhhytnc9e3k7mgp"
        "z4mhxue69uhkg6nzv9ejuumpv34kytnrdaksjlyr9p"
    )
    hrp, ptr = nip19.decode(s)
    assert hrp == "nprofile"
    assert isinstance(ptr, ProfilePointer)
    assert ptr.pubkey == "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d"
    assert tuple(ptr.relays) == ("wss://r.x.com", "wss://djbas.sadkb.com")
    again = nip19.encode("nprofile", ptr.pubkey, relays=ptr.relays)
    assert nip19.decode(again) == (hrp, ptr)
    assert ptr == ProfilePointer(ptr.pubkey, ptr.relays)


def test_long_strings_allowed_up_to_cap() -> None:
    relays = [f"wss://relay{i:03d}.example.com" for i in range(90)]
    payload = tlv(0, bytes.fromhex(EID)) + b"".join(tlv(1, r.encode()) for r in relays)
    s = ref_bech32("nevent", payload)
    assert 90 < len(s) <= 5000
    _hrp, ptr = nip19.decode(s)
    assert isinstance(ptr, EventPointer) and tuple(ptr.relays) == tuple(relays)


def test_over_cap_refused() -> None:
    relays = [f"wss://relay{i:03d}.example.com" for i in range(120)]
    payload = tlv(0, bytes.fromhex(EID)) + b"".join(tlv(1, r.encode()) for r in relays)
    s = ref_bech32("nevent", payload)
    assert len(s) > 5000
    with pytest.raises(Nip19Error):
        nip19.decode(s)
    with pytest.raises(Nip19Error):
        nip19.decode("n" * 5001)
    # The encoder never produces what the decoder refuses.
    with pytest.raises(Nip19Error):
        nip19.encode("nevent", EID, relays=tuple(relays))
    with pytest.raises(Nip19Error):
        nip19.encode("nprofile", NPUB_HEX, relays=tuple(relays))


@pytest.mark.parametrize(
    "s",
    [
        NPUB[:-1] + ("q" if NPUB[-1] != "q" else "p"),
        NPUB[:8] + NPUB[8:].upper(),
        "Npub" + NPUB[4:],
        "",
        "npub",
        "npub1",
        NPUB + "q",
        "nope1qqqqqqqqqqqqqqqqqqqq",
        ref_bech32("npub", bytes(31)),
        ref_bech32("npub", bytes(33)),
        ref_bech32("nevent", tlv(1, b"wss://no.id")),
        ref_bech32("nevent", tlv(0, bytes(31))),
        ref_bech32("nevent", tlv(0, bytes.fromhex(EID)) + b"\x03\x02\x00\x01"),
        ref_bech32("nevent", tlv(0, bytes.fromhex(EID)) + b"\x01\x05ab"),
        ref_bech32("nprofile", tlv(1, b"wss://x")),
        "npub1 " + NPUB[5:],
    ],
)
def test_decode_errors(s: str) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(s)


@pytest.mark.parametrize("bad", [None, 5, NPUB.encode()])
def test_decode_non_str_is_typed(bad: Any) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(bad)


@pytest.mark.parametrize(
    ("hrp", "value", "kw"),
    [
        ("npub", NPUB_HEX[:-1], {}),
        ("npub", "zz" * 32, {}),
        ("npub", bytes(31), {}),
        ("nfoo", NPUB_HEX, {}),
        ("nevent", EID, {"kind": 2**32}),
        ("nevent", EID, {"kind": -1}),
        ("nevent", EID, {"author": "xyz"}),
        ("nevent", EID, {"relays": ("x" * 300,)}),
    ],
)
def test_encode_errors(hrp: str, value: Any, kw: dict[str, Any]) -> None:
    with pytest.raises(Nip19Error):
        nip19.encode(hrp, value, **kw)


# --- interop: nostr-sdk (rust-nostr) agrees on NIP-19 and key derivation ------------------------


def test_nip19_interop_with_nostr_sdk() -> None:
    import nostr_sdk as sdk

    relays = ("wss://a.example", "wss://b.example/path")
    ours = nip19.encode("nevent", EID, relays=relays, author=NPUB_HEX, kind=30023)
    theirs = sdk.Nip19Event.from_bech32(ours)
    assert theirs.event_id().to_hex() == EID
    author = theirs.author()
    assert author is not None and author.to_hex() == NPUB_HEX
    kind = theirs.kind()
    assert kind is not None and kind.as_u16() == 30023
    assert [str(r) for r in theirs.relays()] == list(relays)

    made = sdk.Nip19Event(
        sdk.EventId.parse(EID),
        sdk.PublicKey.parse(NPUB_HEX),
        sdk.Kind(1111),
        [sdk.RelayUrl.parse("wss://r.one")],
    ).to_bech32()
    assert nip19.decode(made) == ("nevent", EventPointer(EID, ("wss://r.one",), NPUB_HEX, 1111))

    profile_b32 = sdk.Nip19Profile(
        sdk.PublicKey.parse(NPUB_HEX), [sdk.RelayUrl.parse("wss://r.one")]
    ).to_bech32()
    assert nip19.decode(profile_b32) == ("nprofile", ProfilePointer(NPUB_HEX, ("wss://r.one",)))
    assert nip19.encode("nprofile", NPUB_HEX, relays=("wss://r.one",)) == profile_b32

    assert nip19.encode("note", EID) == sdk.EventId.parse(EID).to_bech32()
    keys = sdk.Keys.parse(NSEC_HEX)
    assert SecretKey.from_str(NSEC_HEX).public_key.hex == keys.public_key().to_hex()
    assert SecretKey.from_str(NSEC_HEX).public_key.bech32 == keys.public_key().to_bech32()
    assert SecretKey.from_str(NSEC_HEX).bech32 == keys.secret_key().to_bech32()


# --- event references (docs/events.md; parsed by the CLI's shared helper) -------------------------


def test_event_reference_forms() -> None:
    from nostr_buzz.cli.common import parse_event_ref

    assert parse_event_ref(EID).id == EID
    assert parse_event_ref(EID.upper()).id == EID
    assert parse_event_ref(nip19.encode("note", EID)).id == EID
    assert parse_event_ref(nip19.encode("note", EID).upper()).id == EID
    ref = parse_event_ref(nip19.encode("nevent", EID, relays=("wss://r.one",), kind=1))
    assert (ref.id, tuple(ref.relays)) == (EID, ("wss://r.one",))


@pytest.mark.parametrize(
    "text",
    [
        NPUB,
        NSEC,
        NSEC.upper(),
        nip19.encode("nprofile", NPUB_HEX, relays=("wss://r",)),
        EID[:-1],
        "",
        nip19.encode("note", EID)[:-1] + "q",
    ],
)
def test_event_reference_bad_input(text: str) -> None:
    from nostr_buzz.cli.common import parse_event_ref
    from nostr_buzz.cli.output import CliFailure

    with pytest.raises(CliFailure) as info:
        parse_event_ref(text)
    msg = info.value.message
    if text.lower().startswith("nsec"):
        assert "looks like a secret key" in msg
        assert text not in msg and NSEC_HEX not in msg
