"""The 19 official BIP-340 vectors through our keys (coincurve underneath)."""

from __future__ import annotations

import csv
from typing import NamedTuple

import pytest

from nostr_buzz.errors import BuzzError, InvalidEvent, InvalidKey
from nostr_buzz.event import Event, compute_id
from nostr_buzz.keys import PublicKey, SecretKey, verify_schnorr
from tests.support.data import VECTORS


class Vector(NamedTuple):
    index: int
    secret: str
    public: bytes
    aux: bytes
    message: bytes
    signature: bytes
    valid: bool
    comment: str


def _load() -> list[Vector]:
    # The file has CRLF line endings: csv needs newline="".
    with (VECTORS / "bip340-test-vectors.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [
        Vector(
            int(r["index"]),
            r["secret key"],
            bytes.fromhex(r["public key"]),
            bytes.fromhex(r["aux_rand"]),
            bytes.fromhex(r["message"]),
            bytes.fromhex(r["signature"]),
            r["verification result"] == "TRUE",
            r["comment"],
        )
        for r in rows
    ]


VECTORS_340 = _load()
BAD_KEY_VECTORS = (5, 14)


def test_all_nineteen_vectors_are_loaded() -> None:
    assert [v.index for v in VECTORS_340] == list(range(19))
    assert all("\r" not in v.comment for v in VECTORS_340)


@pytest.mark.parametrize("v", VECTORS_340, ids=lambda v: f"vector{v.index}")
def test_vector_verdict(v: Vector) -> None:
    # A plain bool for every vector, including the two whose public key is invalid.
    assert verify_schnorr(v.public, v.message, v.signature) is v.valid


@pytest.mark.parametrize("v", VECTORS_340, ids=lambda v: f"vector{v.index}")
def test_vector_verdict_through_public_key(v: Vector) -> None:
    if v.index in BAD_KEY_VECTORS:
        # Our choice: a key off the curve is refused when parsed, with the typed InvalidKey.
        with pytest.raises(InvalidKey):
            PublicKey(v.public)
        with pytest.raises(InvalidKey):
            PublicKey.from_str(v.public.hex())
        return
    assert PublicKey(v.public).verify(v.signature, v.message) is v.valid


@pytest.mark.parametrize("index", BAD_KEY_VECTORS)
def test_invalid_public_key_in_an_event_is_a_plain_bad_pubkey(index: int) -> None:
    v = VECTORS_340[index]
    pubkey = v.public.hex()
    event_id = compute_id(pubkey, 1, 1, (), "")
    wire = (
        f'{{"id":"{event_id}","pubkey":"{pubkey}","created_at":1,"kind":1,"tags":[],'
        f'"content":"","sig":"{v.signature.hex()}"}}'
    )
    with pytest.raises(InvalidEvent) as info:
        Event.from_json(wire)
    assert info.value.reason == "bad_pubkey"


@pytest.mark.parametrize("v", VECTORS_340[:4], ids=lambda v: f"vector{v.index}")
def test_signing_with_given_aux_randomness_gives_expected_signature(v: Vector) -> None:
    secret = SecretKey(bytes.fromhex(v.secret))
    assert secret.public_key.raw == v.public
    assert secret.sign_schnorr(v.message, v.aux) == v.signature


def test_every_vector_with_a_secret_key_derives_its_public_key() -> None:
    with_secret = [v for v in VECTORS_340 if v.secret]
    assert [v.index for v in with_secret] == [0, 1, 2, 3, 15, 16, 17, 18]
    for v in with_secret:
        assert SecretKey.from_str(v.secret).public_key.raw == v.public


def test_sign_schnorr_refuses_non_32_byte_message_or_aux() -> None:
    secret = SecretKey(bytes.fromhex(VECTORS_340[1].secret))
    with pytest.raises(BuzzError):
        secret.sign_schnorr(b"")
    with pytest.raises(BuzzError):
        secret.sign_schnorr(bytes(32), b"\x00" * 31)


def test_verify_with_a_wrong_length_signature_is_false_not_an_error() -> None:
    v = VECTORS_340[1]
    key = PublicKey(v.public)
    assert key.verify(v.signature[:-1], v.message) is False
    assert key.verify(b"", v.message) is False
    assert verify_schnorr(v.public[:31], v.message, v.signature) is False
