"""Nostr keys: secp256k1 secret keys and x-only (BIP-340) public keys.

A secret key is never shown: its ``repr``/``str`` hide it, and no error message repeats the
input it was parsed from.
"""

from __future__ import annotations

import hmac
import re
from typing import Final, TypeVar

from coincurve import PrivateKey, PublicKeyXOnly

from nostr_buzz import bech32
from nostr_buzz.errors import BuzzError, InvalidKey, Nip19Error

_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")


def _hrp_of(text: str) -> str | None:
    head = text.lower()
    for hrp in ("npub", "nsec", "note", "nevent", "nprofile"):
        if head.startswith(hrp + "1"):
            return hrp
    return None


class PublicKey:
    """An x-only secp256k1 public key that is known to be on the curve."""

    __slots__ = ("_raw", "_xonly")

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes) or len(raw) != 32:
            raise InvalidKey("a public key is 32 bytes")
        try:
            self._xonly = PublicKeyXOnly(raw)
        except (ValueError, TypeError):
            raise InvalidKey("public key is not a point on the secp256k1 curve") from None
        self._raw = raw

    @classmethod
    def from_str(cls, text: str) -> PublicKey:
        """Parse a 64-hex (either case) or ``npub1…`` public key."""
        return cls(_key_bytes(text, "public", "npub"))

    @property
    def raw(self) -> bytes:
        return self._raw

    @property
    def hex(self) -> str:
        return self._raw.hex()

    @property
    def bech32(self) -> str:
        return bech32.encode("npub", self._raw)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """BIP-340 verification; any failure inside the backend is a plain ``False``."""
        try:
            return bool(self._xonly.verify(signature, message))
        except (ValueError, TypeError):
            return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"PublicKey({self.hex})"

    def __str__(self) -> str:
        return self.hex


class SecretKey:
    """A secp256k1 secret key.  Its value never appears in a repr, str or error."""

    __slots__ = ("_key", "_public")

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes) or len(raw) != 32:
            raise InvalidKey("a secret key is 32 bytes")
        try:
            self._key = PrivateKey(raw)
        except (ValueError, TypeError):
            raise InvalidKey("secret key is out of range for secp256k1") from None
        self._public = PublicKey(self._key.public_key_xonly.format())

    @classmethod
    def generate(cls) -> SecretKey:
        """A new key from the OS CSPRNG."""
        return cls(PrivateKey().secret)

    @classmethod
    def from_str(cls, text: str) -> SecretKey:
        """Parse a 64-hex (either case) or ``nsec1…`` secret key."""
        return cls(_key_bytes(text, "secret", "nsec"))

    @property
    def public_key(self) -> PublicKey:
        return self._public

    @property
    def hex(self) -> str:
        return self._key.secret.hex()

    @property
    def bech32(self) -> str:
        return bech32.encode("nsec", self._key.secret)

    def sign_schnorr(self, message: bytes, aux_rand: bytes | None = None) -> bytes:
        """BIP-340 signature of a 32-byte message; ``aux_rand`` defaults to OS randomness.

        ``aux_rand`` must be 32 bytes when given (coincurve would read ``None`` as "no
        randomness" and ``b""`` as "fresh randomness"; here ``None`` always means fresh).
        """
        if not isinstance(message, bytes) or len(message) != 32:
            raise BuzzError("a BIP-340 signature here covers a 32-byte message")
        if aux_rand is None:
            return bytes(self._key.sign_schnorr(message))
        if not isinstance(aux_rand, bytes) or len(aux_rand) != 32:
            raise BuzzError("aux_rand must be 32 bytes")
        return bytes(self._key.sign_schnorr(message, aux_rand))

    @property
    def coincurve(self) -> PrivateKey:
        """The underlying coincurve key, for ECDH (NIP-44)."""
        return self._key

    def __eq__(self, other: object) -> bool:
        # Constant-time: comparing secrets must not leak where they differ.
        return isinstance(other, SecretKey) and hmac.compare_digest(
            other._key.secret, self._key.secret
        )

    def __hash__(self) -> int:
        return hash(self._public)

    def __repr__(self) -> str:
        return f"SecretKey(public_key={self._public.hex}, secret=<hidden>)"

    def __str__(self) -> str:
        return "<secret key hidden>"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("secret keys are not picklable")


def verify_schnorr(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """BIP-340 verdict for raw bytes: a key that is not on the curve is a plain ``False``.

    Parsing a :class:`PublicKey` rejects such a key with :class:`InvalidKey`; a verifier that
    just wants a verdict (as in the BIP-340 vectors) gets "invalid", not an exception.
    """
    try:
        key = PublicKey(public_key)
    except InvalidKey:
        return False
    return key.verify(signature, message)


def _key_bytes(text: str, what: str, expected_hrp: str) -> bytes:
    """The 32 bytes of a key written as 64 hex digits (either case) or as bech32 with
    ``expected_hrp``.  Errors never quote the input: it may be a secret key."""
    if not isinstance(text, str):
        raise InvalidKey(f"expected a {what} key as a string")
    s = text.strip()
    if _HEX64.fullmatch(s):
        return bytes.fromhex(s)
    hrp = _hrp_of(s)
    if hrp is None:
        raise InvalidKey(f"expected a {what} key as 64 hex characters or {expected_hrp}1…")
    if hrp != expected_hrp:
        raise InvalidKey(f"expected {expected_hrp}, got {hrp}")
    try:
        _, raw = bech32.decode(s)
    except Nip19Error:
        raw = b""
    if len(raw) != 32:
        # The decoder's message could quote the input: say only what kind of thing failed.
        raise InvalidKey(f"invalid {expected_hrp} (bad characters, checksum or length)")
    return raw


_Key = TypeVar("_Key", "SecretKey", "PublicKey")


def _as_key(value: object, cls: type[_Key], what: str, forms: str) -> _Key:
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls.from_str(value)
        except InvalidKey as exc:
            raise InvalidKey(f"{what}: {exc}") from None
    raise InvalidKey(f"{what} must be a {cls.__name__}, {forms}, not {type(value).__name__}")


def as_secret_key(value: SecretKey | str, what: str = "secret key") -> SecretKey:
    """``value`` as a :class:`SecretKey`: one already, or its 64-hex / ``nsec1…`` text.
    Anything else raises :class:`InvalidKey` naming ``what`` (never the value)."""
    return _as_key(value, SecretKey, what, "64 hex characters or nsec1…")


def as_public_key(value: PublicKey | str, what: str = "public key") -> PublicKey:
    """``value`` as a :class:`PublicKey`: one already, or its 64-hex / ``npub1…`` text.
    Anything else raises :class:`InvalidKey` naming ``what``."""
    return _as_key(value, PublicKey, what, "64 hex characters or npub1…")
