"""NIP-01 event model: real events, canonical output, tampering reasons, hostile input; then the
conformance cases of docs/events.md for events (keys, NIP-19, routing and profiles have theirs in
their own modules' files); then nostr-sdk as an independent oracle for ids and signatures."""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any

import msgspec
import nostr_sdk as sdk
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nostr_buzz
from nostr_buzz import (
    BuzzError,
    InvalidKey,
    ManifestError,
    MetricError,
    Nip19Error,
    Nip44Error,
    QueueError,
    TurnInputError,
)
from nostr_buzz.errors import InvalidEvent
from nostr_buzz.event import Event, compute_id, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip19
from tests.support.data import VECTORS, load_json
from tests.support.reference import (
    AUX0,
    NPUB,
    NPUB_HEX,
    NSEC,
    NSEC_HEX,
    OFF_CURVE,
    P_FIELD,
    SK2_HEX,
    dumps,
    make,
    reason_of,
    ref_id,
    ref_pubkey,
    ref_sign,
    ref_verify,
    with_fixed_id,
)

REAL_EVENTS: list[dict[str, Any]] = load_json(VECTORS / "nip01-events.json")
SECRET = SecretKey(bytes.fromhex("11" * 32))
OTHER = SecretKey(bytes.fromhex("22" * 32))
AUX = bytes(32)
# BIP-340 vector 5: an x coordinate with no point on secp256k1; vector 14: x >= field size.
OFF_CURVE_X = "eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34"
X_TOO_BIG = "fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc30"
FIELDS = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")


def _signed(**overrides: Any) -> Event:
    args: dict[str, Any] = {
        "kind": 1,
        "content": 'hello <nostr> & "friends" \\ \u2028 \U0001f600',
        "tags": [["e", "ab" * 32, "", "root"], ["p", "cd" * 32]],
        "created_at": 1_700_000_000,
    }
    args.update(overrides)
    return sign_event(SECRET, aux_rand=AUX, **args)


VALID = _signed()


def _reason(data: str | bytes) -> str:
    with pytest.raises(InvalidEvent) as info:
        Event.from_json(data)
    return info.value.reason


def _with(**changes: Any) -> str:
    d = VALID.to_dict()
    d.update(changes)
    return json.dumps(d, ensure_ascii=False)


def _without(field: str) -> str:
    d = VALID.to_dict()
    del d[field]
    return json.dumps(d)


# --- real events -------------------------------------------------------------------------


def test_fixture_has_twenty_real_events() -> None:
    assert len(REAL_EVENTS) == 20


@pytest.mark.parametrize("raw", REAL_EVENTS, ids=[e["id"][:12] for e in REAL_EVENTS])
def test_real_event_parses_verifies_and_reserializes_to_same_id(raw: dict[str, Any]) -> None:
    event = Event.from_json(json.dumps(raw))
    assert event.id == raw["id"]
    assert event.to_dict() == raw
    again = Event.from_json(event.to_json())
    assert again == event
    assert (
        compute_id(event.pubkey, event.created_at, event.kind, event.tags, event.content)
        == (raw["id"])
    )
    # Bytes input and dict input take the same path.
    assert Event.from_json(event.to_json().encode("utf-8")) == event
    assert Event.from_dict(raw) == event


def test_canonical_output_is_compact_ordered_and_raw() -> None:
    out = VALID.to_json()
    assert list(json.loads(out)) == list(FIELDS)
    assert out == json.dumps(VALID.to_dict(), separators=(",", ":"), ensure_ascii=False)
    assert "\u2028" in out and "\U0001f600" in out and "<nostr>" in out
    assert "\\u" not in out


def test_control_characters_are_escaped_as_in_the_id_serialization() -> None:
    event = _signed(content="a\x00b\x1fc\n\t\r\b\f/\x7f")
    out = event.to_json()
    assert '"a\\u0000b\\u001fc\\n\\t\\r\\b\\f/\x7f"' in out
    assert Event.from_json(out) == event


def test_extra_fields_are_ignored_and_dropped() -> None:
    d = VALID.to_dict() | {"relay": "wss://x", "seen": [1, {"a": None}]}
    event = Event.from_json(json.dumps(d))
    assert event == VALID
    assert "relay" not in event.to_json()


def test_duplicated_key_last_one_wins_and_the_id_covers_it() -> None:
    text = VALID.to_json()
    assert _reason(text[:-1] + ',"content":"changed"}') == "bad_id"
    assert Event.from_json('{"content":"changed",' + text[1:]) == VALID


def test_event_cannot_be_built_unverified() -> None:
    d = VALID.to_dict()
    d["content"] = "changed"
    d["tags"] = tuple(tuple(t) for t in d["tags"])
    with pytest.raises(InvalidEvent) as info:
        Event(**d)
    assert info.value.reason == "bad_id"
    with pytest.raises(InvalidEvent):
        msgspec.structs.replace(VALID, content="changed")


# --- tampering ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("content", "tampered"),
        ("tags", [["p", "cd" * 32]]),
        ("tags", []),
        ("kind", 7),
        ("created_at", 1_700_000_001),
        ("pubkey", OTHER.public_key.hex),
    ],
)
def test_changed_field_with_old_id_is_bad_id(field: str, value: Any) -> None:
    assert _reason(_with(**{field: value})) == "bad_id"


def test_changed_id_is_bad_id() -> None:
    assert _reason(_with(id="0" * 64)) == "bad_id"


@pytest.mark.parametrize("position", [0, 63, 64, 127])
def test_changed_signature_is_bad_signature(position: int) -> None:
    sig = VALID.sig
    flipped = "1" if sig[position] == "0" else "0"
    assert _reason(_with(sig=sig[:position] + flipped + sig[position + 1 :])) == "bad_signature"


def test_signature_of_another_key_is_bad_signature() -> None:
    other = sign_event(
        OTHER,
        kind=VALID.kind,
        content=VALID.content,
        tags=VALID.tags,
        created_at=VALID.created_at,
    )
    assert _reason(_with(sig=other.sig)) == "bad_signature"


@pytest.mark.parametrize("x", [OFF_CURVE_X, X_TOO_BIG])
def test_pubkey_off_the_curve_is_bad_pubkey(x: str) -> None:
    event_id = compute_id(x, VALID.created_at, VALID.kind, VALID.tags, VALID.content)
    assert _reason(_with(pubkey=x, id=event_id)) == "bad_pubkey"


MALFORMED_CHANGES: list[tuple[str, Any]] = [
    # wrong types
    ("id", 5),
    ("id", None),
    ("pubkey", ["x"]),
    ("sig", {}),
    ("created_at", "1700000000"),
    ("created_at", 1.5),
    ("created_at", 1_700_000_000.0),
    ("created_at", True),
    ("kind", "1"),
    ("kind", False),
    ("kind", None),
    ("content", 5),
    ("content", None),
    ("content", ["a"]),
    # bad hex
    ("id", VALID.id.upper()),
    ("id", "g" + VALID.id[1:]),
    ("pubkey", VALID.pubkey.upper()),
    ("pubkey", " " + VALID.pubkey[1:]),
    ("sig", VALID.sig.upper()),
    ("sig", "z" + VALID.sig[1:]),
    # wrong lengths
    ("id", VALID.id[:-1]),
    ("id", VALID.id + "0"),
    ("id", ""),
    ("pubkey", VALID.pubkey[:-2]),
    ("pubkey", VALID.pubkey + "00"),
    ("sig", VALID.sig[:-1]),
    ("sig", VALID.sig + "0"),
    # out of range
    ("kind", -1),
    ("kind", 65536),
    ("kind", 2**64),
    ("created_at", -1),
    ("created_at", 2**53),
    ("created_at", 2**63),
    ("created_at", 2**64),
    ("created_at", 10**40),
    # tags that are not lists of non-empty lists of strings
    ("tags", "e"),
    ("tags", None),
    ("tags", {"e": "x"}),
    ("tags", ["e"]),
    ("tags", [[]]),
    ("tags", [["e", 1]]),
    ("tags", [["e", None]]),
    ("tags", [["e", ["x"]]]),
    ("tags", [[1]]),
]


@pytest.mark.parametrize(("field", "value"), MALFORMED_CHANGES)
def test_wrong_type_hex_length_range_or_tags_is_malformed(field: str, value: Any) -> None:
    assert _reason(_with(**{field: value})) == "malformed"


@pytest.mark.parametrize("field", FIELDS)
def test_missing_field_is_malformed(field: str) -> None:
    assert _reason(_without(field)) == "malformed"


@pytest.mark.parametrize(
    "data",
    [
        "",
        "null",
        "[]",
        '"event"',
        "1",
        "{",
        "{}",
        "{'id': 1}",
        b"\xff\xfe",
        b'{"content":"\xc3"}',
        "[" * 100_000,
        '{"x":' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
)
def test_not_an_event_is_malformed(data: str | bytes) -> None:
    assert _reason(data) == "malformed"


@pytest.mark.parametrize(
    "place",
    ["content", "tag"],
)
@pytest.mark.parametrize("surrogate", ["\ud800", "\udfff", "\udc00x"])
def test_lone_surrogate_is_malformed_as_json_escape_and_as_raw_code_point(
    place: str, surrogate: str
) -> None:
    change: dict[str, Any] = (
        {"content": surrogate} if place == "content" else {"tags": [["t", surrogate]]}
    )
    d = VALID.to_dict() | change
    escaped = json.dumps(d, ensure_ascii=True)  # "\ud800" as a JSON escape
    assert "\\ud" in escaped
    assert _reason(escaped) == "malformed"
    assert _reason(escaped.encode("ascii")) == "malformed"
    raw = json.dumps(d, ensure_ascii=False)  # the code point itself inside a str
    assert surrogate[0] in raw
    assert _reason(raw) == "malformed"
    with pytest.raises(InvalidEvent) as info:
        Event.from_dict(d)
    assert info.value.reason == "malformed"


def test_surrogate_pair_escape_is_fine() -> None:
    event = _signed(content="\U0001f600")
    escaped = json.dumps(event.to_dict(), ensure_ascii=True)
    assert "\\ud83d\\ude00" in escaped
    assert Event.from_json(escaped) == event


def test_from_json_rejects_non_text_inputs() -> None:
    for value in (None, 5, {"id": 1}, ["x"]):
        with pytest.raises(InvalidEvent) as info:
            Event.from_json(value)  # type: ignore[arg-type]
        assert info.value.reason == "malformed"


def test_range_edges_are_accepted() -> None:
    for kind in (0, 65535):
        assert _signed(kind=kind).kind == kind
    for created_at in (0, 2**53 - 1):
        event = _signed(created_at=created_at)
        assert Event.from_json(event.to_json()).created_at == created_at


def test_a_timestamp_javascript_cannot_hold_is_refused_with_its_reason() -> None:
    """A sender (the reference signer, not ours) signs created_at = 2^53: a JavaScript client
    would read it as another number, so nostr-buzz refuses it at parse and says why."""
    refused = make(created_at=2**53)
    with pytest.raises(InvalidEvent) as info:
        Event.from_json(dumps(refused))
    assert info.value.reason == "malformed"
    assert "created_at must be an integer from 0 to 2^53-1" in str(info.value)
    assert Event.from_json(dumps(make(created_at=2**53 - 1))).created_at == 2**53 - 1
    with pytest.raises(InvalidEvent):
        sign_event(SECRET, kind=1, content="x", created_at=2**53)


# --- signing -----------------------------------------------------------------------------


def test_sign_event_is_deterministic_with_pinned_aux_and_random_without() -> None:
    assert _signed() == _signed()
    a = sign_event(SECRET, kind=1, content="x", created_at=1)
    b = sign_event(SECRET, kind=1, content="x", created_at=1)
    assert a.id == b.id and a.sig != b.sig


@pytest.mark.parametrize(
    "overrides",
    [
        {"kind": -1},
        {"kind": 65536},
        {"kind": "1"},
        {"kind": True},
        {"created_at": None},
        {"created_at": -5},
        {"created_at": 2**53},
        {"created_at": 2**63},
        {"content": 5},
        {"content": "\ud800"},
        {"tags": "e"},
        {"tags": None},
        {"tags": [[]]},
        {"tags": [["e", 5]]},
        {"tags": ["ee"]},
        {"tags": [5]},
        {"tags": [["t", "\udfff"]]},
    ],
)
def test_sign_event_bad_arguments_are_malformed(overrides: dict[str, Any]) -> None:
    with pytest.raises(InvalidEvent) as info:
        _signed(**overrides)
    assert info.value.reason == "malformed"


# --- hostile input: only InvalidEvent escapes ----------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

# Valid events with some fields replaced by arbitrary JSON: reaches the deeper checks.
mutated_events = st.builds(
    lambda changes: VALID.to_dict() | changes,
    st.dictionaries(st.sampled_from((*FIELDS, "extra")), json_values, max_size=3),
)


def _only_invalid_event(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except InvalidEvent as exc:
        assert exc.reason in ("malformed", "bad_id", "bad_pubkey", "bad_signature")


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values | mutated_events)
def test_arbitrary_json_only_raises_invalid_event(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    _only_invalid_event(Event.from_json, text)
    _only_invalid_event(Event.from_json, json.dumps(value))
    _only_invalid_event(Event.from_dict, value)


@settings(max_examples=1000, deadline=None)
@given(data=st.binary(max_size=300) | st.text(max_size=300))
def test_arbitrary_bytes_and_text_only_raise_invalid_event(data: bytes | str) -> None:
    _only_invalid_event(Event.from_json, data)
    if isinstance(data, bytes):
        _only_invalid_event(Event.from_json, bytearray(data))
        _only_invalid_event(Event.from_json, memoryview(data))


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(VALID.to_json()) - 1), junk=st.binary(max_size=4))
def test_truncated_or_spliced_event_only_raises_invalid_event(cut: int, junk: bytes) -> None:
    data = VALID.to_json().encode("utf-8")
    _only_invalid_event(Event.from_json, data[:cut] + junk + data[cut + len(junk) :])


# =================================================================================================
# Conformance: the event rules of docs/events.md checked from the text, with the independent
# BIP-340 reference signer of tests/support/reference.py; expected values never come from the
# code under test.
# =================================================================================================


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls",
    [
        InvalidEvent,
        InvalidKey,
        Nip19Error,
        Nip44Error,
        MetricError,
        ManifestError,
        TurnInputError,
        QueueError,
    ],
)
def test_every_error_is_a_buzz_error_and_value_error(cls: type[Exception]) -> None:
    assert issubclass(cls, BuzzError)
    assert issubclass(cls, ValueError)
    assert issubclass(BuzzError, ValueError)


@pytest.mark.parametrize("reason", ["malformed", "bad_id", "bad_pubkey", "bad_signature"])
def test_invalid_event_carries_reason(reason: str) -> None:
    err = InvalidEvent(reason)  # type: ignore[arg-type]
    assert err.reason == reason
    assert isinstance(err, BuzzError)


def test_public_api_names() -> None:
    for name in [
        "Event",
        "sign_event",
        "SecretKey",
        "PublicKey",
        "Profile",
        "BuzzError",
        "InvalidEvent",
        "InvalidKey",
        "Nip19Error",
        "Nip44Error",
        "MetricError",
        "ManifestError",
        "TurnInputError",
    ]:
        assert hasattr(nostr_buzz, name), name
    sig = inspect.signature(sign_event)
    params = sig.parameters
    assert list(params)[:5] == ["secret", "kind", "content", "tags", "created_at"]
    for name in ["kind", "content", "tags", "created_at"]:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["tags"].default == ()
    assert params["created_at"].default is inspect.Parameter.empty
    enc = inspect.signature(nip19.encode).parameters
    assert list(enc)[:2] == ["hrp", "value"]
    for name, default in [("relays", ()), ("author", None), ("kind", None)]:
        assert enc[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert enc[name].default == default
    for fn in (nip10.thread_ref, nip10.destination, nip10.channel, nip10.mentions):
        assert callable(fn)


# --- event parsing: valid shapes ----------------------------------------------------------------


def test_valid_event_fields_and_round_trip() -> None:
    d = make(tags=[["e", "x"], ["p", NPUB_HEX, "wss://r"]], content="hi")
    ev = Event.from_json(dumps(d))
    assert (ev.id, ev.pubkey, ev.created_at, ev.kind, ev.content, ev.sig) == (
        d["id"],
        d["pubkey"],
        d["created_at"],
        d["kind"],
        d["content"],
        d["sig"],
    )
    assert [list(t) for t in ev.tags] == d["tags"]
    assert ev.to_json() == dumps(d)


@pytest.mark.parametrize("wrap", [str, lambda s: s.encode(), lambda s: bytearray(s.encode())])
def test_from_json_accepts_str_bytes_bytearray(wrap: Any) -> None:
    d = make()
    ev = Event.from_json(wrap(dumps(d)))
    assert ev.id == d["id"]


def test_from_json_allows_insignificant_whitespace() -> None:
    d = make()
    assert Event.from_json(" \n" + json.dumps(d, indent=2) + "\n ").to_json() == dumps(d)


@pytest.mark.parametrize("created_at", [0, 2**53 - 1])
def test_created_at_bounds_valid(created_at: int) -> None:
    d = make(created_at=created_at)
    assert Event.from_json(dumps(d)).created_at == created_at


@pytest.mark.parametrize("kind", [0, 65535])
def test_kind_bounds_valid(kind: int) -> None:
    assert Event.from_json(dumps(make(kind=kind))).kind == kind


def test_empty_tag_list_is_valid() -> None:
    assert Event.from_json(dumps(make(tags=[]))).tags == ()


TRICKY = "".join(chr(c) for c in range(0x20)) + '\x7f"\\/<>&\u2028\u2029é中😀\U0010ffff\ufeff'


def test_to_json_byte_exact_for_tricky_strings() -> None:
    d = make(tags=[["t", TRICKY], ["e", "a/b", "<wss://x>"]], content=TRICKY)
    ev = Event.from_json(dumps(d).encode("utf-8"))
    out = ev.to_json()
    assert out == dumps(d)
    assert "\x7f" in out and "\u2028" in out and "😀" in out and '"a/b"' in out
    assert "\\u001f" in out and "\\b" in out and "\\f" in out and "\\u0000" in out


def test_to_json_matches_official_events() -> None:
    for raw in load_json(VECTORS / "nip01-events.json"):
        obj = raw if isinstance(raw, dict) else raw["event"]
        ev = Event.from_json(json.dumps(obj))
        keys = ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"]
        assert ev.to_json() == dumps({k: obj[k] for k in keys})
        assert ev.id == ref_id(
            obj["pubkey"], obj["created_at"], obj["kind"], obj["tags"], obj["content"]
        )


# --- event parsing: malformed ---------------------------------------------------------------------


def _mutated(**changes: Any) -> str:
    d = make()
    d.update(changes)
    return dumps(d)


@pytest.mark.parametrize(
    "doc",
    [
        "",
        "not json",
        "[]",
        "null",
        '"event"',
        "{}",
        b"\xff\xfe",
        dumps(make())[:-1],
        dumps(make()) + "x",
        dumps(make()).encode("utf-8").replace(b'"hello"', b'"hel\xc3lo"'),
    ],
)
def test_malformed_documents(doc: str | bytes) -> None:
    assert reason_of(doc) == "malformed"


@pytest.mark.parametrize("field", ["id", "pubkey", "sig"])
def test_uppercase_hex_malformed(field: str) -> None:
    d = make()
    d[field] = d[field].upper()
    assert reason_of(dumps(d)) == "malformed"


@pytest.mark.parametrize("field", ["id", "pubkey", "sig"])
@pytest.mark.parametrize("how", ["short", "long", "nonhex", "number", "null"])
def test_bad_hex_field_shape_malformed(field: str, how: str) -> None:
    d = make()
    v = d[field]
    d[field] = {"short": v[:-1], "long": v + "0", "nonhex": "g" + v[1:], "number": 1, "null": None}[
        how
    ]
    assert reason_of(dumps(d)) == "malformed"


@pytest.mark.parametrize(
    "raw",
    [
        "-1",
        "9223372036854775808",
        "18446744073709551616",
        "1e3",
        "1.0",
        "true",
        '"1"',
        "null",
        "[1]",
    ],
)
def test_bad_created_at_malformed(raw: str) -> None:
    d = make()
    doc = dumps(d).replace(f'"created_at":{d["created_at"]}', f'"created_at":{raw}')
    assert raw in doc
    assert reason_of(doc) == "malformed"


@pytest.mark.parametrize("raw", ["-1", "65536", "1.0", "1e0", "true", "false", '"1"', "null"])
def test_bad_kind_malformed(raw: str) -> None:
    d = make()
    doc = dumps(d).replace('"kind":1,', f'"kind":{raw},')
    assert raw in doc
    assert reason_of(doc) == "malformed"


@pytest.mark.parametrize(
    "tags",
    [
        [[]],
        [["e", 1]],
        [["e", None]],
        [[1]],
        ["e"],
        [["e"], []],
        {"e": "x"},
        None,
        "e",
        [["e", ["x"]]],
        [["e", True]],
    ],
)
def test_bad_tags_malformed(tags: Any) -> None:
    # A correct id over the bad tags: the structural step must catch it before the id step.
    assert reason_of(dumps(make(tags=tags))) == "malformed"


@pytest.mark.parametrize("content", [None, 1, ["x"], {"a": "b"}, True])
def test_bad_content_malformed(content: Any) -> None:
    assert reason_of(dumps(make(content=content))) == "malformed"


@pytest.mark.parametrize("data", [None, 123, 1.5, ["{}"], {"id": "x"}])
def test_from_json_non_text_input_is_typed(data: Any) -> None:
    with pytest.raises(BuzzError):
        Event.from_json(data)


def test_bad_id_even_if_signature_matches_stated_id() -> None:
    # A self-consistent id/sig pair over other content: the id is recomputed, never trusted.
    d = make(content="a")
    other = make(content="b")
    d["id"], d["sig"] = other["id"], other["sig"]
    assert reason_of(dumps(d)) == "bad_id"


def test_bad_pubkey_x_not_a_field_element() -> None:
    d = make()
    d["pubkey"] = "f" * 64  # >= p
    d = with_fixed_id(d)
    assert reason_of(dumps(d)) == "bad_pubkey"


@pytest.mark.parametrize("sig", ["0" * 128, "f" * 128, "f" * 64 + "0" * 64, "0" * 64 + "f" * 64])
def test_degenerate_signatures_are_bad_signature(sig: str) -> None:
    d = make()
    d["sig"] = sig
    assert reason_of(dumps(d)) == "bad_signature"


def test_precedence_malformed_beats_bad_id() -> None:
    d = make()
    d["content"] = "tampered"  # bad id
    d["sig"] = d["sig"].upper()  # and malformed
    assert reason_of(dumps(d)) == "malformed"
    d2 = make()
    d2["kind"] = 70000
    assert reason_of(dumps(d2)) == "malformed"
    d3 = make()
    d3["tags"] = [[]]
    assert reason_of(dumps(d3)) == "malformed"


def test_precedence_bad_id_beats_bad_pubkey() -> None:
    d = make()
    d["pubkey"] = OFF_CURVE  # id not recomputed: both wrong
    assert reason_of(dumps(d)) == "bad_id"


def test_precedence_bad_pubkey_beats_bad_signature() -> None:
    d = make()
    d["pubkey"] = OFF_CURVE
    d = with_fixed_id(d)
    d["sig"] = "0" * 128
    assert reason_of(dumps(d)) == "bad_pubkey"


def test_precedence_bad_id_beats_bad_signature() -> None:
    d = make()
    d["content"] = "other"
    d["sig"] = "1" * 128
    assert reason_of(dumps(d)) == "bad_id"


def test_event_constructor_always_verifies() -> None:
    d = make()
    args = [d["id"], d["pubkey"], d["created_at"], d["kind"], (), "tampered", d["sig"]]
    with pytest.raises(InvalidEvent) as info:
        Event(*args)
    assert info.value.reason == "bad_id"


# --- signing ------------------------------------------------------------------------------------


def test_sign_event_matches_independent_signer() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    tags = [["e", "x", "", "root"], ["t", TRICKY]]
    ev = sign_event(sk, kind=9, content=TRICKY, tags=tags, created_at=5, aux_rand=AUX0)
    eid = ref_id(ref_pubkey(NSEC_HEX), 5, 9, tags, TRICKY)
    assert ev.id == eid
    assert ev.pubkey == ref_pubkey(NSEC_HEX)
    assert ev.sig == ref_sign(NSEC_HEX, eid, AUX0)
    assert ev.to_json() == dumps(make(created_at=5, kind=9, tags=tags, content=TRICKY))


def test_sign_event_default_aux_is_random_and_valid() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    a = sign_event(sk, kind=1, content="x", created_at=1)
    b = sign_event(sk, kind=1, content="x", created_at=1)
    assert a.id == b.id
    assert a.sig != b.sig
    assert ref_verify(a.pubkey, a.id, a.sig) and ref_verify(b.pubkey, b.id, b.sig)
    assert a.tags == ()


def test_sign_event_requires_created_at() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    with pytest.raises(TypeError):
        sign_event(sk, kind=1, content="x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        sign_event(sk, 1, "x", (), 1)  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"created_at": "1"},
        {"created_at": 1.0},
        {"created_at": True},
        {"created_at": None},
        {"created_at": -1},
        {"created_at": 2**53},
        {"created_at": 2**63},
        {"kind": 65536},
        {"kind": -1},
        {"kind": True},
        {"kind": 1.0},
        {"kind": "1"},
        {"content": None},
        {"content": b"x"},
        {"content": 1},
        {"content": "\ud800"},
        {"tags": [["e", 1]]},
        {"tags": [[]]},
        {"tags": ["e"]},
        {"tags": "e"},
        {"tags": None},
        {"tags": [["e", None]]},
        {"tags": [["\udc00"]]},
        {"tags": 5},
        {"tags": [[b"e"]]},
        {"tags": [{"e": "x"}]},
        {"tags": [{"e"}]},
        {"tags": {("e", "x")}},
        {"tags": {"e": "x"}},
        {"tags": [iter(["e", "x"])]},
        {"tags": [range(2)]},
        {"aux_rand": bytes(31)},
        {"aux_rand": "0" * 64},
    ],
)
def test_sign_event_refuses_every_wrongly_typed_argument(kwargs: dict[str, Any]) -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    args: dict[str, Any] = {"kind": 1, "content": "x", "tags": (), "created_at": 1}
    args.update(kwargs)
    with pytest.raises(InvalidEvent) as info:
        sign_event(sk, **args)
    assert info.value.reason == "malformed"


def test_sign_event_accepts_tuples_and_max_values() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    ev = sign_event(sk, kind=65535, content="", tags=(("a",), ("b", "c")), created_at=2**53 - 1)
    assert ev.tags == (("a",), ("b", "c"))
    assert ev.id == ref_id(ev.pubkey, 2**53 - 1, 65535, [["a"], ["b", "c"]], "")
    assert Event.from_json(ev.to_json()) == ev


def test_sign_event_accepts_any_ordered_iterable_of_tags() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    ev = sign_event(sk, kind=1, content="", tags=(list(t) for t in [("a", "b")]), created_at=1)
    assert ev.tags == (("a", "b"),)


def test_sign_event_secret_forms() -> None:
    # docs/events.md does not pin the secret's type: a SecretKey, 64-hex and nsec all sign alike.
    expected = ref_sign(NSEC_HEX, ref_id(ref_pubkey(NSEC_HEX), 1, 1, [], "x"), AUX0)
    for secret in (SecretKey.from_str(NSEC_HEX), NSEC_HEX, NSEC_HEX.upper(), NSEC):
        ev = sign_event(secret, kind=1, content="x", created_at=1, aux_rand=AUX0)
        assert ev.sig == expected


@pytest.mark.parametrize("secret", [NSEC_HEX[:-1], NPUB, None, 5, bytes.fromhex(NSEC_HEX)])
def test_sign_event_rejects_non_key_secret(secret: Any) -> None:
    with pytest.raises(InvalidKey) as info:  # every key problem is InvalidKey
        sign_event(secret, kind=1, content="x", created_at=1)
    assert "secret key" in str(info.value)
    assert NSEC_HEX[:-1] not in str(info.value)


# --- more parsing edges -------------------------------------------------------------------------


def test_tag_of_one_empty_string_is_valid() -> None:
    d = make(tags=[[""], ["", ""]])
    assert Event.from_json(dumps(d)).tags == (("",), ("", ""))


def test_escaped_surrogate_pair_is_one_character() -> None:
    d = make(content="😀")
    doc = dumps(d).replace("😀", "\\ud83d\\ude00")
    assert "\\ud83d" in doc
    ev = Event.from_json(doc)
    assert ev.content == "😀"
    assert ev.to_json() == dumps(d)


def test_negative_zero_reads_as_zero_and_id_covers_it() -> None:
    d = make(created_at=0)
    doc = dumps(d).replace('"created_at":0', '"created_at":-0')
    assert Event.from_json(doc).to_json() == dumps(d)


def test_deeply_nested_unknown_field_is_malformed_not_a_crash() -> None:
    doc = dumps(make())[:-1] + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}"
    try:
        Event.from_json(doc)
    except InvalidEvent as exc:
        assert exc.reason == "malformed"


def test_lone_surrogate_in_unknown_field_is_malformed() -> None:
    doc = dumps(make())[:-1] + ',"x":"\\ud800"}'
    assert reason_of(doc) == "malformed"


def test_tag_values() -> None:
    A, B = "a" * 64, "b" * 64
    e = Event.from_json(dumps(make(tags=[["p", A], ["p"], ["t", "x"], ["p", B, "r"]])))
    assert e.tag_values("p") == [A, B]
    assert e.tag_values("q") == []


# --- reason precedence: random combinations of faults against a reference classifier ------------


def _on_curve(x_hex: str) -> bool:
    x = int(x_hex, 16)
    return x < P_FIELD and pow((x**3 + 7) % P_FIELD, (P_FIELD - 1) // 2, P_FIELD) == 1


def ref_reason(d: dict[str, Any]) -> str | None:
    """docs/events.md's cheap-first order, written independently; None means valid."""

    def hexn(v: Any, n: int) -> bool:
        return isinstance(v, str) and len(v) == n and all(c in "0123456789abcdef" for c in v)

    def int_in(v: Any, hi: int) -> bool:
        return type(v) is int and 0 <= v <= hi

    tags = d["tags"]
    tags_ok = isinstance(tags, list) and all(
        isinstance(t, list) and t and all(isinstance(x, str) for x in t) for t in tags
    )
    if not (
        hexn(d["id"], 64)
        and hexn(d["pubkey"], 64)
        and hexn(d["sig"], 128)
        and int_in(d["created_at"], 2**53 - 1)
        and int_in(d["kind"], 65535)
        and tags_ok
        and isinstance(d["content"], str)
    ):
        return "malformed"
    if ref_id(d["pubkey"], d["created_at"], d["kind"], d["tags"], d["content"]) != d["id"]:
        return "bad_id"
    if not _on_curve(d["pubkey"]):
        return "bad_pubkey"
    try:
        ok = ref_verify(d["pubkey"], d["id"], d["sig"])
    except ValueError:
        ok = False
    return None if ok else "bad_signature"


_FIELD_FAULTS: dict[str, tuple[str, Any]] = {
    # fault: (field, value) applied before the id is computed; the class each one causes alone.
    "pub_upper": ("pubkey", ref_pubkey(NSEC_HEX).upper()),  # malformed
    "pub_short": ("pubkey", "ab"),  # malformed
    "pub_off_curve": ("pubkey", OFF_CURVE),  # bad_pubkey
    "pub_not_field_element": ("pubkey", "f" * 64),  # bad_pubkey
    "pub_other_key": ("pubkey", ref_pubkey(SK2_HEX)),  # bad_signature
    "created_at_2_53": ("created_at", 2**53),
    "created_at_2_63": ("created_at", 2**63),
    "created_at_negative": ("created_at", -1),
    "created_at_float": ("created_at", 1.5),
    "created_at_bool": ("created_at", True),
    "kind_65536": ("kind", 65536),
    "kind_float": ("kind", 1.0),
    "tags_empty_tag": ("tags", [[]]),
    "tags_number": ("tags", [["e", 1]]),
    "content_null": ("content", None),
}


_LATE_FAULTS = [
    "id_other",
    "id_upper",
    "sig_upper",
    "sig_short",
    "sig_zeros",
    "sig_other_key",
    "sig_flipped",
    "content_changed",
]


@settings(max_examples=400, deadline=None)
@given(st.sets(st.sampled_from([*_FIELD_FAULTS, *_LATE_FAULTS]), max_size=3))
def test_reason_precedence_matches_reference(faults: set[str]) -> None:
    d: dict[str, Any] = {
        "pubkey": ref_pubkey(NSEC_HEX),
        "created_at": 1,
        "kind": 1,
        "tags": [["t", "\u2028/<"]],
        "content": "\x00\x7f😀",
    }
    for fault in sorted(faults & set(_FIELD_FAULTS)):
        field, value = _FIELD_FAULTS[fault]
        d[field] = value
    eid = ref_id(d["pubkey"], d["created_at"], d["kind"], d["tags"], d["content"])
    d["id"] = hashlib.sha256(b"x").hexdigest() if "id_other" in faults else eid
    sig = ref_sign(NSEC_HEX, d["id"])
    if "id_upper" in faults:
        d["id"] = d["id"].upper()
    if "sig_other_key" in faults:
        sig = ref_sign(SK2_HEX, d["id"].lower())
    if "sig_zeros" in faults:
        sig = "0" * 128
    if "sig_flipped" in faults:
        sig = sig[:-1] + ("0" if sig[-1] != "0" else "1")
    if "sig_upper" in faults:
        sig = sig.upper()
    if "sig_short" in faults:
        sig = sig[:-2]
    d["sig"] = sig
    if "content_changed" in faults and isinstance(d["content"], str):
        d["content"] += "!"
    expected = ref_reason(d)
    if not faults:
        assert expected is None
    doc = json.dumps(d, ensure_ascii=False)
    if expected is None:
        assert Event.from_json(doc).to_json() == dumps(
            {k: d[k] for k in ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"]}
        )
    else:
        assert reason_of(doc) == expected


@pytest.mark.parametrize("first", ["5", "null", '"XYZ"', "[1]", '{"a":1}', "true"])
@pytest.mark.parametrize("field", ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"])
def test_duplicated_key_earlier_value_of_wrong_type_is_discarded(first: str, field: str) -> None:
    # "for a duplicated key the last one wins": an earlier occurrence, whatever its type, is
    # not what was read.
    d = make()
    doc = "{" + json.dumps(field) + ":" + first + "," + dumps(d)[1:]
    assert Event.from_json(doc).to_json() == dumps(d)


@pytest.mark.parametrize("last", ["5", "null", '"XYZ"', "[1]", "1.5"])
@pytest.mark.parametrize("field", ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"])
def test_duplicated_key_last_value_of_wrong_type_is_malformed(last: str, field: str) -> None:
    d = make()
    doc = dumps(d)[:-1] + "," + json.dumps(field) + ":" + last + "}"
    # A well-typed last value is read, and then the id no longer covers it.
    well_typed = {("created_at", "5"), ("kind", "5"), ("content", '"XYZ"')}
    assert reason_of(doc) == ("bad_id" if (field, last) in well_typed else "malformed")


# =================================================================================================
# Interop: nostr-sdk (rust-nostr's Python bindings) as an independent oracle for ids and
# signatures.
# =================================================================================================


OUR_SECRET = SecretKey(bytes.fromhex("5a" * 32))


SDK_KEYS = sdk.Keys.parse("6b" * 32)


# Characters the serializations most often disagree on, mixed into ordinary random text.
SDK_TRICKY = (
    [chr(c) for c in range(0x20)]
    + ["\x7f", "\u0085", "\u00a0", "\u2028", "\u2029", "\ufeff", "\ufffd", "\uffff"]
    + list("<>&\"\\/'")
    + ["\U0001f600", "\U0001f469", "\u200d", "\U0001f4bb", "\U00010348", "\U0010ffff", "é", "中"]
)


# Any Unicode scalar value: surrogates are not encodable as UTF-8 and are tested elsewhere.
scalar_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


texts = scalar_text | st.text(st.sampled_from(SDK_TRICKY), max_size=40)


tags = st.lists(st.lists(texts, min_size=1, max_size=5), max_size=6)


kinds = st.integers(min_value=0, max_value=65535)


timestamps = st.integers(min_value=0, max_value=2**53 - 1) | st.integers(0, 2_000_000_000)


PROPERTY = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sdk_id(pubkey_hex: str, created_at: int, kind: int, tag_list: Any, content: str) -> str:
    return sdk.EventId.compute(
        sdk.PublicKey.parse(pubkey_hex),
        sdk.Timestamp.from_secs(created_at),
        sdk.Kind(kind),
        [sdk.Tag.parse(list(t)) for t in tag_list],
        content,
    ).to_hex()


@PROPERTY
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_our_id_equals_sdk_id_and_sdk_verifies_our_signature(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    ours = sign_event(OUR_SECRET, kind=kind, content=content, tags=tag_list, created_at=created_at)
    assert ours.id == _sdk_id(ours.pubkey, created_at, kind, tag_list, content)
    theirs = sdk.Event.from_json(ours.to_json())
    assert theirs.id().to_hex() == ours.id
    assert theirs.verify_id()
    assert theirs.verify_signature()
    # Same canonical bytes both ways.
    assert theirs.as_json() == ours.to_json()


@PROPERTY
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_sdk_signed_events_verify_with_ours(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    theirs = (
        sdk.EventBuilder(sdk.Kind(kind), content)
        .tags([sdk.Tag.parse(t) for t in tag_list])
        .custom_created_at(sdk.Timestamp.from_secs(created_at))
        .finalize(SDK_KEYS)
    )
    ours = Event.from_json(theirs.as_json())
    assert ours.id == theirs.id().to_hex()
    assert ours.pubkey == SDK_KEYS.public_key().to_hex()
    assert (ours.kind, ours.created_at, ours.content) == (kind, created_at, content)
    assert [list(t) for t in ours.tags] == tag_list
    # The JSON-escaped spelling (\uXXXX for everything non-ASCII) verifies too.
    assert Event.from_json(json.dumps(json.loads(theirs.as_json()), ensure_ascii=True)) == ours


@settings(max_examples=200, deadline=None)
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_compute_id_alone_matches_sdk(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    pubkey = SDK_KEYS.public_key().to_hex()
    assert compute_id(pubkey, created_at, kind, tag_list, content) == _sdk_id(
        pubkey, created_at, kind, tag_list, content
    )


def test_sdk_agrees_on_every_real_event() -> None:
    for raw in load_json(VECTORS / "nip01-events.json"):
        ours = Event.from_json(json.dumps(raw))
        theirs = sdk.Event.from_json(json.dumps(raw))
        assert theirs.verify()
        assert theirs.id().to_hex() == ours.id
        assert theirs.as_json() == ours.to_json()


def test_sdk_rejects_what_we_call_tampered() -> None:
    ours = sign_event(OUR_SECRET, kind=1, content="x", created_at=1)
    d = ours.to_dict() | {"content": "y"}
    theirs = sdk.Event.from_json(json.dumps(d))
    assert not theirs.verify_id()
