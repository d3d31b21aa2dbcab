"""NIP-01 events: strict parsing, canonical serialization, signing and verification.

An :class:`Event` is always verified.  Constructing one (directly, through
:meth:`Event.from_json` or :func:`sign_event`) runs the checks of docs/events.md cheap-first:
structure, then the recomputed id, then the public key, then the BIP-340 signature.  The struct
is frozen and its tags are tuples, so a verified event cannot be altered afterwards.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextvars import ContextVar
from typing import Any, Final

import msgspec

from nostr_buzz.errors import InvalidEvent
from nostr_buzz.keys import PublicKey, SecretKey, as_secret_key
from nostr_buzz.text.unicode import is_utf8_encodable, utf8_document

_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_HEX128: Final = re.compile(r"[0-9a-f]{128}")
#: Past 2^53 - 1 a JavaScript client cannot hold the timestamp exactly (docs/events.md).
MAX_CREATED_AT: Final = 2**53
MAX_KIND: Final = 65535

Tags = tuple[tuple[str, ...], ...]

# Set only while sign_event constructs the Event it has just signed and verified.
_JUST_SIGNED: ContextVar[bool] = ContextVar("nostr_buzz_just_signed", default=False)
# Set only while from_wire constructs an Event from a WireEvent, whose types msgspec has
# already checked (str fields, int fields, tags as tuples of str).
_TYPED: ContextVar[bool] = ContextVar("nostr_buzz_typed", default=False)


class UnsignedEvent(msgspec.Struct, frozen=True):
    """The fields of a NIP-01 event but its signature: what the id commits to, and the id.
    A NIP-59 rumor is one; a signed event adds ``sig``."""

    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: Tags
    content: str


class WireEvent(UnsignedEvent, frozen=True):
    """What a relay or a user sends: typed but not yet checked.  Extra fields are ignored."""

    sig: str


_decode_wire = msgspec.json.Decoder(WireEvent).decode
_encode = msgspec.json.Encoder().encode


def _retry_last_wins(raw: bytes | bytearray | memoryview, first_error: str) -> WireEvent:
    """Re-read a document the typed decoder refused, keeping the last of duplicated keys."""
    try:
        return msgspec.convert(msgspec.json.decode(raw), WireEvent)
    except (msgspec.DecodeError, RecursionError):
        # Report what the typed decoder found: it names the path that failed.
        raise InvalidEvent("malformed", first_error) from None


def check_structure(
    id: object,
    pubkey: object,
    created_at: object,
    kind: object,
    tags: object,
    content: object,
    sig: object,
) -> None:
    """The shape check of docs/events.md; raises ``InvalidEvent('malformed')`` naming the field."""
    if not isinstance(id, str) or not _HEX64.fullmatch(id):
        raise InvalidEvent("malformed", "id must be 64 lowercase hex characters")
    if not isinstance(pubkey, str) or not _HEX64.fullmatch(pubkey):
        raise InvalidEvent("malformed", "pubkey must be 64 lowercase hex characters")
    if not isinstance(sig, str) or not _HEX128.fullmatch(sig):
        raise InvalidEvent("malformed", "sig must be 128 lowercase hex characters")
    if type(created_at) is not int or not 0 <= created_at < MAX_CREATED_AT:
        raise InvalidEvent(
            "malformed",
            "created_at must be an integer from 0 to 2^53-1 (the largest a JavaScript client "
            "holds exactly)",
        )
    if type(kind) is not int or not 0 <= kind <= MAX_KIND:
        raise InvalidEvent("malformed", "kind must be an integer from 0 to 65535")
    if not isinstance(content, str) or not is_utf8_encodable(content):
        raise InvalidEvent("malformed", "content must be a string encodable as UTF-8")
    if not isinstance(tags, tuple):
        raise InvalidEvent("malformed", "tags must be a list of lists of strings")
    for i, tag in enumerate(tags):
        if not isinstance(tag, tuple) or not tag:
            raise InvalidEvent("malformed", f"tags[{i}] must be a non-empty list of strings")
        for item in tag:
            if not isinstance(item, str) or not is_utf8_encodable(item):
                raise InvalidEvent("malformed", f"tags[{i}] must hold only UTF-8 strings")


def _check_typed(id: str, pubkey: str, created_at: int, kind: int, tags: Tags, sig: str) -> None:
    """The checks of :func:`check_structure` that msgspec's typed decoding leaves to us: the hex
    fields, the ranges and non-empty tags.  Text that is not UTF-8 (a lone surrogate) is caught
    when the id is computed, which encodes every string."""
    if not (_HEX64.fullmatch(id) and _HEX64.fullmatch(pubkey) and _HEX128.fullmatch(sig)):
        # The full check names the field.
        check_structure(id, pubkey, created_at, kind, tags, "", sig)
    if not (0 <= created_at < MAX_CREATED_AT and 0 <= kind <= MAX_KIND and all(tags)):
        check_structure(id, pubkey, created_at, kind, tags, "", sig)


def compute_id(
    pubkey: str, created_at: int, kind: int, tags: Iterable[Sequence[str]], content: str
) -> str:
    """SHA-256 of the NIP-01 serialization ``[0, pubkey, created_at, kind, tags, content]``."""
    serialized = _encode([0, pubkey, created_at, kind, tags, content])
    return hashlib.sha256(serialized).hexdigest()


class Event(msgspec.Struct, frozen=True):
    """A verified NIP-01 event.  Field order is the canonical output order."""

    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: Tags
    content: str
    sig: str

    def __post_init__(self) -> None:
        if _JUST_SIGNED.get():
            return  # built by sign_event from checked parts; libsecp256k1 verified the signature
        fields = (self.id, self.pubkey, self.created_at, self.kind, self.tags, self.content)
        if _TYPED.get():
            _check_typed(*fields[:5], self.sig)
        else:
            check_structure(*fields, self.sig)
        try:
            computed = compute_id(self.pubkey, self.created_at, self.kind, self.tags, self.content)
        except UnicodeEncodeError:
            check_structure(*fields, self.sig)  # names the string that is not UTF-8
            raise InvalidEvent("malformed", "content and tags must be UTF-8 text") from None
        if computed != self.id:
            raise InvalidEvent("bad_id", "id does not match the event's content")
        try:
            public = PublicKey(bytes.fromhex(self.pubkey))
        except ValueError:
            raise InvalidEvent("bad_pubkey", "pubkey is not a point on secp256k1") from None
        if not public.verify(bytes.fromhex(self.sig), bytes.fromhex(self.id)):
            raise InvalidEvent("bad_signature", "BIP-340 signature does not verify")

    @classmethod
    def from_json(cls, data: str | bytes | bytearray | memoryview) -> Event:
        """Strictly parse and verify one event from JSON text; raises :class:`InvalidEvent`."""
        try:
            raw = utf8_document(data)
        except UnicodeError:
            raise InvalidEvent("malformed", "text is not valid UTF-8") from None
        except TypeError:
            raise InvalidEvent("malformed", "expected JSON text as str or bytes") from None
        try:
            wire = _decode_wire(raw)
        except msgspec.ValidationError as exc:
            # The typed decoder checks every occurrence of a duplicated key, but the last one
            # wins (docs/events.md): judge the document by what a last-wins reader sees.  Only this
            # error path pays for the second, untyped decode.
            wire = _retry_last_wins(raw, str(exc))
        except msgspec.DecodeError as exc:
            raise InvalidEvent("malformed", str(exc)) from None
        except RecursionError:
            # msgspec still walks ignored extra fields; absurd nesting must not escape untyped.
            raise InvalidEvent("malformed", "JSON nested too deeply") from None
        return cls._from_decoded(wire)

    @classmethod
    def from_wire(cls, wire: WireEvent) -> Event:
        """Verify a :class:`WireEvent` (its fields may hold anything: every check runs)."""
        return cls(
            wire.id, wire.pubkey, wire.created_at, wire.kind, wire.tags, wire.content, wire.sig
        )

    @classmethod
    def _from_decoded(cls, wire: WireEvent) -> Event:
        """Verify a WireEvent that msgspec decoded or converted: its types are already right."""
        token = _TYPED.set(True)
        try:
            return cls(
                wire.id, wire.pubkey, wire.created_at, wire.kind, wire.tags, wire.content, wire.sig
            )
        finally:
            _TYPED.reset(token)

    @classmethod
    def from_dict(cls, obj: Any) -> Event:
        """Verify an event already decoded from JSON (a dict); raises :class:`InvalidEvent`."""
        try:
            wire = msgspec.convert(obj, WireEvent)
        except msgspec.ValidationError as exc:
            raise InvalidEvent("malformed", str(exc)) from None
        except RecursionError:
            raise InvalidEvent("malformed", "object nested too deeply") from None
        return cls._from_decoded(wire)

    def to_json(self) -> str:
        """Canonical one-line JSON: the seven fields in NIP-01 order, escaped as in the id."""
        return _encode(self).decode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pubkey": self.pubkey,
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": [list(t) for t in self.tags],
            "content": self.content,
            "sig": self.sig,
        }

    def tag_values(self, name: str) -> list[str]:
        """The second element of every tag called ``name`` that has one, in tag order."""
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]


def sign_event(
    secret: SecretKey | str,
    *,
    kind: int,
    content: str,
    tags: Iterable[Sequence[str]] = (),
    created_at: int,
    aux_rand: bytes | None = None,
) -> Event:
    """Sign a new event.  ``created_at`` is required: the library reads no clock.

    ``aux_rand`` pins the BIP-340 auxiliary randomness (tests only); by default it comes from
    the OS CSPRNG.  A bad key raises :class:`InvalidKey`; other invalid arguments raise
    ``InvalidEvent('malformed')``.
    """
    # docs/events.md leaves the secret's type open; accept the forms the rest of the library
    # does (nip44, nip_am): 64-hex or nsec1….  The message never repeats the value.
    secret = as_secret_key(secret, "the signing secret key")
    # Sets and mappings are iterable but unordered or keyed: iterating them would silently
    # reorder tags or drop values, so only ordered sequences of lists/tuples are accepted.
    if isinstance(tags, (str, bytes, bytearray, Mapping, AbstractSet)):
        raise InvalidEvent("malformed", "tags must be a list of lists of strings")
    try:
        tag_list = list(tags)
    except TypeError:
        raise InvalidEvent("malformed", "tags must be a list of lists of strings") from None
    if not all(isinstance(t, (list, tuple)) for t in tag_list):
        raise InvalidEvent("malformed", "every tag must be a list of strings")
    tag_tuple: Tags = tuple(tuple(t) for t in tag_list)
    pubkey = secret.public_key.hex
    check_structure("0" * 64, pubkey, created_at, kind, tag_tuple, content, "0" * 128)
    event_id = compute_id(pubkey, created_at, kind, tag_tuple, content)
    if aux_rand is not None and (not isinstance(aux_rand, bytes) or len(aux_rand) != 32):
        raise InvalidEvent("malformed", "aux_rand must be 32 bytes")
    # coincurve's sign_schnorr verifies the signature it made (BIP-340's recommendation), and
    # the structure and id were checked above: constructing the Event need not repeat the work.
    sig = secret.sign_schnorr(bytes.fromhex(event_id), aux_rand).hex()
    token = _JUST_SIGNED.set(True)
    try:
        return Event(event_id, pubkey, created_at, kind, tag_tuple, content, sig)
    finally:
        _JUST_SIGNED.reset(token)


#: How to make a verified :class:`Event` from what another library or the wire hands over.
_CONVERSIONS: Final = {
    "nostr_sdk": "convert it with nostr_buzz.interop.event_from_nostr_sdk(event)",
    "pynostr": "convert it with nostr_buzz.interop.event_from_pynostr(event), which checks its "
    "id and signature",
}


def not_an_event(value: object) -> str:
    """What an error says when ``value`` is used where a verified :class:`Event` is needed:
    its type and how to make an Event of it (never its contents)."""
    kind = type(value)
    hint = _CONVERSIONS.get(kind.__module__.split(".")[0])
    if hint is None:
        if isinstance(value, Mapping):
            hint = "read it with Event.from_dict(value)"
        elif isinstance(value, (str, bytes, bytearray)):
            hint = "read it with Event.from_json(text)"
        else:
            hint = "make one with Event.from_json, Event.from_dict or sign_event"
    name = f"{kind.__module__}.{kind.__qualname__}"
    return f"expected a verified nostr_buzz Event, got {name}: {hint}"


def require_event(value: object, what: str = "event") -> Event:
    """``value`` if it is a verified :class:`Event`, else ``InvalidEvent('malformed')`` saying
    how to make one: an object of another library that merely looks like an event (``id``,
    ``kind``, ``tags``) is never read as if it were verified."""
    if isinstance(value, Event):
        return value
    raise InvalidEvent("malformed", f"{what}: {not_an_event(value)}")
