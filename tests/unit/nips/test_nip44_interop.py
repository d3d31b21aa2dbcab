"""NIP-44 v2 interoperability with rust-nostr (nostr-sdk) and property tests of decrypt."""

from __future__ import annotations

import base64
import contextlib

import nostr_sdk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import Nip44Error
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44

ALICE = SecretKey.from_str("5c0c523f52a5b6fad39ed2403092df8cebc36318b39383bca6c00808626fab3a")
BOB = SecretKey.from_str("4b22aa260e4acb7021e32f38a6cdf4b673c6a277755bfce287e370c924dc936d")
CONV = nip44.conversation_key(ALICE, BOB.public_key)

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
    ours = nip44.encrypt(plaintext, CONV)
    assert _sdk_decrypt(ours) == plaintext
    theirs = _sdk_encrypt(plaintext)
    assert nip44.decrypt(theirs, CONV) == plaintext


def test_sdk_decrypts_our_largest_short_prefix_payloads() -> None:
    for plaintext in ("z" * 65_535, "é" * 32_767 + "z", "🦄" * 16_383 + "zzz"):
        assert len(plaintext.encode("utf-8")) == 65_535
        payload = nip44.encrypt(plaintext, CONV)
        assert nip44.calc_padded_len(65_535) == 65_536
        assert _sdk_decrypt(payload) == plaintext
    largest_sdk = "q" * MAX_RANDOM
    assert nip44.decrypt(_sdk_encrypt(largest_sdk), CONV) == largest_sdk


def test_same_conversation_key_as_sdk_via_vectorless_roundtrip() -> None:
    # Bob's side computes the key from the other direction: both must agree.
    assert nip44.conversation_key(BOB, ALICE.public_key.hex) == CONV


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_strings_raise_only_nip44_error(payload: str) -> None:
    with contextlib.suppress(Nip44Error):
        nip44.decrypt(payload, CONV)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=99, max_size=400), st.sampled_from([0, 1, 2]))
def test_arbitrary_base64_raises_only_nip44_error(raw: bytes, version_choice: int) -> None:
    # Well-formed base64 of plausible length reaches the version, MAC and padding checks.
    data = bytes([version_choice]) + raw[1:]
    payload = base64.b64encode(data).decode()
    try:
        nip44.decrypt(payload, CONV)
    except Nip44Error:
        pass
    else:  # pragma: no cover - a forged MAC would be a 2^-256 event
        raise AssertionError("random bytes decrypted")


VALID = nip44.encrypt("flip me: the MAC covers nonce and ciphertext", CONV, bytes(range(32)))
VALID_BYTES = base64.b64decode(VALID)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(VALID_BYTES) * 8 - 1))
def test_any_flipped_bit_is_detected(bit: int) -> None:
    data = bytearray(VALID_BYTES)
    data[bit // 8] ^= 1 << (bit % 8)
    tampered = base64.b64encode(bytes(data)).decode()
    try:
        nip44.decrypt(tampered, CONV)
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
            nip44.decrypt(tampered, CONV)
        except Nip44Error:
            continue
        raise AssertionError(f"bit {bit} flipped without detection")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(VALID) - 1), st.characters(codec="utf-8"))
def test_any_changed_character_is_detected(index: int, char: str) -> None:
    tampered = VALID[:index] + char + VALID[index + 1 :]
    if tampered == VALID:
        return
    try:
        nip44.decrypt(tampered, CONV)
    except Nip44Error:
        return
    raise AssertionError(f"character {index} changed to {char!r} without detection")
