"""NIP-01 relay protocol, pure: filters, filter matching, and the message codec.

No sockets here.  :func:`parse_relay_message` turns one frame from a relay into a typed message
(or a :class:`Malformed` saying why it is not one); the ``encode_*`` functions build the frames a
client sends.  An ``EVENT`` message carries the event still undecoded (``Any``): the caller
verifies it with :meth:`Event.from_dict`, because a relay is never trusted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event

#: Machine-readable prefixes of ``OK`` and ``CLOSED`` messages (NIP-01), colon included.
PREFIXES: Final = (
    "invalid:",
    "blocked:",
    "rate-limited:",
    "auth-required:",
    "restricted:",
    "error:",
    "pow:",
    "duplicate:",
)

_TAG_KEY: Final = re.compile(r"#[A-Za-z]")
#: NIP-59: gift wraps, and how far back (seconds) their senders may date them.
GIFT_WRAP_KIND: Final = 1059
#: NIP-59's ephemeral gift wrap: the same wrap, which relays pass on without storing.
EPHEMERAL_GIFT_WRAP_KIND: Final = 21059
#: Both kinds of gift wrap.
WRAP_KINDS: Final = frozenset((GIFT_WRAP_KIND, EPHEMERAL_GIFT_WRAP_KIND))
#: NIP-67: the ``EOSE`` hints understood (``finish``: every stored event was sent; ``more``:
#: the relay holds more than it sent) and how many hints of one ``EOSE`` are looked at.
EOSE_HINTS: Final = ("finish", "more")
MAX_EOSE_HINTS: Final = 16
GIFT_WRAP_BACKDATE: Final = 2 * 24 * 60 * 60
_PLAIN_KEYS: Final = ("ids", "authors", "kinds", "since", "until", "limit")


class Filter(msgspec.Struct, frozen=True, omit_defaults=True):
    """A NIP-01 filter.  ``None`` means "no condition"; ``tags`` maps a letter to values (``#x``).

    Build one from a wire dict with :meth:`from_dict`; :meth:`to_wire` gives the wire dict back.
    """

    ids: tuple[str, ...] | None = None
    authors: tuple[str, ...] | None = None
    kinds: tuple[int, ...] | None = None
    since: int | None = None
    until: int | None = None
    limit: int | None = None
    tags: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Filter:
        """Parse ``{"ids": [...], "#e": [...], ...}``; unknown keys raise :class:`RelayError`."""
        if not isinstance(obj, Mapping):
            raise RelayError("a filter must be a JSON object")
        plain: dict[str, Any] = {}
        tags: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise RelayError("filter keys must be strings")
            if key in _PLAIN_KEYS:
                plain[key] = value
            elif _TAG_KEY.fullmatch(key):
                tags[key[1]] = value
            else:
                raise RelayError(f"unknown filter key {key!r} (expected {_PLAIN_KEYS} or #x)")
        try:
            return msgspec.convert({**plain, "tags": tags}, cls)
        except msgspec.ValidationError as exc:
            raise RelayError(f"invalid filter: {exc}") from None

    def to_wire(self) -> dict[str, Any]:
        """The JSON object a ``REQ`` carries (absent conditions omitted)."""
        wire: dict[str, Any] = {}
        for key in _PLAIN_KEYS:
            value = getattr(self, key)
            if value is not None:
                wire[key] = list(value) if isinstance(value, tuple) else value
        for letter, values in self.tags.items():
            wire[f"#{letter}"] = list(values)
        return wire

    def with_since(self, since: int) -> Filter:
        """A copy whose ``since`` is at least ``since`` (used to re-open a live subscription).

        Gift wraps (kind 1059) are dated up to two days before they were sent (NIP-59): for a
        filter that asks for them, ``since`` moves only to two days before ``since``, so that a
        wrap sent after the last event seen is still found.
        """
        if self.kinds is not None and not WRAP_KINDS.isdisjoint(self.kinds):
            since = max(0, since - GIFT_WRAP_BACKDATE)
        current = self.since if self.since is not None else since
        return msgspec.structs.replace(self, since=max(current, since))


FilterLike = Filter | Mapping[str, Any]


def as_filters(filters: FilterLike | Iterable[FilterLike]) -> list[Filter]:
    """Accept one filter or many, as :class:`Filter` or wire dicts."""
    if isinstance(filters, (Filter, Mapping)):
        filters = [filters]
    out = [f if isinstance(f, Filter) else Filter.from_dict(f) for f in filters]
    if not out:
        raise RelayError("a request needs at least one filter")
    return out


def matches(flt: Filter, event: Event) -> bool:
    """NIP-01 filter semantics: every given condition holds; a list holds if any value does.

    ids and authors compare exactly (full 64-hex, no prefix matching: a relay must not pass off
    another event as the one asked for).  An empty list matches nothing.  ``limit`` only
    bounds what the relay returns and never excludes an event.
    """
    if flt.ids is not None and event.id not in flt.ids:
        return False
    if flt.authors is not None and event.pubkey not in flt.authors:
        return False
    if flt.kinds is not None and event.kind not in flt.kinds:
        return False
    if flt.since is not None and event.created_at < flt.since:
        return False
    if flt.until is not None and event.created_at > flt.until:
        return False
    for letter, values in flt.tags.items():
        wanted = set(values)
        if not any(len(t) >= 2 and t[0] == letter and t[1] in wanted for t in event.tags):
            return False
    return True


def matches_any(filters: Sequence[Filter], event: Event) -> bool:
    return any(matches(f, event) for f in filters)


# --- replaceable and addressable events ------------------------------------------------------


def is_replaceable(kind: int) -> bool:
    """A kind of which a relay keeps one event per author: 0, 3 and 10000-19999."""
    return kind in (0, 3) or 10_000 <= kind < 20_000


def is_addressable(kind: int) -> bool:
    """A kind of which a relay keeps one event per author and ``d`` tag: 30000-39999."""
    return 30_000 <= kind < 40_000


def address(event: Event) -> tuple[int, str, str] | None:
    """What one version of ``event`` replaces: ``(kind, pubkey, d)`` (``d`` is "" for a
    replaceable kind and for an addressable event without a ``d`` tag); None for the other
    kinds, of which every event counts."""
    if is_replaceable(event.kind):
        return (event.kind, event.pubkey, "")
    if is_addressable(event.kind):
        d = next((t[1] for t in event.tags if len(t) >= 2 and t[0] == "d"), "")
        return (event.kind, event.pubkey, d)
    return None


def is_newer(event: Event, than: Event) -> bool:
    """``event`` replaces ``than``: a greater ``created_at``, or on a tie the lower ``id``."""
    return (event.created_at, than.id) > (than.created_at, event.id)


def newest_versions(events: Iterable[Event]) -> list[Event]:
    """``events`` with only the newest version of each replaceable or addressable event
    (:func:`address`, :func:`is_newer`); other events kept.  Order: first arrival of each."""
    kept: list[Event] = []
    where: dict[tuple[int, str, str], int] = {}
    for event in events:
        key = address(event)
        if key is None:
            kept.append(event)
        elif key not in where:
            where[key] = len(kept)
            kept.append(event)
        elif is_newer(event, kept[where[key]]):
            kept[where[key]] = event
    return kept


# --- relay -> client -------------------------------------------------------------------------


class EventMessage(msgspec.Struct, frozen=True):
    """``["EVENT", sub, event]``; ``event`` is not verified yet."""

    subscription_id: str
    event: Any


class OkMessage(msgspec.Struct, frozen=True):
    """``["OK", id, accepted, message]``; ``event_id`` may be empty (some relays do that)."""

    event_id: str
    accepted: bool
    message: str


class EoseMessage(msgspec.Struct, frozen=True):
    """``["EOSE", sub]``: the relay has sent every stored event that matches; with NIP-67's
    completeness hints, ``["EOSE", sub, ["finish"]]`` (also read as a single string,
    ``["EOSE", sub, "finish"]``).  ``hints``: the known ones (:data:`EOSE_HINTS`) only;
    unknown hints are ignored, as NIP-67 asks."""

    subscription_id: str
    hints: tuple[str, ...] = ()

    @property
    def complete(self) -> bool | None:
        """NIP-67: True when the relay says it sent every stored event (``finish``), False
        when it says it holds more (``more``), None when it says nothing."""
        if "finish" in self.hints:
            return True
        if "more" in self.hints:
            return False
        return None


class ClosedMessage(msgspec.Struct, frozen=True):
    """``["CLOSED", sub, message]``: the relay ended the subscription (the message says why,
    with a machine-readable prefix such as ``auth-required:``)."""

    subscription_id: str
    message: str


class NoticeMessage(msgspec.Struct, frozen=True):
    """``["NOTICE", message]``: a human-readable message from the relay."""

    message: str


class AuthMessage(msgspec.Struct, frozen=True):
    """``["AUTH", challenge]`` (NIP-42)."""

    challenge: str


class Malformed(msgspec.Struct, frozen=True):
    """A frame that is not a relay message; ``reason`` says why."""

    reason: str


RelayMessage = (
    EventMessage | OkMessage | EoseMessage | ClosedMessage | NoticeMessage | AuthMessage | Malformed
)

_decode_any = msgspec.json.Decoder().decode


def _optional_text(frame: list[Any], index: int) -> str | None:
    """The message string at ``index``; missing counts as empty (lenient: some relays omit it)."""
    if len(frame) <= index:
        return ""
    value = frame[index]
    return value if isinstance(value, str) else None


def parse_relay_message(data: str | bytes) -> RelayMessage:
    """Decode one frame from a relay.  Never raises: bad frames become :class:`Malformed`."""
    try:
        frame = _decode_any(data)
    except (msgspec.DecodeError, RecursionError, UnicodeError):
        return Malformed("not JSON")
    if not isinstance(frame, list) or not frame:
        return Malformed("not a non-empty JSON array")
    kind = frame[0]
    rest = len(frame) - 1
    if kind == "EVENT":
        if rest == 2 and isinstance(frame[1], str):
            return EventMessage(frame[1], frame[2])
        return Malformed("EVENT needs a subscription id and an event")
    if kind == "OK":
        if 2 <= rest <= 3 and isinstance(frame[1], str) and isinstance(frame[2], bool):
            message = _optional_text(frame, 3)
            if message is not None:
                return OkMessage(frame[1], frame[2], message)
        return Malformed("OK needs an event id, a boolean and a message")
    if kind == "EOSE":
        if 1 <= rest <= 2 and isinstance(frame[1], str):
            return EoseMessage(frame[1], _eose_hints(frame[2] if rest == 2 else ()))
        return Malformed("EOSE needs a subscription id")
    if kind == "CLOSED":
        if 1 <= rest <= 2 and isinstance(frame[1], str):
            message = _optional_text(frame, 2)
            if message is not None:
                return ClosedMessage(frame[1], message)
        return Malformed("CLOSED needs a subscription id and a message")
    if kind == "NOTICE":
        if rest == 1 and isinstance(frame[1], str):
            return NoticeMessage(frame[1])
        return Malformed("NOTICE needs a message")
    if kind == "AUTH":
        if rest == 1 and isinstance(frame[1], str):
            return AuthMessage(frame[1])
        return Malformed("AUTH needs a challenge string")
    return Malformed("unknown message type")


def _eose_hints(value: object) -> tuple[str, ...]:
    """NIP-67's hints of an ``EOSE``: the known ones among a list of strings (or one string);
    anything else says nothing (a legacy or confused relay still ends the stored events)."""
    listed = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(h for h in EOSE_HINTS if h in listed[:MAX_EOSE_HINTS])


def split_prefix(message: str) -> tuple[str | None, str]:
    """``"blocked: no"`` → ``("blocked:", "no")``; no known prefix → ``(None, message)``."""
    for prefix in PREFIXES:
        if message.startswith(prefix):
            return prefix, message[len(prefix) :].strip()
    return None, message


# --- client -> relay -------------------------------------------------------------------------

_encode = msgspec.json.Encoder().encode


def encode_event(event: Event) -> str:
    """``["EVENT", event]`` with the event's canonical bytes."""
    return f'["EVENT",{event.to_json()}]'


def encode_auth(event: Event) -> str:
    """``["AUTH", event]`` (NIP-42)."""
    return f'["AUTH",{event.to_json()}]'


def encode_req(subscription_id: str, filters: Sequence[Filter]) -> str:
    return _encode(["REQ", subscription_id, *(f.to_wire() for f in filters)]).decode("utf-8")


def encode_close(subscription_id: str) -> str:
    return _encode(["CLOSE", subscription_id]).decode("utf-8")
