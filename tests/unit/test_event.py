"""NIP-01 event model: real events, canonical output, tampering reasons, hostile input; then the
conformance cases of docs/events.md (events, keys, NIP-19, routing, profiles)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from typing import Any

import coincurve
import msgspec
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
    Profile,
    PublicKey,
    QueueError,
    TurnInputError,
)
from nostr_buzz.errors import InvalidEvent
from nostr_buzz.event import Event, compute_id, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip19
from nostr_buzz.nips.nip19 import EventPointer, ProfilePointer
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
# Conformance: docs/events.md (events, keys, NIP-19, routing, profiles) checked from the text,
# with a tiny independent BIP-340 reference signer below; expected values never come from the code
# under test.
# =================================================================================================


# NIP-19 examples (docs/events.md).
NPUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"


NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"


NSEC_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"


NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"


SK2_HEX = "0000000000000000000000000000000000000000000000000000000000000003"


AUX0 = bytes(32)


P_FIELD = 2**256 - 2**32 - 977


N_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


# --- independent re-implementations -------------------------------------------------------------


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


@pytest.mark.parametrize("created_at", [0, 2**63 - 1])
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
    ev = sign_event(sk, kind=65535, content="", tags=(("a",), ("b", "c")), created_at=2**63 - 1)
    assert ev.tags == (("a",), ("b", "c"))
    assert ev.id == ref_id(ev.pubkey, 2**63 - 1, 65535, [["a"], ["b", "c"]], "")
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
    with pytest.raises(InvalidEvent) as info:
        sign_event(secret, kind=1, content="x", created_at=1)
    assert info.value.reason == "malformed"
    assert NSEC_HEX[:-1] not in str(info.value)


# --- keys ---------------------------------------------------------------------------------------


def test_nip19_key_examples_round_trip() -> None:
    assert PublicKey.from_str(NPUB).hex == NPUB_HEX
    assert PublicKey.from_str(NPUB_HEX).bech32 == NPUB
    assert SecretKey.from_str(NSEC).hex == NSEC_HEX
    assert SecretKey.from_str(NSEC_HEX).bech32 == NSEC
    assert nip19.encode("npub", NPUB_HEX) == NPUB
    assert nip19.encode("nsec", bytes.fromhex(NSEC_HEX)) == NSEC
    assert nip19.decode(NPUB) == ("npub", NPUB_HEX)
    assert nip19.decode(NSEC) == ("nsec", NSEC_HEX)


def test_secret_key_forms() -> None:
    expected_pub = ref_pubkey(NSEC_HEX)
    for text in [NSEC_HEX, NSEC_HEX.upper(), NSEC, NSEC.upper()]:
        sk = SecretKey.from_str(text)
        assert sk.hex == NSEC_HEX
        assert sk.bech32 == NSEC
        assert sk.public_key.hex == expected_pub
        assert isinstance(sk.public_key, PublicKey)


def test_public_key_forms() -> None:
    for text in [NPUB_HEX, NPUB, NPUB.upper()]:
        pk = PublicKey.from_str(text)
        assert pk.hex == NPUB_HEX
        assert pk.bech32 == NPUB


def test_properties_not_methods() -> None:
    for cls, names in [
        (SecretKey, ["hex", "bech32", "public_key"]),
        (PublicKey, ["hex", "bech32"]),
    ]:
        for name in names:
            attr = inspect.getattr_static(cls, name)
            assert isinstance(attr, (property, functools.cached_property)), (cls, name)


def test_generate() -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    assert a.hex != b.hex
    assert len(a.hex) == 64 and a.hex == a.hex.lower()
    assert a.public_key.hex == ref_pubkey(a.hex)


def test_secret_hidden_in_repr_and_str() -> None:
    sk = SecretKey.from_str(NSEC_HEX)
    for text in (repr(sk), str(sk), f"{sk}", f"{sk!r}", repr([sk]), repr({"k": sk})):
        assert NSEC_HEX not in text and NSEC not in text
        assert NSEC_HEX[:16] not in text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (NSEC, "expected npub, got nsec"),
        (nip19.encode("note", NSEC_HEX), "expected npub"),
    ],
)
def test_public_key_wrong_hrp(text: str, needle: str) -> None:
    with pytest.raises(InvalidKey) as info:
        PublicKey.from_str(text)
    msg = str(info.value)
    assert needle in msg
    assert text not in msg and text.lower() not in msg and NSEC_HEX not in msg


def test_secret_key_wrong_hrp() -> None:
    with pytest.raises(InvalidKey) as info:
        SecretKey.from_str(NPUB)
    msg = str(info.value)
    assert "expected nsec" in msg and "npub" in msg
    assert NPUB not in msg and NPUB_HEX not in msg


BAD_KEY_INPUTS = [
    "",
    NSEC_HEX[:-1],
    NSEC_HEX + "0",
    "g" + NSEC_HEX[1:],
    NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p"),
    NSEC[:10] + NSEC[10:].upper(),
    "nsec1" + "q" * 20,
    NSEC_HEX + "\n" + NSEC_HEX,
    "0x" + NSEC_HEX[2:],
]


@pytest.mark.parametrize("text", BAD_KEY_INPUTS)
def test_bad_secret_key_inputs(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        SecretKey.from_str(text)
    msg = str(info.value)
    assert msg
    if text:
        assert text not in msg and text.strip() not in msg and NSEC_HEX not in msg


@pytest.mark.parametrize("value", [0, N_ORDER, N_ORDER + 1, 2**256 - 1])
def test_secret_key_out_of_range(value: int) -> None:
    with pytest.raises(InvalidKey):
        SecretKey.from_str(f"{value:064x}")


@pytest.mark.parametrize(
    "text",
    [
        "",
        NPUB_HEX[:-1],
        NPUB[:-1] + "x",
        NPUB[:12] + NPUB[12:].upper(),
        OFF_CURVE,
        "f" * 64,
        nip19.encode("npub", OFF_CURVE),
    ],
)
def test_bad_public_key_inputs(text: str) -> None:
    with pytest.raises(InvalidKey) as info:
        PublicKey.from_str(text)
    if text:
        assert text not in str(info.value)


@pytest.mark.parametrize("bad", [None, 5, b"00" * 32, [NSEC_HEX]])
def test_key_from_str_non_str_is_typed(bad: Any) -> None:
    with pytest.raises(InvalidKey):
        SecretKey.from_str(bad)
    with pytest.raises(InvalidKey):
        PublicKey.from_str(bad)


@pytest.mark.parametrize("pad", [" ", "\n", "\t", " \n"])
def test_surrounding_whitespace_never_escapes_untyped(pad: str) -> None:
    # docs/events.md does not say whether whitespace is trimmed; either the key parses to the same
    # value or InvalidKey is raised — and the secret never appears in the message.
    for text, cls, hexval in [
        (pad + NSEC_HEX + pad, SecretKey, NSEC_HEX),
        (pad + NSEC + pad, SecretKey, NSEC_HEX),
        (pad + NPUB + pad, PublicKey, NPUB_HEX),
    ]:
        try:
            key = cls.from_str(text)  # type: ignore[attr-defined]
        except InvalidKey as exc:
            assert NSEC_HEX not in str(exc) and NSEC not in str(exc)
        else:
            assert key.hex == hexval


# --- NIP-19 -------------------------------------------------------------------------------------

EID = "b9f5441e45ca39179320e0031cfb18e34078673dcc3d3e3a3b3a981760aa5696"


def test_note_round_trip_and_bytes_value() -> None:
    s = nip19.encode("note", EID)
    assert s == ref_bech32("note", bytes.fromhex(EID))
    assert nip19.encode("note", bytes.fromhex(EID)) == s
    assert nip19.decode(s) == ("note", EID)
    assert nip19.decode(s.upper()) == ("note", EID)


def test_nevent_round_trip_with_all_fields() -> None:
    s = nip19.encode(
        "nevent", EID, relays=("wss://a.example", "wss://b.example"), author=NPUB_HEX, kind=30023
    )
    hrp, ptr = nip19.decode(s)
    assert hrp == "nevent"
    assert isinstance(ptr, EventPointer)
    assert ptr.id == EID
    assert tuple(ptr.relays) == ("wss://a.example", "wss://b.example")
    assert ptr.author == NPUB_HEX
    assert ptr.kind == 30023
    assert ptr == EventPointer(EID, ptr.relays, NPUB_HEX, 30023)


def test_nevent_minimal() -> None:
    s = nip19.encode("nevent", EID)
    assert s == ref_bech32("nevent", tlv(0, bytes.fromhex(EID)))
    _hrp, ptr = nip19.decode(s)
    assert isinstance(ptr, EventPointer)
    assert (ptr.id, tuple(ptr.relays), ptr.author, ptr.kind) == (EID, (), None, None)


def test_nevent_independent_encoding_decodes() -> None:
    payload = (
        tlv(0, bytes.fromhex(EID))
        + tlv(1, b"wss://r.one")
        + tlv(9, b"future-extension")  # unknown TLV type: ignored
        + tlv(2, bytes.fromhex(NPUB_HEX))
        + tlv(3, (1111).to_bytes(4, "big"))
        + tlv(1, b"wss://r.two")
    )
    hrp, ptr = nip19.decode(ref_bech32("nevent", payload))
    assert hrp == "nevent"
    assert isinstance(ptr, EventPointer)
    assert ptr.id == EID
    assert tuple(ptr.relays) == ("wss://r.one", "wss://r.two")
    assert ptr.author == NPUB_HEX
    assert ptr.kind == 1111


def test_nprofile_nip19_example() -> None:
    s = (
        "nprofile1qqsrhuxx8l9ex335q7he0f09aej04zpazpl0ne2cgukyawd24mayt8gpp4mhxue69uhhytnc9e3k7mgp"
        "z4mhxue69uhkg6nzv9ejuumpv34kytnrdaksjlyr9p"
    )
    hrp, ptr = nip19.decode(s)
    assert hrp == "nprofile"
    assert isinstance(ptr, ProfilePointer)
    assert ptr.pubkey == "3bf0c63fcb93463407af97a5e5ee64fa883d107ef9e558472c4eb9aaaefa459d"
    assert tuple(ptr.relays) == ("wss://r.x.com", "wss://djbas.sadkb.com")
    again = nip19.encode("nprofile", ptr.pubkey, relays=ptr.relays)
    assert nip19.decode(again) == (hrp, ptr)
    assert ptr == ProfilePointer(ptr.pubkey, ptr.relays)


def test_long_strings_allowed_up_to_cap() -> None:
    relays = [f"wss://relay{i:03d}.example.com" for i in range(90)]
    payload = tlv(0, bytes.fromhex(EID)) + b"".join(tlv(1, r.encode()) for r in relays)
    s = ref_bech32("nevent", payload)
    assert 90 < len(s) <= 5000
    _hrp, ptr = nip19.decode(s)
    assert isinstance(ptr, EventPointer) and tuple(ptr.relays) == tuple(relays)


def test_over_cap_refused() -> None:
    relays = [f"wss://relay{i:03d}.example.com" for i in range(120)]
    payload = tlv(0, bytes.fromhex(EID)) + b"".join(tlv(1, r.encode()) for r in relays)
    s = ref_bech32("nevent", payload)
    assert len(s) > 5000
    with pytest.raises(Nip19Error):
        nip19.decode(s)
    with pytest.raises(Nip19Error):
        nip19.decode("n" * 5001)
    # The encoder never produces what the decoder refuses.
    with pytest.raises(Nip19Error):
        nip19.encode("nevent", EID, relays=tuple(relays))
    with pytest.raises(Nip19Error):
        nip19.encode("nprofile", NPUB_HEX, relays=tuple(relays))


@pytest.mark.parametrize(
    "s",
    [
        NPUB[:-1] + ("q" if NPUB[-1] != "q" else "p"),
        NPUB[:8] + NPUB[8:].upper(),
        "Npub" + NPUB[4:],
        "",
        "npub",
        "npub1",
        NPUB + "q",
        "nope1qqqqqqqqqqqqqqqqqqqq",
        ref_bech32("npub", bytes(31)),
        ref_bech32("npub", bytes(33)),
        ref_bech32("nevent", tlv(1, b"wss://no.id")),
        ref_bech32("nevent", tlv(0, bytes(31))),
        ref_bech32("nevent", tlv(0, bytes.fromhex(EID)) + b"\x03\x02\x00\x01"),
        ref_bech32("nevent", tlv(0, bytes.fromhex(EID)) + b"\x01\x05ab"),
        ref_bech32("nprofile", tlv(1, b"wss://x")),
        "npub1 " + NPUB[5:],
    ],
)
def test_decode_errors(s: str) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(s)


@pytest.mark.parametrize("bad", [None, 5, NPUB.encode()])
def test_decode_non_str_is_typed(bad: Any) -> None:
    with pytest.raises(Nip19Error):
        nip19.decode(bad)


@pytest.mark.parametrize(
    ("hrp", "value", "kw"),
    [
        ("npub", NPUB_HEX[:-1], {}),
        ("npub", "zz" * 32, {}),
        ("npub", bytes(31), {}),
        ("nfoo", NPUB_HEX, {}),
        ("nevent", EID, {"kind": 2**32}),
        ("nevent", EID, {"kind": -1}),
        ("nevent", EID, {"author": "xyz"}),
        ("nevent", EID, {"relays": ("x" * 300,)}),
    ],
)
def test_encode_errors(hrp: str, value: Any, kw: dict[str, Any]) -> None:
    with pytest.raises(Nip19Error):
        nip19.encode(hrp, value, **kw)


# --- NIP-10 routing -----------------------------------------------------------------------------

A = "a" * 64


B = "b" * 64


C = "c" * 64


R = "1" * 64


P = "2" * 64


_SK = SecretKey.from_str(NSEC_HEX)


def ev(kind: int = 1, tags: list[list[str]] | None = None) -> Event:
    return sign_event(_SK, kind=kind, content="x", tags=tags or [], created_at=1, aux_rand=AUX0)


def route(e: Event) -> tuple[str | None, str | None, str]:
    ref = nip10.thread_ref(e)
    return ref.root, ref.parent, nip10.destination(e)


def test_thread_ref_is_named_tuple() -> None:
    e = ev()
    ref = nip10.thread_ref(e)
    assert isinstance(ref, tuple)
    assert ref._fields == ("root", "parent")  # type: ignore[attr-defined]
    assert ref == (None, None)
    assert nip10.destination(e) == e.id


@pytest.mark.parametrize("kind", [1, 9, 7, 1111])
def test_top_level(kind: int) -> None:
    e = ev(kind, [["p", A], ["t", "x"]])
    assert route(e) == (None, None, e.id)


@pytest.mark.parametrize("kind", [1, 9, 42])
def test_marked_rows(kind: int) -> None:
    assert route(ev(kind, [["e", R, "", "root"], ["e", P, "", "reply"]]))[:3] == (R, P, R)
    assert route(ev(kind, [["e", P, "wss://x", "reply"], ["e", R, "wss://y", "root"]])) == (R, P, R)
    assert route(ev(kind, [["e", R, "", "root"]])) == (R, R, R)
    assert route(ev(kind, [["e", P, "", "reply"]])) == (P, P, P)
    # A 5th element (NIP-10 pubkey) does not stop a tag from being marked.
    assert route(ev(kind, [["e", R, "", "root", A]])) == (R, R, R)


def test_last_valid_marker_wins() -> None:
    tags = [
        ["e", A, "", "root"],
        ["e", B, "", "root"],
        ["e", C.upper(), "", "root"],
        ["e", P, "", "reply"],
        ["e", "short", "", "reply"],
    ]
    assert route(ev(1, tags)) == (B, P, B)


def test_three_element_tag_is_unmarked() -> None:
    # ["e", id, "root"]: the 3rd element is a relay URL slot, not a marker.
    assert route(ev(1, [["e", A, "root"]])) == (A, A, A)
    e9 = ev(9, [["e", A, "reply"]])
    assert route(e9) == (None, None, e9.id)


def test_positional_kind1() -> None:
    assert route(ev(1, [["e", A], ["e", B, "wss://r"], ["e", C, "", ""]])) == (A, C, A)
    assert route(ev(1, [["e", A]])) == (A, A, A)
    # Invalid ids are skipped: first/last *valid*.
    tags = [["e", A.upper()], ["e", B], ["e", "xyz"], ["e", C], ["e", C[:-1]]]
    assert route(ev(1, tags)) == (B, C, B)


@pytest.mark.parametrize("kind", [9, 42, 7, 1111, 11])
def test_positional_only_on_kind1(kind: int) -> None:
    e = ev(kind, [["e", A], ["e", B]])
    assert route(e) == (None, None, e.id)


def test_positional_ignored_when_valid_marked_exists() -> None:
    assert route(ev(1, [["e", A], ["e", P, "", "reply"], ["e", B]])) == (P, P, P)


def test_invalid_marked_tag_does_not_block_positional() -> None:
    assert route(ev(1, [["e", B.upper(), "", "root"], ["e", A]])) == (A, A, A)


@pytest.mark.parametrize("fourth", ["mention", "ROOT", "Root", "reply ", "other"])
def test_other_fourth_element_never_routes(fourth: str) -> None:
    e = ev(1, [["e", A, "", fourth]])
    assert route(e) == (None, None, e.id)
    assert route(ev(1, [["e", A, "", fourth], ["e", B]])) == (B, B, B)


def test_kind_1111_rules() -> None:
    # Root: last valid E; parent: last valid lowercase e, else the root.
    tags = [
        ["E", A],
        ["E", B, "wss://r", NPUB_HEX],
        ["E", "bad"],
        ["e", C],
        ["e", P, "", "x"],
        ["e", "NOPE"],
    ]
    assert route(ev(1111, tags)) == (B, P, B)
    assert route(ev(1111, [["E", A]])) == (A, A, A)
    assert route(ev(1111, [["E", A], ["e", A.upper()]])) == (A, A, A)
    # Markers are not consulted on kind 1111.
    assert route(ev(1111, [["E", A], ["e", R, "", "root"], ["e", P, "", "reply"]])) == (A, P, A)
    assert route(ev(1111, [["E", A], ["e", P, "", "mention"]])) == (A, P, A)


def test_kind_1111_without_valid_E_is_top_level() -> None:
    for tags in (
        [["A", "30023:" + A + ":d"], ["e", P, "", "root"]],
        [["I", "https://x"], ["e", P]],
        [["E", A.upper()], ["E", "x"]],
        [["E"]],
    ):
        e = ev(1111, tags)
        assert route(e) == (None, None, e.id)


def test_uppercase_E_ignored_outside_1111() -> None:
    e = ev(1, [["E", A]])
    assert route(e) == (None, None, e.id)


def test_q_tags_never_route() -> None:
    for kind in (1, 9, 1111):
        e = ev(kind, [["q", A], ["q", B, "", "root"]])
        assert route(e) == (None, None, e.id)


def test_short_and_odd_e_tags_do_not_crash() -> None:
    e = ev(1, [["e"], ["e", ""], ["e", A, "", "root", "x", "y"]])
    assert route(e) == (A, A, A)


# --- channels and mentions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        ([["h", "group1"]], "group1"),
        ([["h", "g", "wss://relay"]], "g"),
        ([["h"], ["h", "second"]], "second"),
        ([["h", "bad id"], ["h", "good"]], None),
        ([["h", "dm-" + A]], None),
        ([["h", "dm-"]], None),
        ([["h", "dm-x"], ["h", "good"]], None),
        ([["h", "a" * 128]], "a" * 128),
        ([["h", "a" * 129]], None),
        ([["h", ""]], None),
        ([["h", "abc\n"]], None),
        ([["h", "abc "]], None),
        ([["h", "é"]], None),
        ([["h", "٣"]], None),
        ([["h", "A-Z_az-09"]], "A-Z_az-09"),
        ([["h", "123e4567-e89b-12d3-a456-426614174000"]], "123e4567-e89b-12d3-a456-426614174000"),
        ([["H", "group"]], None),
        ([["g", "group"]], None),
        ([], None),
    ],
)
def test_channel(tags: list[list[str]], expected: str | None) -> None:
    assert nip10.channel(ev(9, tags)) == expected


def test_mentions() -> None:
    tags = [
        ["p", A],
        ["p"],
        ["p", B, "wss://r", "name"],
        ["p", A],
        ["P", C],
        ["p", "Not-Hex"],
        ["e", P],
    ]
    assert nip10.mentions(ev(1, tags)) == [A, B, A, "Not-Hex"]
    assert nip10.mentions(ev(1)) == []


# --- profiles -----------------------------------------------------------------------------------


def profile(metadata: Any, *, raw: str | None = None) -> Profile:
    content = raw if raw is not None else json.dumps(metadata)
    return Profile.from_event(sign_event(_SK, kind=0, content=content, created_at=1, aux_rand=AUX0))


@pytest.mark.parametrize(
    ("metadata", "label"),
    [
        ({"display_name": "Dee", "name": "n", "nip05": "x@y"}, "Dee"),
        ({"name": "n", "nip05": "x@y"}, "n"),
        ({"nip05": "x@y"}, "x@y"),
        ({"display_name": "", "name": "n"}, "n"),
        ({"display_name": "   ", "name": "n"}, "n"),
        ({"display_name": "\x00\x07\n", "name": "n"}, "n"),
        ({"display_name": 5, "name": ["x"], "nip05": "z"}, "z"),
        ({"display_name": None, "name": "n"}, "n"),
        ({"display_name": "  Al\x07ice\x85  "}, "Alice"),
        ({"name": "\tBob\r\n"}, "Bob"),
        ({"name": "x" * 70}, "x" * 64),
        ({"name": "a" * 63 + " " + "b"}, "a" * 63),
        ({"name": " " + "c" * 70}, "c" * 64),
        ({"name": "😀" * 65}, "😀" * 64),
        ({"username": "u", "displayName": "d"}, None),
        ({}, None),
    ],
)
def test_profile_label(metadata: Any, label: str | None) -> None:
    assert profile(metadata).label == label


@pytest.mark.parametrize(
    ("metadata", "agent"),
    [
        ({"bot": True}, True),
        ({"bot": False}, False),
        ({"bot": 1}, False),
        ({"bot": "true"}, False),
        ({"bot": None}, False),
        ({}, False),
        ({"name": "bot"}, False),
    ],
)
def test_profile_bot_flag(metadata: Any, agent: bool) -> None:
    p = profile(metadata)
    assert p.is_agent is agent


@pytest.mark.parametrize("raw", ["", "not json", "[1,2]", '"str"', "null", "{", '{"bot":true'])
def test_profile_bad_metadata_is_unlabelled_human(raw: str) -> None:
    p = profile(None, raw=raw)
    assert p.label is None
    assert p.is_agent is False


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
    e = Event.from_json(dumps(make(tags=[["p", A], ["p"], ["t", "x"], ["p", B, "r"]])))
    assert e.tag_values("p") == [A, B]
    assert e.tag_values("q") == []


# --- interop: nostr-sdk (rust-nostr) agrees on NIP-19 and key derivation ------------------------


def test_nip19_interop_with_nostr_sdk() -> None:
    import nostr_sdk as sdk

    relays = ("wss://a.example", "wss://b.example/path")
    ours = nip19.encode("nevent", EID, relays=relays, author=NPUB_HEX, kind=30023)
    theirs = sdk.Nip19Event.from_bech32(ours)
    assert theirs.event_id().to_hex() == EID
    author = theirs.author()
    assert author is not None and author.to_hex() == NPUB_HEX
    kind = theirs.kind()
    assert kind is not None and kind.as_u16() == 30023
    assert [str(r) for r in theirs.relays()] == list(relays)

    made = sdk.Nip19Event(
        sdk.EventId.parse(EID),
        sdk.PublicKey.parse(NPUB_HEX),
        sdk.Kind(1111),
        [sdk.RelayUrl.parse("wss://r.one")],
    ).to_bech32()
    assert nip19.decode(made) == ("nevent", EventPointer(EID, ("wss://r.one",), NPUB_HEX, 1111))

    profile_b32 = sdk.Nip19Profile(
        sdk.PublicKey.parse(NPUB_HEX), [sdk.RelayUrl.parse("wss://r.one")]
    ).to_bech32()
    assert nip19.decode(profile_b32) == ("nprofile", ProfilePointer(NPUB_HEX, ("wss://r.one",)))
    assert nip19.encode("nprofile", NPUB_HEX, relays=("wss://r.one",)) == profile_b32

    assert nip19.encode("note", EID) == sdk.EventId.parse(EID).to_bech32()
    keys = sdk.Keys.parse(NSEC_HEX)
    assert SecretKey.from_str(NSEC_HEX).public_key.hex == keys.public_key().to_hex()
    assert SecretKey.from_str(NSEC_HEX).public_key.bech32 == keys.public_key().to_bech32()
    assert SecretKey.from_str(NSEC_HEX).bech32 == keys.secret_key().to_bech32()


# --- profile labels against a reference written from docs/envelope.md -----------------------------

_WS = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def ref_label(metadata: dict[str, Any]) -> str | None:
    import unicodedata

    for key in ("display_name", "name", "nip05"):
        value = metadata.get(key)
        if isinstance(value, str):
            s = "".join(c for c in value if unicodedata.category(c) != "Cc")
            s = s.strip(_WS)[:64].strip(_WS)
            if s:
                return s
    return None


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("\xa0Bob\u3000", "Bob"),
        ("\u200bBob", "\u200bBob"),  # ZERO WIDTH SPACE is Cf, not White_Space: kept
        ("\x1cBob\x1f", "Bob"),  # Cc: removed before trimming
        ("a" * 63 + "\u2003" + "b", "a" * 63),
        ("\u2028\u2029", None),
    ],
)
def test_profile_label_unicode_whitespace(name: str, label: str | None) -> None:
    assert profile({"name": name}).label == label


_LABEL_ALPHABET = ["a", "é", " ", "\t", "\x00", "\x85", "\u3000", "😀", "\u200b"]


_label_values = st.one_of(
    st.none(),
    st.integers(),
    st.booleans(),
    st.text(alphabet=st.sampled_from(_LABEL_ALPHABET), max_size=80),
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["display_name", "name", "nip05", "bot", "about"]), _label_values
    )
)
def test_profile_label_matches_reference(metadata: dict[str, Any]) -> None:
    p = profile(metadata)
    assert p.label == ref_label(metadata)
    assert p.is_agent is (metadata.get("bot") is True)


# --- routing against a reference written from the table and rules of docs/events.md ---------------


def _ref_valid(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def ref_route(kind: int, tags: list[list[str]]) -> tuple[str | None, str | None]:
    if kind == 1111:
        roots = [t[1] for t in tags if len(t) >= 2 and t[0] == "E" and _ref_valid(t[1])]
        if not roots:
            return None, None
        parents = [t[1] for t in tags if len(t) >= 2 and t[0] == "e" and _ref_valid(t[1])]
        return roots[-1], parents[-1] if parents else roots[-1]
    marked = [t for t in tags if t[0] == "e" and len(t) >= 4 and _ref_valid(t[1])]
    roots = [t[1] for t in marked if t[3] == "root"]
    replies = [t[1] for t in marked if t[3] == "reply"]
    if roots:
        return roots[-1], replies[-1] if replies else roots[-1]
    if replies:
        return replies[-1], replies[-1]
    if kind == 1:
        unmarked = [
            t[1]
            for t in tags
            if t[0] == "e"
            and (len(t) in (2, 3) or (len(t) >= 4 and t[3] == ""))
            and _ref_valid(t[1])
        ]
        if unmarked:
            return unmarked[0], unmarked[-1]
    return None, None


def ref_channel(tags: list[list[str]]) -> str | None:
    import re

    for t in tags:
        if t[0] == "h" and len(t) >= 2:
            v = t[1]
            ok = re.fullmatch(r"[A-Za-z0-9_-]{1,128}", v) and not v.startswith("dm-")
            return v if ok else None
    return None


_tag = st.tuples(
    st.sampled_from(["e", "E", "q", "p", "h"]),
    st.sampled_from([A, B, C, A.upper(), "xyz", "", "dm-x", "grp", "a\n"]),
    st.sampled_from(["", "wss://r", "root"]),
    st.sampled_from(["", "root", "reply", "mention", "ROOT", NPUB_HEX]),
    st.integers(min_value=1, max_value=5),
).map(lambda t: list(t[:4])[: t[4]])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([1, 9, 1111, 7, 11]), st.lists(_tag, max_size=6))
def test_routing_matches_reference(kind: int, tags: list[list[str]]) -> None:
    e = ev(kind, tags)
    root, parent = ref_route(kind, tags)
    assert nip10.thread_ref(e) == (root, parent)
    assert nip10.destination(e) == (root if root is not None else e.id)
    assert nip10.channel(e) == ref_channel(tags)
    assert nip10.mentions(e) == [t[1] for t in tags if t[0] == "p" and len(t) >= 2]


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
        and int_in(d["created_at"], 2**63 - 1)
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


# --- event references (docs/events.md; parsed by the CLI's shared helper) -------------------------


def test_event_reference_forms() -> None:
    from nostr_buzz.cli.common import parse_event_ref

    assert parse_event_ref(EID).id == EID
    assert parse_event_ref(EID.upper()).id == EID
    assert parse_event_ref(nip19.encode("note", EID)).id == EID
    assert parse_event_ref(nip19.encode("note", EID).upper()).id == EID
    ref = parse_event_ref(nip19.encode("nevent", EID, relays=("wss://r.one",), kind=1))
    assert (ref.id, tuple(ref.relays)) == (EID, ("wss://r.one",))


@pytest.mark.parametrize(
    "text",
    [
        NPUB,
        NSEC,
        NSEC.upper(),
        nip19.encode("nprofile", NPUB_HEX, relays=("wss://r",)),
        EID[:-1],
        "",
        nip19.encode("note", EID)[:-1] + "q",
    ],
)
def test_event_reference_bad_input(text: str) -> None:
    from nostr_buzz.cli.common import parse_event_ref
    from nostr_buzz.cli.output import CliFailure

    with pytest.raises(CliFailure) as info:
        parse_event_ref(text)
    msg = info.value.message
    if text.lower().startswith("nsec"):
        assert "looks like a secret key" in msg
        assert text not in msg and NSEC_HEX not in msg
