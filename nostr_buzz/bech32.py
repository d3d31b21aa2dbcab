"""Bech32 (BIP-173) as Nostr writes it: the encoding under NIP-19's entities
(:mod:`nostr_buzz.nips.nip19`) and the key forms ``npub``/``nsec`` (:mod:`nostr_buzz.keys`).

The checksum and bit conversion come from pynostr; the rules Nostr adds are checked here: no
length cap from BIP-173 (NIP-19 entities carry relay hints) but :data:`MAX_LENGTH`, one case
only, the plain Bech32 constant (not Bech32m) and exact padding.  An error never shows the data
part of what it was given: it may be a secret key."""

from __future__ import annotations

from pynostr import bech32 as _bech32

from nostr_buzz.errors import SECRET_HINT, Nip19Error, looks_secret

__all__ = ["MAX_LENGTH", "decode", "describe", "encode"]

#: Longer strings are refused before any decoding work (NIP-19 has no 90-character cap).
MAX_LENGTH = 5000


def encode(hrp: str, payload: bytes) -> str:
    """``payload`` as Bech32 text under the human-readable part ``hrp``."""
    words = _bech32.convertbits(list(payload), 8, 5, True)
    return str(_bech32.bech32_encode(hrp, words, _bech32.Encoding.BECH32))


def describe(s: str) -> str:
    """Name the input by its prefix only: its data part may be a secret (nsec or raw hex)."""
    if looks_secret(s):
        return SECRET_HINT
    prefix, sep, _ = s.strip().lower().rpartition("1")
    if sep and prefix.isascii() and prefix.isalpha() and len(prefix) <= 10:
        return f"(prefix {prefix!r})"
    return "(input not shown)"


def decode(s: str) -> tuple[str, bytes]:
    """``(hrp, payload)`` of Bech32 text, or :class:`Nip19Error` saying what was wrong."""
    if not isinstance(s, str):
        raise Nip19Error("expected a bech32 string")
    if len(s) > MAX_LENGTH:
        raise Nip19Error(f"bech32 string longer than {MAX_LENGTH} characters")
    if s.lower() != s and s.upper() != s:
        raise Nip19Error("bech32 string mixes upper and lower case")
    hrp, words, spec = _bech32.bech32_decode(s)
    if hrp is None or spec != _bech32.Encoding.BECH32:
        raise Nip19Error(f"not a valid bech32 string (bad characters or checksum): {describe(s)}")
    raw = _bech32.convertbits(words, 5, 8, False)
    if raw is None:
        raise Nip19Error("bech32 data has invalid padding")
    return str(hrp), bytes(raw)
