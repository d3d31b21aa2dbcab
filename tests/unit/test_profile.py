"""Profiles from kind 0 metadata, and the text rules (trim, sanitized label) they use."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.profile import Profile
from nostr_buzz.text.unicode import WHITESPACE, is_blank, sanitize_label, trim
from tests.support.keys import NIP19_SECRET
from tests.support.reference import (
    AUX0,
)

SECRET = SecretKey(bytes.fromhex("44" * 32))


def kind0(content: str, kind: int = 0) -> Event:
    return sign_event(SECRET, kind=kind, content=content, created_at=1, aux_rand=bytes(32))


def meta(**fields: Any) -> Event:
    return kind0(json.dumps(fields))


def label(**fields: Any) -> str | None:
    return Profile.from_event(meta(**fields)).label


# --- text rules --------------------------------------------------------------------------


def test_whitespace_is_exactly_the_unicode_white_space_set_of_spec_03() -> None:
    listed = (
        [chr(c) for c in range(0x09, 0x0E)]
        + ["\u0020", "\u0085", "\u00a0", "\u1680"]
        + [chr(c) for c in range(0x2000, 0x200B)]
        + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
    )
    assert sorted(WHITESPACE) == sorted(listed)
    assert len(set(WHITESPACE)) == len(WHITESPACE) == 25


def test_trim_keeps_what_str_strip_would_wrongly_remove() -> None:
    for ch in "\x1c\x1d\x1e\x1f\u200b\ufeff":
        assert trim(ch + "x" + ch) == ch + "x" + ch
    assert trim("\u3000\u00a0 x y\u2028\t") == "x y"
    assert is_blank("\u2029 \u205f") and not is_blank("\u200b")


def test_sanitize_label() -> None:
    assert sanitize_label("  Alice  ") == "Alice"
    assert sanitize_label("Al\x00i\x07ce\x7f\x9f") == "Alice"
    assert sanitize_label("\x1f Bob \x1c") == "Bob"  # Cc removed first, then trimmed
    assert sanitize_label("a\nb") == "ab"  # newline is Cc
    assert sanitize_label("a\u2028b") == "a\u2028b"  # U+2028 is Zl, only trimmed at the ends
    assert sanitize_label("\u200bzw\u200b") == "\u200bzw\u200b"  # Cf is kept
    assert sanitize_label("\u3000 \x00 ") == ""


def test_sanitize_label_keeps_64_characters_then_trims_again() -> None:
    assert sanitize_label("x" * 100) == "x" * 64
    assert sanitize_label("\U0001f600" * 70) == "\U0001f600" * 64  # characters, not UTF-16 units
    assert sanitize_label("a" * 63 + " " + "b") == "a" * 63
    assert sanitize_label("  " + "c" * 64 + "d") == "c" * 64


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=120))
def test_sanitized_label_is_idempotent_bounded_and_clean(s: str) -> None:
    out = sanitize_label(s)
    assert sanitize_label(out) == out
    assert len(out) <= 64
    assert trim(out) == out
    assert not any(unicodedata.category(ch) == "Cc" for ch in out)


# --- profiles ----------------------------------------------------------------------------


def test_label_prefers_display_name_then_name_then_nip05() -> None:
    assert label(display_name="Disp", name="nm", nip05="a@b.c") == "Disp"
    assert label(name="nm", nip05="a@b.c") == "nm"
    assert label(nip05="a@b.c") == "a@b.c"
    assert label(about="x", picture="y") is None


@pytest.mark.parametrize(
    "skipped", ["", "   ", "\x00\x01", "\u3000\u2028", None, 5, True, ["x"], {}]
)
def test_label_skips_values_without_a_non_empty_sanitized_string(skipped: Any) -> None:
    assert label(display_name=skipped, name=skipped, nip05="n@x.y") == "n@x.y"
    assert label(display_name=skipped, name="Name") == "Name"
    assert label(display_name=skipped) is None


def test_label_is_sanitized() -> None:
    assert label(display_name="\t Agent\x00 Smith \n") == "Agent Smith"
    assert label(name="n" * 80) == "n" * 64


def test_is_agent_only_for_bot_true() -> None:
    assert Profile.from_event(meta(name="b", bot=True)).is_agent is True
    for value in (False, "true", 1, None, [True], {"x": True}):
        assert Profile.from_event(meta(name="b", bot=value)).is_agent is False
    assert Profile.from_event(meta(name="b")).is_agent is False


def test_profile_carries_the_signing_pubkey() -> None:
    profile = Profile.from_event(meta(name="x", bot=True))
    assert profile.pubkey == SECRET.public_key.hex
    assert profile == Profile(SECRET.public_key.hex, "x", True)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "{",
        '{"name": "x",}',
        "null",
        "[]",
        '["name", "x"]',
        '"name"',
        "5",
        "true",
        '{"name": "x"} trailing',
        '{"name": "x", "about": ' + "[" * 50_000 + "]" * 50_000 + "}",
        "\ufeff{}",
    ],
)
def test_bad_or_non_object_content_means_no_label_and_not_an_agent(content: str) -> None:
    profile = Profile.from_event(kind0(content))
    assert profile.label is None
    assert profile.is_agent is False


def test_duplicate_keys_last_one_wins() -> None:
    profile = Profile.from_event(kind0('{"name":"first","name":"second","bot":true,"bot":false}'))
    assert profile.label == "second"
    assert profile.is_agent is False


def test_not_kind_0_is_an_error() -> None:
    with pytest.raises(BuzzError, match="kind 0"):
        Profile.from_event(kind0('{"name":"x"}', kind=1))
    with pytest.raises(BuzzError):
        Profile.from_event({"kind": 0, "content": "{}"})  # type: ignore[arg-type]


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=8,
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "display_name": json_values,
        "name": json_values,
        "nip05": json_values,
        "bot": json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(content=st.text(max_size=200) | metadata.map(json.dumps) | json_values.map(json.dumps))
def test_any_content_gives_a_profile(content: str) -> None:
    profile = Profile.from_event(kind0(content))
    assert profile.label is None or (
        profile.label and sanitize_label(profile.label) == profile.label
    )
    assert isinstance(profile.is_agent, bool)


# =================================================================================================
# Conformance: profiles and their labels checked from docs/events.md and docs/envelope.md,
# and against a reference label function written from that text.
# =================================================================================================


# --- profiles -----------------------------------------------------------------------------------


def profile(metadata: Any, *, raw: str | None = None) -> Profile:
    content = raw if raw is not None else json.dumps(metadata)
    return Profile.from_event(
        sign_event(NIP19_SECRET, kind=0, content=content, created_at=1, aux_rand=AUX0)
    )


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
