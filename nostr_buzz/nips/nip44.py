"""NIP-44 v2: versioned, padded, authenticated encryption between two Nostr keys; NIP-AM
metrics (nips/NIP-AM.md) are encrypted with it.

Pure apart from one documented exception: when no nonce is given, :func:`encrypt` takes 32 bytes
from the OS CSPRNG.  Every failure, whatever the input, raises :class:`Nip44Error`.

This implements the current NIP text including its long-message extension: plaintexts of
65,536 bytes or more carry a 6-byte length prefix (``00 00`` + u32 big-endian).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import importlib
import os
import re
import struct
import threading
from collections import OrderedDict
from typing import Any, Final, NamedTuple

from coincurve import PublicKey as _CurvePoint
from coincurve.context import GLOBAL_CONTEXT

from nostr_buzz.errors import Nip44Error
from nostr_buzz.keys import PublicKey, SecretKey

__all__ = [
    "MAX_PAYLOAD_CHARS",
    "MAX_PLAINTEXT",
    "MessageKeys",
    "Nip44Error",
    "calc_padded_len",
    "conversation_key",
    "decrypt",
    "encrypt",
    "get_message_keys",
]

VERSION: Final = 2
#: Library cap on the plaintext length in bytes (the NIP allows up to 2^32 - 1).
MAX_PLAINTEXT: Final = 16 * 1024 * 1024
_SALT: Final = b"nip44-v2"
_MIN_PAYLOAD_CHARS: Final = 132
_MIN_DECODED: Final = 99  # version 1 + nonce 32 + (prefix 2 + minimum padding 32) + mac 32
_EXTENDED_FROM: Final = 65536
_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")


def calc_padded_len(n: int) -> int:
    """Padded length of an ``n``-byte plaintext: power-of-two chunks, at least 32."""
    if type(n) is not int or not 1 <= n <= MAX_PLAINTEXT:
        raise Nip44Error(f"plaintext length must be 1 to {MAX_PLAINTEXT} bytes, got {n!r}")
    if n <= 32:
        return 32
    next_power = 1 << (n - 1).bit_length()
    chunk = 32 if next_power <= 256 else next_power // 8
    return chunk * ((n - 1) // chunk + 1)


#: The longest payload (base64 characters) a plaintext of ``MAX_PLAINTEXT`` bytes can produce.
MAX_PAYLOAD_CHARS: Final = 4 * -(-(65 + 6 + calc_padded_len(MAX_PLAINTEXT)) // 3)


# --- conversation key -------------------------------------------------------------------------

# coincurve's cffi binding has no type stubs; it is used only for the raw-x ECDH below.
_secp: Any = importlib.import_module("coincurve._libsecp256k1")


def _copy_x_impl(output: Any, x32: Any, y32: Any, data: Any) -> int:
    # libsecp256k1's ECDH hashes the shared point by default; NIP-44 wants the bare x.
    _secp.ffi.memmove(output, x32, 32)
    return 1


_copy_x: Any = _secp.ffi.callback(
    "int (unsigned char *, const unsigned char *, const unsigned char *, void *)", _copy_x_impl
)


def _secret_bytes(secret: object) -> bytes:
    if isinstance(secret, SecretKey):
        raw = bytes(secret.coincurve.secret)
    elif isinstance(secret, str) and _HEX64.fullmatch(secret):
        raw = bytes.fromhex(secret)
    else:
        raise Nip44Error("secret must be a SecretKey or 64 hex characters")
    if not _secp.lib.secp256k1_ec_seckey_verify(GLOBAL_CONTEXT.ctx, raw):
        raise Nip44Error("secret key is zero or not below the secp256k1 group order")
    return raw


def _public_bytes(public: object) -> bytes:
    if isinstance(public, PublicKey):
        return public.raw
    if isinstance(public, str) and _HEX64.fullmatch(public):
        return bytes.fromhex(public)
    raise Nip44Error("public key must be a PublicKey or 64 hex characters")


def _shared_x(secret: bytes, public: bytes) -> bytes:
    """Constant-time ECDH (libsecp256k1) returning the unhashed x coordinate."""
    try:
        point = _CurvePoint(b"\x02" + public)  # x-only key lifted with even y
    except (ValueError, TypeError):
        raise Nip44Error("public key is not a point on the secp256k1 curve") from None
    out = _secp.ffi.new("unsigned char [32]")
    ok = _secp.lib.secp256k1_ecdh(
        GLOBAL_CONTEXT.ctx, out, point.public_key, secret, _copy_x, _secp.ffi.NULL
    )
    if ok != 1:
        raise Nip44Error("ECDH failed: invalid secret key")
    return bytes(_secp.ffi.buffer(out, 32))


class _ConversationKeyCache:
    """A small thread-safe LRU of conversation keys.

    Entries are keyed by (secret, peer) bytes, which is why the object shows only its size.
    """

    __slots__ = ("_entries", "_lock", "_max")

    def __init__(self, max_entries: int = 256) -> None:
        self._entries: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries

    def get(self, key: tuple[bytes, bytes]) -> bytes | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: tuple[bytes, bytes], value: bytes) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<conversation key cache: {len(self._entries)} of {self._max} entries>"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("the conversation key cache is not picklable")


_cache = _ConversationKeyCache()


def conversation_key(secret: SecretKey | str, public: PublicKey | str) -> bytes:
    """The 32-byte NIP-44 v2 conversation key; symmetric: conv(a, B) == conv(b, A).

    ``secret`` is a :class:`SecretKey` or 64 hex characters, ``public`` a :class:`PublicKey` or
    64 hex characters (x-only).  Anything invalid raises :class:`Nip44Error`.
    """
    sec = _secret_bytes(secret)
    pub = _public_bytes(public)
    cached = _cache.get((sec, pub))
    if cached is not None:
        return cached
    # HKDF-extract(salt, ikm) is HMAC(salt, ikm).
    key = hmac.digest(_SALT, _shared_x(sec, pub), "sha256")
    _cache.put((sec, pub), key)
    return key


# --- message keys, padding, encrypt/decrypt ----------------------------------------------------


class MessageKeys(NamedTuple):
    """The per-message keys NIP-44 v2 derives from the conversation key and the nonce (their
    repr never shows them)."""

    chacha_key: bytes
    chacha_nonce: bytes
    hmac_key: bytes

    def __repr__(self) -> str:
        return "MessageKeys(<hidden>)"


def _check_key(key: object) -> bytes:
    if not isinstance(key, bytes) or len(key) != 32:
        raise Nip44Error("conversation key must be 32 bytes")
    return key


def _check_nonce(nonce: object) -> bytes:
    if not isinstance(nonce, bytes) or len(nonce) != 32:
        raise Nip44Error("nonce must be 32 bytes")
    return nonce


def get_message_keys(key: bytes, nonce: bytes) -> MessageKeys:
    """HKDF-expand(SHA-256, prk=conversation key, info=nonce, L=76), split 32/12/32."""
    prk = _check_key(key)
    info = _check_nonce(nonce)
    okm = b""
    block = b""
    for counter in (1, 2, 3):  # 3 blocks of 32 bytes cover L = 76
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        okm += block
    return MessageKeys(okm[0:32], okm[32:44], okm[44:76])


def _chacha20(key: bytes, nonce12: bytes, data: bytes) -> bytes:
    # The cipher's library loads with the first payload, not with this module (which the gate,
    # the signers and the config import for their types).
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    # cryptography's ChaCha20 takes a 16-byte nonce: 4-byte little-endian block counter (0,
    # as in RFC 8439 for NIP-44) followed by the 12-byte nonce.
    cipher = Cipher(algorithms.ChaCha20(key, b"\x00\x00\x00\x00" + nonce12), mode=None)
    encryptor = cipher.encryptor()
    return encryptor.update(data) + encryptor.finalize()


def _pad(plaintext: bytes) -> bytes:
    n = len(plaintext)
    padded_len = calc_padded_len(n)
    prefix = struct.pack(">H", n) if n < _EXTENDED_FROM else struct.pack(">HI", 0, n)
    return prefix + plaintext + bytes(padded_len - n)


def _unpad(padded: bytes) -> bytes:
    if len(padded) < 2:
        raise Nip44Error("invalid padding: too short")
    (n,) = struct.unpack_from(">H", padded, 0)
    prefix = 2
    if n == 0:
        if len(padded) < 6:
            raise Nip44Error("invalid padding: truncated extended length prefix")
        (n,) = struct.unpack_from(">I", padded, 2)
        prefix = 6
        if n < _EXTENDED_FROM:
            raise Nip44Error("invalid padding: extended prefix used for a short plaintext")
    if n > MAX_PLAINTEXT:
        raise Nip44Error(f"invalid padding: plaintext length above {MAX_PLAINTEXT} bytes")
    if len(padded) != prefix + calc_padded_len(n):
        raise Nip44Error("invalid padding: length does not match the padded size")
    return padded[prefix : prefix + n]


def encrypt(plaintext: str, key: bytes, nonce: bytes | None = None) -> str:
    """Encrypt to a base64 NIP-44 v2 payload.

    ``nonce`` pins the 32-byte nonce (tests only); by default it comes from the OS CSPRNG.
    """
    if not isinstance(plaintext, str):
        raise Nip44Error("plaintext must be a str")
    conv = _check_key(key)
    nonce = os.urandom(32) if nonce is None else _check_nonce(nonce)
    try:
        data = plaintext.encode("utf-8")
    except UnicodeEncodeError:
        raise Nip44Error("plaintext is not encodable as UTF-8 (lone surrogate)") from None
    keys = get_message_keys(conv, nonce)
    ciphertext = _chacha20(keys.chacha_key, keys.chacha_nonce, _pad(data))
    mac = hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    return base64.b64encode(bytes([VERSION]) + nonce + ciphertext + mac).decode("ascii")


def _strict_b64decode(payload: str) -> bytes:
    """Padding required, no whitespace or foreign characters, canonical encoding only."""
    try:
        raw = payload.encode("ascii")
        decoded = base64.b64decode(raw, validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raise Nip44Error("invalid base64") from None
    # b64decode accepts non-zero unused bits in the last group; re-encoding rejects them.
    if base64.b64encode(decoded) != raw:
        raise Nip44Error("invalid base64: not canonical")
    return decoded


def decrypt(payload: str, key: bytes) -> str:
    """Decrypt a NIP-44 v2 payload; any problem raises :class:`Nip44Error`."""
    if not isinstance(payload, str):
        raise Nip44Error("payload must be a str")
    conv = _check_key(key)
    if not payload:
        raise Nip44Error("empty payload")
    if payload[0] == "#":
        raise Nip44Error("unsupported encryption version (payload starts with '#')")
    if not _MIN_PAYLOAD_CHARS <= len(payload) <= MAX_PAYLOAD_CHARS:
        raise Nip44Error(
            f"invalid payload length {len(payload)} "
            f"(expected {_MIN_PAYLOAD_CHARS} to {MAX_PAYLOAD_CHARS} characters)"
        )
    data = _strict_b64decode(payload)
    if len(data) < _MIN_DECODED:
        raise Nip44Error(f"invalid decoded length {len(data)} (expected at least {_MIN_DECODED})")
    if data[0] != VERSION:
        raise Nip44Error(f"unsupported encryption version {data[0]}")
    nonce = data[1:33]
    ciphertext = data[33:-32]
    mac = data[-32:]
    keys = get_message_keys(conv, nonce)
    expected = hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    if not hmac.compare_digest(expected, mac):
        raise Nip44Error("invalid MAC")
    plaintext = _unpad(_chacha20(keys.chacha_key, keys.chacha_nonce, ciphertext))
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise Nip44Error("plaintext is not valid UTF-8") from None
