"""NIP-44 v2 against every case of the official vectors (fixtures/vectors)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import pickle
from typing import Any

import pytest

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
