"""NIP-44 v2 against every case of the official vectors (fixtures/vectors), then against rust-nostr
(nostr-sdk), and property tests of decrypt."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import pickle
from typing import Any

import nostr_sdk
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import Nip44Error
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44
from tests.support.data import VECTORS, load_json

V2: dict[str, Any] = load_json(VECTORS / "nip44.vectors.json")["v2"]
VALID = V2["valid"]
INVALID = V2["invalid"]
EXTENDED: dict[str, Any] = load_json(VECTORS / "nip44.extended-prefix.vectors.json")


def _id(case: dict[str, Any]) -> str:
    return str(case.get("note") or case.get("plaintext", "")[:20] or case.get("sec1", "")[:16])


# --- valid sections ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", VALID["get_conversation_key"], ids=_id)
def test_conversation_key_vectors(case: dict[str, Any]) -> None:
    expected = bytes.fromhex(case["conversation_key"])
    assert nip44.conversation_key(case["sec1"], case["pub2"]) == expected
    # Same result from typed keys, and from upper-case hex.
    typed = nip44.conversation_key(
        SecretKey.from_str(case["sec1"]), PublicKey.from_str(case["pub2"])
    )
    assert typed == expected
    assert nip44.conversation_key(case["sec1"].upper(), case["pub2"].upper()) == expected


def test_message_keys_vectors() -> None:
    section = VALID["get_message_keys"]
    conv = bytes.fromhex(section["conversation_key"])
    assert len(section["keys"]) > 0
    for case in section["keys"]:
        keys = nip44.get_message_keys(conv, bytes.fromhex(case["nonce"]))
        assert keys.chacha_key.hex() == case["chacha_key"]
        assert keys.chacha_nonce.hex() == case["chacha_nonce"]
        assert keys.hmac_key.hex() == case["hmac_key"]


@pytest.mark.parametrize(("length", "padded"), VALID["calc_padded_len"])
def test_calc_padded_len_vectors(length: int, padded: int) -> None:
    assert nip44.calc_padded_len(length) == padded


@pytest.mark.parametrize("case", VALID["encrypt_decrypt"], ids=_id)
def test_encrypt_decrypt_vectors(case: dict[str, Any]) -> None:
    sec1 = SecretKey.from_str(case["sec1"])
    sec2 = SecretKey.from_str(case["sec2"])
    conv = bytes.fromhex(case["conversation_key"])
    assert nip44.conversation_key(sec1, sec2.public_key) == conv
    assert nip44.conversation_key(sec2, sec1.public_key) == conv  # symmetric
    payload = nip44.encrypt(case["plaintext"], conv, bytes.fromhex(case["nonce"]))
    assert payload == case["payload"]
    assert nip44.decrypt(case["payload"], conv) == case["plaintext"]


@pytest.mark.parametrize("case", VALID["encrypt_decrypt_long_msg"], ids=lambda c: c["pattern"])
def test_long_message_vectors(case: dict[str, Any]) -> None:
    plaintext = case["pattern"] * case["repeat"]
    assert hashlib.sha256(plaintext.encode("utf-8")).hexdigest() == case["plaintext_sha256"]
    conv = bytes.fromhex(case["conversation_key"])
    payload = nip44.encrypt(plaintext, conv, bytes.fromhex(case["nonce"]))
    assert hashlib.sha256(payload.encode("ascii")).hexdigest() == case["payload_sha256"]
    assert nip44.decrypt(payload, conv) == plaintext


@pytest.mark.parametrize("case", EXTENDED["vectors"], ids=lambda c: str(c["plaintext_len"]))
def test_extended_prefix_vectors(case: dict[str, Any]) -> None:
    plaintext = EXTENDED["plaintext_char"] * case["plaintext_len"]
    assert hashlib.sha256(plaintext.encode("utf-8")).hexdigest() == case["plaintext_sha256"]
    assert nip44.calc_padded_len(case["plaintext_len"]) == case["padded_len"]
    conv = bytes.fromhex(EXTENDED["conversation_key"])
    payload = nip44.encrypt(plaintext, conv, bytes.fromhex(EXTENDED["nonce"]))
    assert hashlib.sha256(payload.encode("ascii")).hexdigest() == case["payload_sha256"]
    assert nip44.decrypt(payload, conv) == plaintext
    prefix_len = 6 if case["prefix"].startswith("extended") else 2
    decoded = base64.b64decode(payload)
    assert len(decoded) == 1 + 32 + prefix_len + case["padded_len"] + 32


# --- invalid sections -------------------------------------------------------------------------


@pytest.mark.parametrize("case", INVALID["decrypt"], ids=_id)
def test_invalid_decrypt_vectors(case: dict[str, Any]) -> None:
    # The message names the failed check (e.g. "version" for "unknown encryption version").
    words = ("version", "base64", "MAC", "padding", "payload")
    key_word = next(w for w in words if w in case["note"])
    with pytest.raises(Nip44Error, match=key_word):
        nip44.decrypt(case["payload"], bytes.fromhex(case["conversation_key"]))


@pytest.mark.parametrize("case", INVALID["get_conversation_key"], ids=_id)
def test_invalid_conversation_key_vectors(case: dict[str, Any]) -> None:
    with pytest.raises(Nip44Error):
        nip44.conversation_key(case["sec1"], case["pub2"])


def test_invalid_conversation_key_vectors_with_typed_keys() -> None:
    """Whatever the input type, a bad key is a Nip44Error (typed keys that can be built)."""
    good = SecretKey.from_str("01" * 32)
    for case in INVALID["get_conversation_key"]:
        try:
            public = PublicKey.from_str(case["pub2"])
        except ValueError:
            continue
        with pytest.raises(Nip44Error):
            nip44.conversation_key(case["sec1"], public)
    with pytest.raises(Nip44Error):
        nip44.conversation_key(good, "ff" * 32)


def test_encrypt_msg_lengths_zero_refused_others_now_valid() -> None:
    lengths = INVALID["encrypt_msg_lengths"]
    assert lengths == [0, 65536, 100000, 10000000]
    conv = bytes.fromhex(EXTENDED["conversation_key"])
    with pytest.raises(Nip44Error):
        nip44.encrypt("", conv)
    with pytest.raises(Nip44Error):
        nip44.calc_padded_len(0)
    for n in lengths[1:]:
        plaintext = "x" * n
        payload = nip44.encrypt(plaintext, conv)
        assert nip44.decrypt(payload, conv) == plaintext
        assert len(base64.b64decode(payload)) == 65 + 6 + nip44.calc_padded_len(n)


# --- API edges --------------------------------------------------------------------------------

CONV = bytes.fromhex(VALID["encrypt_decrypt"][0]["conversation_key"])
PAYLOAD = VALID["encrypt_decrypt"][0]["payload"]


def test_above_max_plaintext_refused() -> None:
    with pytest.raises(Nip44Error):
        nip44.calc_padded_len(nip44.MAX_PLAINTEXT + 1)
    assert nip44.calc_padded_len(nip44.MAX_PLAINTEXT) == nip44.MAX_PLAINTEXT
    assert nip44.MAX_PAYLOAD_CHARS == 4 * -(-(65 + 6 + nip44.MAX_PLAINTEXT) // 3)


# A payload whose decoded length (131 bytes) is not a multiple of 3, so it ends with one "=".
PADDED = nip44.encrypt("y" * 40, CONV, bytes(range(32)))
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _non_canonical(payload: str) -> str:
    """Set the unused low bits of the last group: b64decode yields the very same bytes."""
    assert payload.endswith("=") and not payload.endswith("==")
    last = _B64.index(payload[-2])
    assert last & 0b11 == 0
    return payload[:-2] + _B64[last | 0b01] + "="


def test_padded_fixture_is_valid_and_non_canonical_twin_decodes_equal() -> None:
    assert nip44.decrypt(PADDED, CONV) == "y" * 40
    twin = _non_canonical(PADDED)
    assert twin != PADDED and base64.b64decode(twin) == base64.b64decode(PADDED)


@pytest.mark.parametrize(
    "payload",
    [
        PAYLOAD + "A" * (nip44.MAX_PAYLOAD_CHARS - len(PAYLOAD) + 1),  # too long, before base64
        PAYLOAD[:-4],  # valid base64 but shorter than 132 characters
        PADDED.rstrip("=") + "A",  # padding missing, wrong character instead
        PADDED.rstrip("="),  # padding missing
        PADDED[:60] + "\n" + PADDED[61:],  # whitespace
        PADDED[:60] + " " + PADDED[60:-1],
        PADDED[:-1] + "==",  # too much padding
        _non_canonical(PADDED),  # unused bits set: same bytes, different text
        PAYLOAD[:50] + "é" + PAYLOAD[51:],  # non-ASCII
        PAYLOAD[:50] + "-" + PAYLOAD[51:],  # URL-safe alphabet
        "Ag==" * 40,  # padding in the middle
    ],
)
def test_strict_decoding(payload: str) -> None:
    with pytest.raises(Nip44Error):
        nip44.decrypt(payload, CONV)


def test_short_decoded_length_refused() -> None:
    # 132 characters of base64 with padding inside the allowed character range: 98 bytes.
    payload = base64.b64encode(b"\x02" + bytes(97)).decode()
    payload = payload + "=" * ((132 - len(payload)) % 4)
    assert len(payload) == 132 and len(base64.b64decode(payload)) < 99
    with pytest.raises(Nip44Error, match="decoded length"):
        nip44.decrypt(payload, CONV)


def _seal(padded: bytes, nonce: bytes = bytes(range(32))) -> str:
    """An authenticated payload around an arbitrary (possibly malformed) padded plaintext."""
    keys = nip44.get_message_keys(CONV, nonce)
    ciphertext = nip44._chacha20(keys.chacha_key, keys.chacha_nonce, padded)
    mac = hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    return base64.b64encode(b"\x02" + nonce + ciphertext + mac).decode()


def test_sealed_helper_matches_encrypt() -> None:
    body = b"hello"
    assert nip44.decrypt(_seal(b"\x00\x05" + body + bytes(27)), CONV) == "hello"


def test_invalid_utf8_plaintext_is_nip44_error() -> None:
    """A correctly authenticated payload whose plaintext is not UTF-8 is still refused."""
    with pytest.raises(Nip44Error, match="UTF-8"):
        nip44.decrypt(_seal(b"\x00\x02\xff\xfe" + bytes(30)), CONV)


@pytest.mark.parametrize(
    ("padded", "why"),
    [
        (b"\x00\x00\x00\x00\x00\x05hello" + bytes(27), "extended prefix for a short text"),
        (b"\x00\x00\x00\x00\x00\x00" + bytes(32), "extended prefix with length 0"),
        (b"\x00\x05hello" + bytes(59), "too much padding"),
        (b"\x00\x21" + b"x" * 33 + bytes(30), "too little padding"),
        (b"\x00\x00\x00\x01\x00\x00" + bytes(32), "extended length, no padding"),
        (b"\xff\xffhello" + bytes(27), "length larger than the data"),
    ],
)
def test_authenticated_but_badly_padded_refused(padded: bytes, why: str) -> None:
    with pytest.raises(Nip44Error, match="padding"):
        nip44.decrypt(_seal(padded), CONV)


def test_extended_prefix_accepted_when_sealed_by_hand() -> None:
    n = 65536
    padded = b"\x00\x00" + n.to_bytes(4, "big") + b"b" * n
    assert nip44.decrypt(_seal(padded), CONV) == "b" * n


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (nip44.encrypt, ("hi", b"short")),
        (nip44.encrypt, ("hi", CONV, b"short nonce")),
        (nip44.encrypt, (b"bytes", CONV)),
        (nip44.encrypt, ("\ud800", CONV)),
        (nip44.decrypt, (PAYLOAD, "not bytes")),
        (nip44.decrypt, (b"bytes", CONV)),
        (nip44.conversation_key, (b"\x01" * 32, "ab" * 32)),
        (nip44.conversation_key, (None, None)),
        (nip44.conversation_key, ("01" * 32, 12345)),
        (nip44.calc_padded_len, ("12",)),
        (nip44.get_message_keys, (CONV, b"x")),
    ],
)
def test_bad_argument_types_raise_nip44_error(call: Any, args: tuple[Any, ...]) -> None:
    with pytest.raises(Nip44Error):
        call(*args)


def test_random_nonce_by_default() -> None:
    a = nip44.encrypt("same", CONV)
    b = nip44.encrypt("same", CONV)
    assert a != b
    assert nip44.decrypt(a, CONV) == nip44.decrypt(b, CONV) == "same"


def test_cache_and_message_keys_hide_secrets() -> None:
    secret = SecretKey.from_str("7f" * 32)
    peer = SecretKey.from_str("3c" * 32).public_key
    conv = nip44.conversation_key(secret, peer)
    assert nip44.conversation_key(secret, peer) == conv  # cached path
    cache_repr = repr(nip44._cache)
    assert "7f7f" not in cache_repr and conv.hex() not in cache_repr
    keys = nip44.get_message_keys(conv, bytes(32))
    assert keys.chacha_key.hex() not in repr(keys)
    with pytest.raises(TypeError):
        pickle.dumps(nip44._cache)


def test_error_messages_never_repeat_the_secret() -> None:
    for bad in ("ff" * 32, "00" * 32):
        with pytest.raises(Nip44Error) as info:
            nip44.conversation_key(bad, "ab" * 32)
        assert bad not in str(info.value)


# =================================================================================================
# Interop: NIP-44 v2 against rust-nostr (nostr-sdk), and property tests of decrypt.
# =================================================================================================


ALICE = SecretKey.from_str("5c0c523f52a5b6fad39ed2403092df8cebc36318b39383bca6c00808626fab3a")


BOB = SecretKey.from_str("4b22aa260e4acb7021e32f38a6cdf4b673c6a277755bfce287e370c924dc936d")


SDK_CONV = nip44.conversation_key(ALICE, BOB.public_key)


SDK_ALICE = nostr_sdk.SecretKey.parse(ALICE.hex)


SDK_BOB = nostr_sdk.SecretKey.parse(BOB.hex)


SDK_ALICE_PUB = nostr_sdk.PublicKey.parse(ALICE.public_key.hex)


SDK_BOB_PUB = nostr_sdk.PublicKey.parse(BOB.public_key.hex)


# nostr-sdk 0.45 refuses to *encrypt* more than 65,408 bytes ("message too long") but decrypts
# up to 65,535; the random round trips therefore stay within 1..65,408 bytes.
MAX_RANDOM = 65_408


@st.composite
def utf8_messages(draw: st.DrawFn) -> str:
    """A string whose UTF-8 encoding is 1 to MAX_RANDOM bytes, from short to near the cap."""
    target = draw(
        st.one_of(
            st.integers(1, 64),
            st.integers(65, 4096),
            st.integers(4097, MAX_RANDOM),
        )
    )
    head = draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=32))
    filler = draw(st.characters(min_codepoint=0x20, max_codepoint=0x7E))
    head_bytes = head.encode("utf-8")
    if len(head_bytes) >= target:
        # Cut at a character boundary: trim characters until the encoding fits.
        while len(head.encode("utf-8")) > target:
            head = head[:-1]
        return head or filler
    return head + filler * (target - len(head_bytes))


def _sdk_encrypt(plaintext: str) -> str:
    return nostr_sdk.nip44_encrypt(SDK_BOB, SDK_ALICE_PUB, plaintext, nostr_sdk.Nip44Version.V2)


def _sdk_decrypt(payload: str) -> str:
    return nostr_sdk.nip44_decrypt(SDK_BOB, SDK_ALICE_PUB, payload)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(utf8_messages())
def test_interop_both_directions(plaintext: str) -> None:
    assert 1 <= len(plaintext.encode("utf-8")) <= MAX_RANDOM
    ours = nip44.encrypt(plaintext, SDK_CONV)
    assert _sdk_decrypt(ours) == plaintext
    theirs = _sdk_encrypt(plaintext)
    assert nip44.decrypt(theirs, SDK_CONV) == plaintext


def test_sdk_decrypts_our_largest_short_prefix_payloads() -> None:
    for plaintext in ("z" * 65_535, "é" * 32_767 + "z", "🦄" * 16_383 + "zzz"):
        assert len(plaintext.encode("utf-8")) == 65_535
        payload = nip44.encrypt(plaintext, SDK_CONV)
        assert nip44.calc_padded_len(65_535) == 65_536
        assert _sdk_decrypt(payload) == plaintext
    largest_sdk = "q" * MAX_RANDOM
    assert nip44.decrypt(_sdk_encrypt(largest_sdk), SDK_CONV) == largest_sdk


def test_same_conversation_key_as_sdk_via_vectorless_roundtrip() -> None:
    # Bob's side computes the key from the other direction: both must agree.
    assert nip44.conversation_key(BOB, ALICE.public_key.hex) == SDK_CONV


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_strings_raise_only_nip44_error(payload: str) -> None:
    with contextlib.suppress(Nip44Error):
        nip44.decrypt(payload, SDK_CONV)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=99, max_size=400), st.sampled_from([0, 1, 2]))
def test_arbitrary_base64_raises_only_nip44_error(raw: bytes, version_choice: int) -> None:
    # Well-formed base64 of plausible length reaches the version, MAC and padding checks.
    data = bytes([version_choice]) + raw[1:]
    payload = base64.b64encode(data).decode()
    try:
        nip44.decrypt(payload, SDK_CONV)
    except Nip44Error:
        pass
    else:  # pragma: no cover - a forged MAC would be a 2^-256 event
        raise AssertionError("random bytes decrypted")


SDK_VALID = nip44.encrypt(
    "flip me: the MAC covers nonce and ciphertext", SDK_CONV, bytes(range(32))
)


VALID_BYTES = base64.b64decode(SDK_VALID)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(VALID_BYTES) * 8 - 1))
def test_any_flipped_bit_is_detected(bit: int) -> None:
    data = bytearray(VALID_BYTES)
    data[bit // 8] ^= 1 << (bit % 8)
    tampered = base64.b64encode(bytes(data)).decode()
    try:
        nip44.decrypt(tampered, SDK_CONV)
    except Nip44Error:
        return
    raise AssertionError(f"bit {bit} flipped without detection")


def test_every_bit_flip_of_a_small_payload_is_detected() -> None:
    # Exhaustive over the whole 131-byte payload (1048 bits), including the version byte.
    for bit in range(len(VALID_BYTES) * 8):
        data = bytearray(VALID_BYTES)
        data[bit // 8] ^= 1 << (bit % 8)
        tampered = base64.b64encode(bytes(data)).decode()
        try:
            nip44.decrypt(tampered, SDK_CONV)
        except Nip44Error:
            continue
        raise AssertionError(f"bit {bit} flipped without detection")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(SDK_VALID) - 1), st.characters(codec="utf-8"))
def test_any_changed_character_is_detected(index: int, char: str) -> None:
    tampered = SDK_VALID[:index] + char + SDK_VALID[index + 1 :]
    if tampered == SDK_VALID:
        return
    try:
        nip44.decrypt(tampered, SDK_CONV)
    except Nip44Error:
        return
    raise AssertionError(f"character {index} changed to {char!r} without detection")
