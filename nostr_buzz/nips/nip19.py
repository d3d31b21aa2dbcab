"""NIP-19: bech32-encoded entities (npub, nsec, note, nevent, nprofile; naddr read by
:func:`decode_address`).

The encoding itself, with its strict case, length and checksum rules, is
:mod:`nostr_buzz.bech32`; what NIP-19 adds is checked here: which human-readable parts exist,
their payload sizes and the TLV layout (pynostr's own key parsing accepts an nsec where an
npub is expected).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from nostr_buzz import bech32
from nostr_buzz.errors import Nip19Error, describe_input, looks_secret

MAX_LENGTH = bech32.MAX_LENGTH  # re-exported: the longest NIP-19 string read

_BARE = ("npub", "nsec", "note")
_TLV = ("nevent", "nprofile")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")

# TLV types (NIP-19).
_SPECIAL, _RELAY, _AUTHOR, _KIND = 0, 1, 2, 3


class EventPointer(NamedTuple):
    """Decoded ``nevent``: an event id plus optional hints."""

    id: str
    relays: tuple[str, ...] = ()
    author: str | None = None
    kind: int | None = None


class ProfilePointer(NamedTuple):
    """Decoded ``nprofile``: a public key plus relay hints."""

    pubkey: str
    relays: tuple[str, ...] = ()


class AddressPointer(NamedTuple):
    """Decoded ``naddr``: an addressable event's kind, author and identifier, plus relay hints."""

    kind: int
    pubkey: str
    identifier: str
    relays: tuple[str, ...] = ()

    @property
    def coordinate(self) -> str:
        """``<kind>:<pubkey>:<d tag>``, as ``a`` and ``q`` tags carry it."""
        return f"{self.kind}:{self.pubkey}:{self.identifier}"


Decoded = str | EventPointer | ProfilePointer


def _to_bytes32(value: str | bytes, what: str) -> bytes:
    if isinstance(value, bytes):
        if len(value) != 32:
            raise Nip19Error(f"{what} must be 32 bytes, got {len(value)}")
        return value
    if isinstance(value, str) and _HEX64.fullmatch(value):
        return bytes.fromhex(value)
    raise Nip19Error(f"{what} must be 64 hex characters or 32 bytes")


def encode(
    hrp: str,
    value: str | bytes,
    *,
    relays: tuple[str, ...] | list[str] = (),
    author: str | bytes | None = None,
    kind: int | None = None,
) -> str:
    """Encode a 32-byte value (64-hex or bytes) as ``hrp``; TLV hints for nevent/nprofile."""
    raw = _to_bytes32(value, "value")
    if hrp in _BARE:
        if relays or author is not None or kind is not None:
            raise Nip19Error(f"{hrp} carries no relay, author or kind hints")
        return bech32.encode(hrp, raw)
    if hrp not in _TLV:
        raise Nip19Error(f"unsupported NIP-19 prefix {hrp!r}")
    tlv = bytearray([_SPECIAL, 32]) + raw
    if isinstance(relays, str):
        raise Nip19Error("relays must be a list of relay URLs, not one string")
    for relay in relays:
        if not isinstance(relay, str):
            raise Nip19Error("a relay hint must be a string")
        try:
            data = relay.encode("utf-8")
        except UnicodeEncodeError:
            raise Nip19Error("a relay hint must be encodable as UTF-8") from None
        if not data or len(data) > 255:
            raise Nip19Error("a relay hint must be 1 to 255 bytes of UTF-8")
        tlv += bytes([_RELAY, len(data)]) + data
    if hrp == "nprofile" and (author is not None or kind is not None):
        raise Nip19Error("nprofile carries no author or kind")
    if author is not None:
        tlv += bytes([_AUTHOR, 32]) + _to_bytes32(author, "author")
    if kind is not None:
        if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind < 2**32:
            raise Nip19Error("kind must be an integer from 0 to 2^32-1")
        tlv += bytes([_KIND, 4]) + kind.to_bytes(4, "big")
    encoded = bech32.encode(hrp, bytes(tlv))
    # Never produce what decode() refuses: too many relay hints would break the round trip.
    if len(encoded) > MAX_LENGTH:
        raise Nip19Error(f"{hrp} would be longer than {MAX_LENGTH} characters: fewer relay hints")
    return encoded


def decode(s: str) -> tuple[str, Decoded]:
    """Decode a NIP-19 string into ``(hrp, value)``.

    ``value`` is a 64-hex str for npub/nsec/note, an :class:`EventPointer` for nevent and a
    :class:`ProfilePointer` for nprofile.  Unknown TLV types are ignored.
    """
    hrp, raw = bech32.decode(s)
    if hrp in _BARE:
        if len(raw) != 32:
            raise Nip19Error(f"{hrp} must hold 32 bytes, got {len(raw)}")
        return hrp, raw.hex()
    if hrp == "nevent":
        return hrp, EventPointer(*_read_tlv(raw, "nevent"))
    if hrp == "nprofile":
        special, relays, _, _ = _read_tlv(raw, "nprofile")
        return hrp, ProfilePointer(special, relays)
    raise Nip19Error(f"unsupported NIP-19 prefix {hrp!r}")


def _records(raw: bytes, hrp: str) -> list[tuple[int, bytes]]:
    """The TLV records of ``raw``, in order."""
    records: list[tuple[int, bytes]] = []
    i = 0
    while i < len(raw):
        if i + 2 > len(raw):
            raise Nip19Error(f"{hrp}: truncated TLV record")
        t, length = raw[i], raw[i + 1]
        value = raw[i + 2 : i + 2 + length]
        if len(value) != length:
            raise Nip19Error(f"{hrp}: TLV record runs past the end")
        i += 2 + length
        records.append((t, value))
    return records


def decode_address(s: str) -> AddressPointer:
    """Decode an ``naddr``: its identifier (TLV 0, UTF-8), author (TLV 2, 32 bytes) and kind
    (TLV 3, 4 bytes) are required, relay hints (TLV 1) optional; the first of each counts."""
    hrp, raw = bech32.decode(s)
    if hrp != "naddr":
        raise Nip19Error(f"expected naddr, got {hrp!r}")
    found: dict[int, list[bytes]] = {}
    for t, value in _records(raw, hrp):
        found.setdefault(t, []).append(value)
    author, kind = found.get(_AUTHOR, [b""])[0], found.get(_KIND, [b""])[0]
    if _SPECIAL not in found or len(author) != 32 or len(kind) != 4:
        raise Nip19Error("naddr: needs an identifier, a 32-byte author and a 4-byte kind")
    try:
        identifier = found[_SPECIAL][0].decode("utf-8")
        relays = tuple(r.decode("utf-8") for r in found.get(_RELAY, []))
    except UnicodeDecodeError:
        raise Nip19Error("naddr: a text record is not UTF-8") from None
    return AddressPointer(int.from_bytes(kind, "big"), author.hex(), identifier, relays)


def _read_tlv(raw: bytes, hrp: str) -> tuple[str, tuple[str, ...], str | None, int | None]:
    special: str | None = None
    relays: list[str] = []
    author: str | None = None
    kind: int | None = None
    for t, value in _records(raw, hrp):
        length = len(value)
        if t == _SPECIAL:
            if length != 32:
                raise Nip19Error(f"{hrp}: the id/pubkey record must be 32 bytes")
            if special is None:
                special = value.hex()
        elif t == _RELAY:
            try:
                relays.append(value.decode("utf-8"))
            except UnicodeDecodeError:
                raise Nip19Error(f"{hrp}: relay hint is not UTF-8") from None
        elif t == _AUTHOR and hrp == "nevent":
            if length != 32:
                raise Nip19Error(f"{hrp}: the author record must be 32 bytes")
            if author is None:
                author = value.hex()
        elif t == _KIND and hrp == "nevent":
            if length != 4:
                raise Nip19Error(f"{hrp}: the kind record must be 4 bytes")
            if kind is None:
                kind = int.from_bytes(value, "big")
        # Unknown TLV types are ignored (NIP-19).
    if special is None:
        raise Nip19Error(f"{hrp}: missing the id/pubkey record")
    return special, tuple(relays), author, kind


class EventRef(NamedTuple):
    """A parsed event reference: the id plus any relay hints an nevent carried."""

    id: str
    relays: tuple[str, ...] = ()


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def parse_event_ref(text: str) -> EventRef:
    """An event reference as people write one: 64 hex digits (either case), ``note1…`` or
    ``nevent1…``; :class:`Nip19Error` says what else it was.

    The nevent's author and kind are only hints and are not returned: they never narrow a query.
    """
    s = text.strip()
    if _HEX64.fullmatch(s):
        return EventRef(s.lower())
    if looks_secret(s):
        raise Nip19Error("expected an event id; the value looks like a secret key (not shown)")
    lowered = s.lower()
    for hrp in ("npub1", "nprofile1"):
        if lowered.startswith(hrp):
            raise Nip19Error(f"expected an event id (hex, note1… or nevent1…), got {hrp[:-1]}")
    if lowered.startswith(("note1", "nevent1")):
        try:
            kind, value = decode(s)
        except Nip19Error as exc:
            raise Nip19Error(f"invalid event reference: {exc}") from None
        if isinstance(value, EventPointer):
            return EventRef(value.id, value.relays)
        if kind == "note" and isinstance(value, str):
            return EventRef(value)
    shown = describe_input(s, limit=40, hex_may_be_secret=True)
    raise Nip19Error(f"{shown} is not an event id (64 hex characters, note1… or nevent1…)")
