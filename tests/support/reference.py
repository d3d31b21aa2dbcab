"""Independent references the conformance tests check the library against, written from the
NIP and BIP texts alone: the NIP-01 id and canonical serialization, BIP-340 signing and
verification straight through coincurve (bypassing nostr-buzz's own key and event code), BIP-173
bech32 and NIP-19 TLV; plus the NIP-19 worked example's keys and ``make()``, an event dict signed
by the reference."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import coincurve
import pytest

from nostr_buzz.errors import InvalidEvent
from nostr_buzz.event import Event

NPUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
NSEC_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
SK2_HEX = "0000000000000000000000000000000000000000000000000000000000000003"
AUX0 = bytes(32)
P_FIELD = 2**256 - 2**32 - 977
N_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def ref_pubkey(sk_hex: str) -> str:
    return coincurve.PublicKeyXOnly.from_secret(bytes.fromhex(sk_hex)).format().hex()


def ref_serialize(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ref_id(pubkey: str, created_at: Any, kind: Any, tags: Any, content: Any) -> str:
    data = ref_serialize([0, pubkey, created_at, kind, tags, content]).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def ref_sign(sk_hex: str, id_hex: str, aux: bytes = AUX0) -> str:
    return (
        coincurve.PrivateKey(bytes.fromhex(sk_hex)).sign_schnorr(bytes.fromhex(id_hex), aux).hex()
    )


def ref_verify(pubkey: str, id_hex: str, sig: str) -> bool:
    return coincurve.PublicKeyXOnly(bytes.fromhex(pubkey)).verify(
        bytes.fromhex(sig), bytes.fromhex(id_hex)
    )


def make(
    *,
    sk: str = NSEC_HEX,
    created_at: Any = 1_700_000_000,
    kind: Any = 1,
    tags: Any = (),
    content: Any = "hello",
) -> dict[str, Any]:
    """A correctly signed event as a dict in canonical key order."""
    tags = [] if tags == () else tags
    pubkey = ref_pubkey(sk)
    eid = ref_id(pubkey, created_at, kind, tags, content)
    return {
        "id": eid,
        "pubkey": pubkey,
        "created_at": created_at,
        "kind": kind,
        "tags": tags,
        "content": content,
        "sig": ref_sign(sk, eid),
    }


def reason_of(data: str | bytes) -> str:
    with pytest.raises(InvalidEvent) as info:
        Event.from_json(data)
    return info.value.reason


def dumps(d: Any) -> str:
    return ref_serialize(d)


def _off_curve_x() -> str:
    # Smallest x whose x^3 + 7 is a quadratic non-residue mod p: no point has that x coordinate.
    x = 1
    while pow((x**3 + 7) % P_FIELD, (P_FIELD - 1) // 2, P_FIELD) == 1:
        x += 1
    return f"{x:064x}"


OFF_CURVE = _off_curve_x()


def with_fixed_id(d: dict[str, Any]) -> dict[str, Any]:
    """Recompute the id (not the signature) over d's current fields."""
    out = dict(d)
    out["id"] = ref_id(d["pubkey"], d["created_at"], d["kind"], d["tags"], d["content"])
    return out


# BIP-173 bech32 (checksum constant 1), written from the BIP text.
_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def _polymod(values: list[int]) -> int:
    gen = [0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3]
    chk = 1
    for v in values:
        top = chk >> 25
        chk = ((chk & 0x1FFFFFF) << 5) ^ v
        for i in range(5):
            if (top >> i) & 1:
                chk ^= gen[i]
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def ref_bech32(hrp: str, payload: bytes) -> str:
    acc = bits = 0
    data: list[int] = []
    for byte in payload:
        acc = (acc << 8) | byte
        bits += 8
        while bits >= 5:
            bits -= 5
            data.append((acc >> bits) & 31)
    if bits:
        data.append((acc << (5 - bits)) & 31)
    pm = _polymod([*_hrp_expand(hrp), *data, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(pm >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[d] for d in data + checksum)


def tlv(t: int, value: bytes) -> bytes:
    return bytes([t, len(value)]) + value
