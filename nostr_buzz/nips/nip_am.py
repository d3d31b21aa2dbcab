"""NIP-AM: encrypted per-turn agent usage metrics (kind 44200), as ``nips/NIP-AM.md`` defines them.

The payload has two kinds of optional field.  *Nullable* fields are always written and are
``null`` when unknown (a missing one decodes as ``None``); *omittable* fields are left out when
absent and a ``null`` there is an error.  In Python both kinds are ``None`` when absent: the
public structs below are what callers build and read, and private ``_Wire*`` twins are the JSON
schema, where omittable fields are ``msgspec.UNSET`` so the encoder leaves them out and the
decoder refuses ``null``.

A :class:`MetricPayload` is checked when it is made: an invalid one never exists, so a metric
cannot be dropped later for a rule a caller could have been told about at once.

Pure: no clock is read (``created_at`` comes from the payload's own timestamp); the only
randomness is the NIP-44 nonce and BIP-340 aux bytes, from the OS CSPRNG unless pinned (or
from the :class:`~nostr_buzz.signer.Signer` that :func:`build_metric_event_async` is given).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal, get_args

import msgspec
from msgspec import UNSET, UnsetType

from nostr_buzz.errors import InvalidKey, MetricError, Nip44Error
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.keys import PublicKey, SecretKey, as_public_key, as_secret_key
from nostr_buzz.manifest import SCHEMA_VERSION, Manifest
from nostr_buzz.nips import nip44
from nostr_buzz.nips.to_owner import MAX_CONTENT_CHARS, Sealing
from nostr_buzz.signer import EventTemplate, Signer
from nostr_buzz.text.unicode import utf8_document

__all__ = [
    "KIND",
    "MAX_PAYLOAD_BYTES",
    "METRIC_KIND",
    "OUTCOMES",
    "STOP_REASONS",
    "TERMINAL_EVIDENCE",
    "MetricError",
    "MetricPayload",
    "Outcome",
    "PricingIdentity",
    "StopReason",
    "TerminalEvidence",
    "TokenCounts",
    "build_metric_event",
    "build_metric_event_async",
    "created_at_of",
    "open_metric_event",
    "open_own_metric_event",
]

KIND: Final = 44200
#: The metric event's kind, by the name the package exports (``nostr_buzz.METRIC_KIND``).
METRIC_KIND: Final = KIND
#: Application cap on the UTF-8 JSON plaintext (the NIP-44 codec itself allows far more).
MAX_PAYLOAD_BYTES: Final = 65535

#: Why the agent stopped, as the metric names it (ACP's stop reasons, plus "error" and "unknown").
StopReason = Literal["end_turn", "max_tokens", "cancelled", "error", "unknown"]
STOP_REASONS: Final = frozenset(get_args(StopReason))
#: How the turn ended ("unknown" only in a metric from a newer or foreign writer).
Outcome = Literal["success", "cancelled", "failed", "unknown"]
OUTCOMES: Final = frozenset(get_args(Outcome))
#: What proved the end: the prompt's answer, the answer to a cancel, the agent's exit, a
#: timeout of the harness, or an error response.
TerminalEvidence = Literal[
    "prompt_response", "cancel_response", "agent_exit", "timeout", "error", "unknown"
]
TERMINAL_EVIDENCE: Final = frozenset(get_args(TerminalEvidence))
_ENUMS: Final = (
    ("stop_reason", STOP_REASONS),
    ("outcome", OUTCOMES),
    ("terminal_evidence", TERMINAL_EVIDENCE),
)

_TIMESTAMP: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})Z"
)
# RFC 3339 date-time in general (any offset, optional fraction): for ``startedAt``.
_RFC3339: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-]([0-9]{2}):([0-9]{2}))"
)
_EVENT_ID: Final = re.compile(r"[0-9a-f]{64}")
# The longest NIP-44 content a plaintext within the cap can produce: anything longer is
# rejected before decrypting (a hostile relay could otherwise make readers decrypt 16 MiB).
_MAX_CONTENT_CHARS: Final = MAX_CONTENT_CHARS
#: The largest valid token counter: every count up to it is exact in a JSON double, so any
#: reader (not only Python) sums it without rounding.
MAX_TOKENS: Final = 2**53
#: The largest valid cost of one turn, in USD: an absurd value is a forged or broken metric,
#: and bounding each term keeps every total finite.
MAX_TURN_COST_USD: Final = 1e6
#: The largest valid cumulative cost of one session, in USD.
MAX_CUMULATIVE_COST_USD: Final = 1e9
_MAX_TOKENS: Final = MAX_TOKENS


# --- public types -----------------------------------------------------------------------------


class TokenCounts(msgspec.Struct, frozen=True):
    """``{inputTokens, outputTokens, totalTokens, costUsd}`` (each None when not reported, the
    default) plus the informational cache subsets of ``input_tokens`` (None, i.e. omitted, when
    unknown): ``TokenCounts(input_tokens=1, output_tokens=2)`` knows no total and no cost."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def __post_init__(self) -> None:
        # An integral cost is the same amount: keep one type so round trips compare equal.
        if type(self.cost_usd) is int and abs(self.cost_usd) < 2**53:
            msgspec.structs.force_setattr(self, "cost_usd", float(self.cost_usd))
        # -0.0 is a valid cost (it is >= 0) but must not reach the wire as "-0.0".
        if type(self.cost_usd) is float and self.cost_usd == 0.0:
            msgspec.structs.force_setattr(self, "cost_usd", 0.0)


class PricingIdentity(msgspec.Struct, frozen=True):
    """Which price list applies: ``{authority, model, cacheClass?}``."""

    authority: str
    model: str
    cache_class: str | None = None


class MetricPayload(msgspec.Struct, frozen=True, kw_only=True):
    """The decrypted content of a kind-44200 event.  Absent optional fields are ``None``.

    Checked when made: a payload that breaks a rule of nips/NIP-AM.md raises
    :class:`MetricError` naming the field (only the 65,535-byte cap on the whole JSON is left
    to :meth:`to_json` and :func:`build_metric_event`).  ``timestamp`` is
    ``YYYY-MM-DDTHH:MM:SS.mmmZ``, which ``datetime.isoformat()`` is not:
    :func:`nostr_buzz.timestamps.metric_timestamp` writes it from a ``datetime`` or Unix
    seconds.  Unknown ``stop_reason``/``outcome``/``terminal_evidence`` strings become
    ``"unknown"``; an empty ``triggering_event_ids`` means absent.  Use
    :meth:`to_json`/:meth:`from_json` for the wire form (not ``msgspec.json.encode`` of this
    struct).
    """

    harness: str
    timestamp: str
    model: str | None = None
    channel_id: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    turn_seq: int | None = None
    turn: TokenCounts | None = None
    cumulative: TokenCounts | None = None
    delta_reliable: bool = True
    stop_reason: StopReason | None = None
    outcome: Outcome | None = None
    terminal_evidence: TerminalEvidence | None = None
    triggering_event_ids: tuple[str, ...] = ()
    root_event_id: str | None = None
    parent_event_id: str | None = None
    started_at: str | None = None
    adapter_session_id: str | None = None
    native_stop_reason: str | None = None
    pricing_identity: PricingIdentity | None = None
    context_manifest: Manifest | None = None
    #: Context occupancy the agent last reported in the turn (ACP ``usage_update``).
    context_used_tokens: int | None = None
    context_window_tokens: int | None = None
    #: The agent's permission requests decided during the turn, approved and rejected (both
    #: absent when it asked none).
    permissions_approved: int | None = None
    permissions_rejected: int | None = None
    #: Context compactions the agent completed during the turn (absent when none): what the
    #: model held before them is a summary now.
    compactions: int | None = None

    def __post_init__(self) -> None:
        for name, allowed in _ENUMS:
            value = getattr(self, name)
            if isinstance(value, str) and value not in allowed:
                msgspec.structs.force_setattr(self, name, "unknown")
        ids = self.triggering_event_ids
        if isinstance(ids, list):
            msgspec.structs.force_setattr(self, "triggering_event_ids", tuple(ids))
        _validate(self)

    def validate(self) -> None:
        """Check every rule of nips/NIP-AM.md again (a payload is checked when made);
        raises :class:`MetricError` naming the field."""
        _validate(self)

    def to_json(self) -> str:
        """Validated wire JSON (camelCase, nullable fields written, omittable ones omitted)."""
        return _encode_payload(self).decode("utf-8")

    @classmethod
    def from_json(cls, text: str | bytes) -> MetricPayload:
        """Decode and validate wire JSON; raises :class:`MetricError`."""
        try:
            data = utf8_document(text)
        except (UnicodeError, TypeError):
            raise MetricError("invalid metric payload: not UTF-8 text") from None
        return _decode_payload(data)


# --- wire schema ------------------------------------------------------------------------------


class _WireTokenCounts(msgspec.Struct, rename="camel"):
    # The four core counters are always written; a decoder reads a missing one as null.
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    cache_read_tokens: int | UnsetType = UNSET
    cache_write_tokens: int | UnsetType = UNSET


class _WirePricingIdentity(msgspec.Struct, rename="camel"):
    authority: str
    model: str
    cache_class: str | UnsetType = UNSET


class _WirePayload(msgspec.Struct, rename="camel"):
    harness: str
    timestamp: str
    # nullable: always written, missing decodes as null
    model: str | None = None
    channel_id: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    turn_seq: int | None = None
    turn: _WireTokenCounts | None = None
    cumulative: _WireTokenCounts | None = None
    delta_reliable: bool = True
    # omittable: never written as null, null refused on decode
    stop_reason: str | UnsetType = UNSET
    outcome: str | UnsetType = UNSET
    terminal_evidence: str | UnsetType = UNSET
    triggering_event_ids: tuple[str, ...] | UnsetType = UNSET
    root_event_id: str | UnsetType = UNSET
    parent_event_id: str | UnsetType = UNSET
    started_at: str | UnsetType = UNSET
    adapter_session_id: str | UnsetType = UNSET
    native_stop_reason: str | UnsetType = UNSET
    pricing_identity: _WirePricingIdentity | UnsetType = UNSET
    # Decoded as a plain struct: the hash is *not* checked here (hash_matches() tells).
    context_manifest: Manifest | UnsetType = UNSET
    context_used_tokens: int | UnsetType = UNSET
    context_window_tokens: int | UnsetType = UNSET
    permissions_approved: int | UnsetType = UNSET
    permissions_rejected: int | UnsetType = UNSET
    compactions: int | UnsetType = UNSET


_wire_decoder = msgspec.json.Decoder(_WirePayload)
_wire_encoder = msgspec.json.Encoder()


def _or_unset(value: Any) -> Any:
    return UNSET if value is None else value


def _or_none(value: Any) -> Any:
    return None if value is UNSET else value


def _counts_to_wire(counts: TokenCounts | None) -> _WireTokenCounts | None:
    if counts is None:
        return None
    return _WireTokenCounts(
        counts.input_tokens,
        counts.output_tokens,
        counts.total_tokens,
        counts.cost_usd,
        _or_unset(counts.cache_read_tokens),
        _or_unset(counts.cache_write_tokens),
    )


def _counts_from_wire(counts: _WireTokenCounts | None) -> TokenCounts | None:
    if counts is None:
        return None
    return TokenCounts(
        counts.input_tokens,
        counts.output_tokens,
        counts.total_tokens,
        counts.cost_usd,
        _or_none(counts.cache_read_tokens),
        _or_none(counts.cache_write_tokens),
    )


#: The payload fields the wire leaves out when absent (never null): ``None`` in
#: :class:`MetricPayload`, ``UNSET`` in :class:`_WirePayload`.  The two structs name the same
#: fields, so one loop maps each way; the fields of other types are converted after it.
_OMITTABLE: Final = tuple(
    f.name for f in msgspec.structs.fields(_WirePayload) if f.default is UNSET
)


def _to_wire(p: MetricPayload) -> _WirePayload:
    values = {name: getattr(p, name) for name in _WirePayload.__struct_fields__}
    for name in _OMITTABLE:
        values[name] = _or_unset(values[name])
    pi = p.pricing_identity
    values.update(
        turn=_counts_to_wire(p.turn),
        cumulative=_counts_to_wire(p.cumulative),
        triggering_event_ids=tuple(p.triggering_event_ids) or UNSET,
        pricing_identity=UNSET
        if pi is None
        else _WirePricingIdentity(pi.authority, pi.model, _or_unset(pi.cache_class)),
    )
    return _WirePayload(**values)


def _from_wire(w: _WirePayload) -> MetricPayload:
    values = {name: getattr(w, name) for name in _WirePayload.__struct_fields__}
    for name in _OMITTABLE:
        values[name] = _or_none(values[name])
    pi, ids = w.pricing_identity, w.triggering_event_ids
    values.update(
        turn=_counts_from_wire(w.turn),
        cumulative=_counts_from_wire(w.cumulative),
        triggering_event_ids=() if isinstance(ids, UnsetType) else ids,
        pricing_identity=None
        if isinstance(pi, UnsetType)
        else PricingIdentity(pi.authority, pi.model, _or_none(pi.cache_class)),
    )
    return MetricPayload(**values)


def _encode_payload(payload: MetricPayload) -> bytes:
    if not isinstance(payload, MetricPayload):
        raise MetricError("payload must be a MetricPayload")
    _validate(payload)
    try:
        data = _wire_encoder.encode(_to_wire(payload))
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
        raise MetricError(f"metric payload cannot be encoded: {exc}") from None
    if len(data) > MAX_PAYLOAD_BYTES:
        raise MetricError(
            f"metric payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES} "
            "(drop or shorten the context manifest)"
        )
    return data


def _decode_payload(data: bytes) -> MetricPayload:
    if len(data) > MAX_PAYLOAD_BYTES:
        raise MetricError(f"metric payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    try:
        wire = _wire_decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError; its text has the path
        raise MetricError(f"invalid metric payload: {exc}") from None
    return _from_wire(wire)  # a MetricPayload is validated when made


# --- validation -------------------------------------------------------------------------------


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithm)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _date_time_ok(year: int, month: int, day: int, hour: int, minute: int, second: int) -> bool:
    return (
        1 <= month <= 12
        and 1 <= day <= _days_in_month(year, month)
        and hour <= 23
        and minute <= 59
        and second <= 59
    )


def created_at_of(timestamp: str) -> int:
    """Unix seconds of a payload ``timestamp`` (``YYYY-MM-DDTHH:MM:SS.mmmZ``), truncated.

    Raises :class:`MetricError` when the text is not in exactly that form.
    """
    match = _TIMESTAMP.fullmatch(timestamp) if isinstance(timestamp, str) else None
    if match is None:
        raise MetricError(
            "timestamp must be RFC 3339 UTC with milliseconds and Z, like "
            "2026-12-02T14:05:09.123Z (nostr_buzz.metric_timestamp(datetime) writes one)"
        )
    year, month, day, hour, minute, second, _ = (int(g) for g in match.groups())
    if not _date_time_ok(year, month, day, hour, minute, second):
        raise MetricError(f"timestamp {timestamp!r} is not a valid date and time")
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second


def _check_rfc3339(name: str, value: str) -> None:
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise MetricError(f"{name} must be an RFC 3339 date-time, got {value[:40]!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    offset_h, offset_m = match.group(9), match.group(10)
    # RFC 3339 allows a leap second (60); offsets are at most 23:59.
    if (
        not _date_time_ok(year, month, day, hour, minute, min(second, 59))
        or second > 60
        or (offset_h is not None and (int(offset_h) > 23 or int(offset_m) > 59))
    ):
        raise MetricError(f"{name} {value[:40]!r} is not a valid date and time")


def _is_int(value: object) -> bool:
    return type(value) is int


def _check_counts(name: str, counts: object, max_cost: float) -> None:
    if not isinstance(counts, TokenCounts):
        raise MetricError(f"{name} must be TokenCounts or null")
    for field in (
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ):
        value = getattr(counts, field)
        if value is not None and (not _is_int(value) or not 0 <= value <= _MAX_TOKENS):
            raise MetricError(f"{name}.{field} must be an integer from 0 to 2^53 or null")
    cost = counts.cost_usd
    if cost is not None and (
        type(cost) is not float or not 0 <= cost <= max_cost  # NaN fails both comparisons
    ):
        raise MetricError(f"{name}.cost_usd must be a number from 0 to {max_cost:g} or null")


def _check_optional_str(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise MetricError(f"{name} must be a string or absent")


def _check_event_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not _EVENT_ID.fullmatch(value):
        raise MetricError(f"{name} must be an event id (64 lowercase hex characters)")


def _validate(p: MetricPayload) -> None:
    if not isinstance(p.harness, str) or not p.harness:
        raise MetricError("harness must be a non-empty string")
    created_at_of(p.timestamp)
    for name in (
        "model",
        "channel_id",
        "session_id",
        "turn_id",
        "adapter_session_id",
        "native_stop_reason",
    ):
        _check_optional_str(name, getattr(p, name))
    for name, allowed in _ENUMS:
        value = getattr(p, name)
        if value is not None and value not in allowed:
            raise MetricError(f"{name} must be one of {sorted(allowed)}")
    if p.turn_seq is not None and (not _is_int(p.turn_seq) or not 1 <= p.turn_seq <= _MAX_TOKENS):
        raise MetricError("turn_seq must be an integer >= 1 or null")
    for name in (
        "context_used_tokens",
        "context_window_tokens",
        "permissions_approved",
        "permissions_rejected",
    ):
        value = getattr(p, name)
        if value is not None and (not _is_int(value) or not 0 <= value <= _MAX_TOKENS):
            raise MetricError(f"{name} must be an integer >= 0 or absent")
    count = p.compactions
    if count is not None and (not _is_int(count) or not 1 <= count <= _MAX_TOKENS):
        raise MetricError("compactions must be an integer >= 1 or absent")
    if p.turn is not None:
        _check_counts("turn", p.turn, MAX_TURN_COST_USD)
    if p.cumulative is not None:
        _check_counts("cumulative", p.cumulative, MAX_CUMULATIVE_COST_USD)
        if p.session_id is None or p.turn_seq is None:
            raise MetricError("cumulative counters need both session_id and turn_seq")
    if not isinstance(p.delta_reliable, bool):
        raise MetricError("delta_reliable must be a boolean")
    if not isinstance(p.triggering_event_ids, tuple):
        raise MetricError("triggering_event_ids must be a list of event ids")
    for i, event_id in enumerate(p.triggering_event_ids):
        _check_event_id(f"triggering_event_ids[{i}]", event_id)
    for name in ("root_event_id", "parent_event_id"):
        value = getattr(p, name)
        if value is not None:
            _check_event_id(name, value)
    if p.started_at is not None:
        if not isinstance(p.started_at, str):
            raise MetricError("started_at must be an RFC 3339 string or absent")
        _check_rfc3339("started_at", p.started_at)
    pi = p.pricing_identity
    if pi is not None and (
        not isinstance(pi, PricingIdentity)
        or not isinstance(pi.authority, str)
        or not isinstance(pi.model, str)
        or (pi.cache_class is not None and not isinstance(pi.cache_class, str))
    ):
        raise MetricError("pricing_identity must be {authority, model, cache_class?} strings")
    manifest = p.context_manifest
    if manifest is not None:
        if not isinstance(manifest, Manifest):
            raise MetricError("context_manifest must be a Manifest")
        if manifest.schema_version != SCHEMA_VERSION:
            raise MetricError(
                f"context_manifest schemaVersion {manifest.schema_version} is not supported "
                f"(expected {SCHEMA_VERSION})"
            )


# --- events -----------------------------------------------------------------------------------


def _secret(value: SecretKey | str, role: str) -> SecretKey:
    return as_secret_key(value, f"{role} secret key")


def _public(value: PublicKey | str, role: str) -> PublicKey:
    return as_public_key(value, f"{role} public key")


def _template(
    agent: PublicKey, owner: PublicKey, payload: MetricPayload, content: str
) -> EventTemplate:
    """The unsigned kind-44200 event: tags exactly ``[["p", owner], ["agent", agent]]``,
    ``created_at`` the payload timestamp truncated to seconds."""
    tags = (("p", owner.hex), ("agent", agent.hex))
    return EventTemplate(KIND, content, tags, created_at_of(payload.timestamp))


_SEALING: Final = Sealing(_encode_payload, _template, MetricError, "metric")


def build_metric_event(
    agent_secret: SecretKey | str,
    owner_public: PublicKey | str,
    payload: MetricPayload,
    *,
    nonce: bytes | None = None,
    aux_rand: bytes | None = None,
) -> Event:
    """Validate, encrypt (NIP-44 v2, agent → owner) and sign one kind-44200 metric event.

    Tags are exactly ``[["p", owner], ["agent", agent]]`` and ``created_at`` is the payload
    timestamp truncated to seconds.  ``nonce``/``aux_rand`` pin randomness for tests only.
    """
    agent = _secret(agent_secret, "agent")
    return _SEALING.local(
        agent, _public(owner_public, "owner"), payload, nonce=nonce, aux_rand=aux_rand
    )


async def build_metric_event_async(
    signer: Signer, owner_public: PublicKey | str, payload: MetricPayload
) -> Event:
    """:func:`build_metric_event` with a :class:`~nostr_buzz.signer.Signer` in place of the
    agent's secret key (a NIP-46 bunker, another library's signer): the signer encrypts the
    payload to the owner (``nip44_encrypt``) and signs the event, which is then checked to be
    the one asked for (:func:`~nostr_buzz.signer.check_signed`).  Raises :class:`MetricError`
    for the payload, :class:`InvalidKey` for the owner's key and
    :class:`~nostr_buzz.signer.SignerError` when the signer fails or signs something else.
    """
    if not isinstance(signer, Signer):
        raise InvalidKey("signer must be a Signer (public_key, sign_event, nip44_encrypt)")
    return await _SEALING.with_signer(signer, _public(owner_public, "owner"), payload)


def _tags_named(tags: Iterable[tuple[str, ...]], name: str) -> list[tuple[str, ...]]:
    return [tag for tag in tags if tag and tag[0] == name]


def open_metric_event(owner_secret: SecretKey | str, event: Event) -> MetricPayload:
    """Check the tag layout, decrypt with the owner's key and validate the payload.

    Raises :class:`MetricError` unless: kind 44200; exactly one ``p`` tag, equal to the owner;
    exactly one ``agent`` tag, equal to ``pubkey``; no ``h`` tag; the content decrypts; the
    plaintext is at most 65,535 bytes and a valid payload.  ``created_at`` is not compared and
    the manifest hash is not checked (``payload.context_manifest.hash_matches()`` tells).
    """
    owner = _secret(owner_secret, "owner")
    _check_layout(owner.public_key.hex, event)
    try:
        plaintext = nip44.decrypt(event.content, nip44.conversation_key(owner, event.pubkey))
    except Nip44Error as exc:
        raise MetricError(f"cannot decrypt the metric with this owner's key: {exc}") from None
    return _decode_payload(plaintext.encode("utf-8"))


async def open_own_metric_event(
    signer: Signer, owner_public: PublicKey | str, event: Event
) -> MetricPayload:
    """:func:`open_metric_event` from the other side: a metric the signer's key sent to the
    owner, decrypted through the signer (NIP-44's conversation key is the same for sender
    and recipient).  The shards of one agent key read each other's metrics this way.  Raises
    :class:`MetricError` as :func:`open_metric_event` does, and when the event is not the
    signer's; :class:`~nostr_buzz.signer.SignerError` when the signer fails."""
    owner = _public(owner_public, "owner")
    _check_layout(owner.hex, event)
    if event.pubkey != signer.public_key.hex:
        raise MetricError("the metric was not sent by this signer's key")
    try:
        plaintext = await signer.nip44_decrypt(owner, event.content)
    except Nip44Error as exc:
        raise MetricError(f"cannot decrypt the metric with the agent's key: {exc}") from None
    return _decode_payload(plaintext.encode("utf-8"))


def _check_layout(owner_hex: str, event: object) -> None:
    """A kind-44200 event's tags and size, as both openers require them."""
    if not isinstance(event, Event):
        raise MetricError(not_an_event(event))
    if event.kind != KIND:
        raise MetricError(f"not a metric event: kind {event.kind}, expected {KIND}")
    p_tags = _tags_named(event.tags, "p")
    if len(p_tags) != 1:
        raise MetricError(f"a metric event has exactly one p tag, found {len(p_tags)}")
    if len(p_tags[0]) < 2 or p_tags[0][1] != owner_hex:
        raise MetricError("the p tag does not name this owner's public key")
    agent_tags = _tags_named(event.tags, "agent")
    if len(agent_tags) != 1:
        raise MetricError(f"a metric event has exactly one agent tag, found {len(agent_tags)}")
    if len(agent_tags[0]) < 2 or agent_tags[0][1] != event.pubkey:
        raise MetricError("the agent tag does not equal the event's pubkey")
    if _tags_named(event.tags, "h"):
        raise MetricError("a metric event must not carry an h tag (its channel is private)")
    if len(event.content) > _MAX_CONTENT_CHARS:
        raise MetricError(
            f"metric content is too long: its plaintext exceeds {MAX_PAYLOAD_BYTES} bytes"
        )
