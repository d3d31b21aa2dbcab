"""NIP-01 event model: real events, canonical output, tampering reasons, hostile input."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import InvalidEvent
from nostr_buzz.event import Event, compute_id, sign_event
from nostr_buzz.keys import SecretKey
from tests.support.data import VECTORS, load_json

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
    for created_at in (0, 2**63 - 1):
        event = _signed(created_at=created_at)
        assert Event.from_json(event.to_json()).created_at == created_at


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


def test_sign_event_rejects_a_non_key_and_bad_aux() -> None:
    with pytest.raises(InvalidEvent):
        sign_event(SECRET.hex[:-1], kind=1, content="", created_at=0)
    with pytest.raises(InvalidEvent):
        sign_event(b"\x01" * 32, kind=1, content="", created_at=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent):
        sign_event(SECRET, kind=1, content="", created_at=0, aux_rand=b"short")


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
