"""NIP-01 relay protocol codec and filter matching (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import Filter, matches
from tests.support.keys import NIP19_SECRET as SECRET

EVENT = sign_event(
    SECRET,
    kind=9,
    content="hi",
    tags=[["h", "room"], ["e", "a" * 64, "", "root"], ["p"]],
    created_at=1_000,
)


# --- filters -----------------------------------------------------------------------------------


def test_filter_from_dict_and_back() -> None:
    wire = {
        "ids": ["a" * 64],
        "kinds": [1, 9],
        "since": 5,
        "limit": 10,
        "#h": ["room"],
        "#E": ["x"],
    }
    flt = Filter.from_dict(wire)
    assert flt.ids == ("a" * 64,) and flt.kinds == (1, 9) and flt.since == 5 and flt.limit == 10
    assert flt.tags == {"h": ("room",), "E": ("x",)}
    assert flt.to_wire() == wire
    assert Filter().to_wire() == {}


@pytest.mark.parametrize(
    "bad",
    [
        {"idz": ["x"]},
        {"#ab": ["x"]},
        {"#": ["x"]},
        {"kinds": ["1"]},
        {"since": "yesterday"},
        {"since": True},
        {"ids": "a" * 64},
        {"#e": [1]},
        [],
    ],
)
def test_bad_filters_raise(bad: object) -> None:
    with pytest.raises(RelayError):
        Filter.from_dict(bad)  # type: ignore[arg-type]


def test_as_filters_accepts_one_or_many_and_refuses_none() -> None:
    assert nip01.as_filters({"kinds": [1]}) == [Filter(kinds=(1,))]
    assert nip01.as_filters([Filter(limit=1), {"kinds": [1]}]) == [
        Filter(limit=1),
        Filter(kinds=(1,)),
    ]
    with pytest.raises(RelayError):
        nip01.as_filters([])


def test_with_since_only_moves_forward() -> None:
    assert Filter().with_since(7).since == 7
    assert Filter(since=9).with_since(7).since == 9
    assert Filter(since=3, kinds=(1,)).with_since(7) == Filter(since=7, kinds=(1,))


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ({}, True),
        ({"ids": [EVENT.id]}, True),
        ({"ids": [EVENT.id[:10]]}, False),  # exact ids only, never prefixes
        ({"ids": [EVENT.id.upper()]}, False),
        ({"ids": []}, False),
        ({"authors": [SECRET.public_key.hex]}, True),
        ({"authors": [SECRET.public_key.hex[:8]]}, False),
        ({"kinds": [1, 9]}, True),
        ({"kinds": [1]}, False),
        ({"since": 1_000, "until": 1_000}, True),  # both bounds inclusive
        ({"since": 1_001}, False),
        ({"until": 999}, False),
        ({"#h": ["other", "room"]}, True),
        ({"#h": ["other"]}, False),
        ({"#e": ["a" * 64]}, True),
        ({"#p": [""]}, False),  # a one-element tag has no value
        ({"#h": ["room"], "#e": ["b" * 64]}, False),  # every tag condition must hold
        ({"limit": 0}, True),  # limit never excludes an event
    ],
)
def test_matches(wire: dict[str, object], expected: bool) -> None:
    assert matches(Filter.from_dict(wire), EVENT) is expected


def test_matches_any() -> None:
    assert nip01.matches_any([Filter(kinds=(1,)), Filter(kinds=(9,))], EVENT)
    assert not nip01.matches_any([Filter(kinds=(1,))], EVENT)


# --- relay -> client -----------------------------------------------------------------------------


def test_parse_each_relay_message() -> None:
    p = nip01.parse_relay_message
    ev = EVENT.to_dict()
    assert p(json.dumps(["EVENT", "s", ev])) == nip01.EventMessage("s", ev)
    assert p('["OK","abc",true,""]') == nip01.OkMessage("abc", True, "")
    assert p('["OK","",false,"blocked: no"]') == nip01.OkMessage("", False, "blocked: no")
    assert p('["OK","abc",false]') == nip01.OkMessage("abc", False, "")  # lenient: no message
    assert p('["EOSE","s"]') == nip01.EoseMessage("s")
    assert p('["CLOSED","s",""]') == nip01.ClosedMessage("s", "")
    assert p('["CLOSED","s","auth-required: x"]') == nip01.ClosedMessage("s", "auth-required: x")
    assert p('["NOTICE","hello"]') == nip01.NoticeMessage("hello")
    assert p('["AUTH","challenge"]') == nip01.AuthMessage("challenge")
    assert p(b'["EOSE","s"]') == nip01.EoseMessage("s")


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "{}",
        "[]",
        '"EOSE"',
        '["HELLO","s"]',
        '["EVENT","s"]',
        '["EVENT",1,{}]',
        '["EVENT","s",{},{}]',
        '["OK","abc","true",""]',
        '["OK","abc",true,5]',
        '["OK",null,true,""]',
        '["OK","abc",true,"",1]',
        '["EOSE"]',
        '["EOSE",1]',
        '["CLOSED"]',
        '["CLOSED","s",3]',
        '["NOTICE"]',
        '["AUTH",{}]',
        "[" * 100_000,
        b"\xff\xfe",
    ],
)
def test_malformed_frames(frame: str | bytes) -> None:
    assert isinstance(nip01.parse_relay_message(frame), nip01.Malformed)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_parse_never_raises(data: str | bytes) -> None:
    nip01.parse_relay_message(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["EVENT", "OK", "EOSE", "CLOSED", "NOTICE", "AUTH", "X"]),
    st.lists(json_values, max_size=4),
)
def test_parse_never_raises_on_json_arrays(kind: str, rest: list[object]) -> None:
    nip01.parse_relay_message(json.dumps([kind, *rest]))


@pytest.mark.parametrize(
    ("message", "prefix", "rest"),
    [
        ("invalid: bad id", "invalid:", "bad id"),
        ("blocked: go away", "blocked:", "go away"),
        ("rate-limited: slow down", "rate-limited:", "slow down"),
        ("auth-required: you must auth", "auth-required:", "you must auth"),
        ("restricted: members only", "restricted:", "members only"),
        ("error: oops", "error:", "oops"),
        ("pow: difficulty 20", "pow:", "difficulty 20"),
        ("duplicate: already have it", "duplicate:", "already have it"),
        ("duplicate:", "duplicate:", ""),
        ("something else", None, "something else"),
        ("Blocked: case matters", None, "Blocked: case matters"),
        ("", None, ""),
    ],
)
def test_split_prefix(message: str, prefix: str | None, rest: str) -> None:
    assert nip01.split_prefix(message) == (prefix, rest)


# --- client -> relay -----------------------------------------------------------------------------


def test_encode_client_messages() -> None:
    frame = nip01.encode_event(EVENT)
    assert frame == '["EVENT",' + EVENT.to_json() + "]"
    assert Event.from_dict(json.loads(frame)[1]) == EVENT
    assert nip01.encode_auth(EVENT) == '["AUTH",' + EVENT.to_json() + "]"
    req = nip01.encode_req("s1", [Filter(ids=(EVENT.id,)), Filter.from_dict({"#h": ["room"]})])
    assert json.loads(req) == ["REQ", "s1", {"ids": [EVENT.id]}, {"#h": ["room"]}]
    assert nip01.encode_close("s1") == '["CLOSE","s1"]'


def test_event_frame_keeps_non_ascii_raw() -> None:
    ev = sign_event(SECRET, kind=1, content="é \u2028 </script>", created_at=1)
    assert "é \u2028 </script>" in nip01.encode_event(ev)


def test_nip67_eose_hints_are_read_and_unknown_ones_ignored() -> None:
    p = nip01.parse_relay_message
    assert p('["EOSE","s",["finish"]]') == nip01.EoseMessage("s", ("finish",))
    assert p('["EOSE","s","finish"]').complete is True  # type: ignore[union-attr]
    assert p('["EOSE","s",["more","later"]]') == nip01.EoseMessage("s", ("more",))
    assert p('["EOSE","s",["more"]]').complete is False  # type: ignore[union-attr]
    assert p('["EOSE","s",["soon",7,{}]]') == nip01.EoseMessage("s", ())
    assert p('["EOSE","s",{"finish":1}]').complete is None  # type: ignore[union-attr]
    assert isinstance(p('["EOSE","s",["finish"],"x"]'), nip01.Malformed)


# --- replaceable and addressable events: the newest version counts --------------------------


def _version(kind: int, created_at: int, content: str = "", d: str | None = None) -> Event:
    tags = [] if d is None else [["d", d]]
    return sign_event(SECRET, kind=kind, content=content, tags=tags, created_at=created_at)


def test_the_newest_version_of_a_replaceable_event_wins_whatever_arrived_first() -> None:
    old, new = _version(10050, 100, "old"), _version(10050, 200, "new")
    assert nip01.newest_versions([old, new]) == [new]
    assert nip01.newest_versions([new, old]) == [new]


def test_on_a_tie_the_lowest_id_wins() -> None:
    one, two = _version(0, 100, "one"), _version(0, 100, "two")
    low = min(one, two, key=lambda e: e.id)
    assert nip01.newest_versions([one, two]) == [low]
    assert nip01.newest_versions([two, one]) == [low]
    assert nip01.is_newer(low, max(one, two, key=lambda e: e.id))


def test_addressable_events_are_versions_per_d_tag_and_regular_events_all_count() -> None:
    core_old, core_new = _version(30174, 100, "a", "core"), _version(30174, 200, "b", "core")
    other = _version(30174, 50, "c", "notes")
    canvas_old, canvas_new = _version(40100, 100, "x"), _version(40100, 200, "y")
    kept = nip01.newest_versions([core_old, other, canvas_old, core_new, canvas_new])
    assert kept == [core_new, other, canvas_old, canvas_new]
    assert nip01.address(core_new) == (30174, core_new.pubkey, "core")
    assert nip01.address(canvas_new) is None
    assert [nip01.is_replaceable(k) for k in (0, 3, 1, 10002, 19999, 20000)] == [
        True,
        True,
        False,
        True,
        True,
        False,
    ]
    assert [nip01.is_addressable(k) for k in (29999, 30000, 39999, 40000)] == [
        False,
        True,
        True,
        False,
    ]
