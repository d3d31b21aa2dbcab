"""Thread routing (docs/events.md table): one test per row, then the rules around it."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip10 import ThreadRef
from tests.support.reference import (
    NPUB_HEX,
)

SECRET = SecretKey(bytes.fromhex("33" * 32))
A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
BAD_IDS = ("A" * 64, "a" * 63, "a" * 65, "g" * 64, "", "a" * 63 + "\n")


def ev(kind: int, *tags: Sequence[str]) -> Event:
    return sign_event(
        SECRET,
        kind=kind,
        content="routing",
        tags=tags,
        created_at=1_700_000_000,
        aux_rand=bytes(32),
    )


def route(event: Event) -> tuple[str | None, str | None, str]:
    ref = nip10.thread_ref(event)
    assert isinstance(ref, ThreadRef)
    return ref.root, ref.parent, nip10.destination(event)


# --- the routing table, one test per row -------------------------------------------------


def test_row_root_and_reply_markers() -> None:
    event = ev(1, ["e", A, "wss://r", "root"], ["e", B, "", "reply"], ["p", C])
    assert route(event) == (A, B, A)
    assert nip10.thread_ref(event) == ThreadRef(root=A, parent=B)


def test_row_only_a_root_marker_is_a_direct_reply_to_the_root() -> None:
    assert route(ev(1, ["e", A, "", "root"])) == (A, A, A)


def test_row_only_a_reply_marker() -> None:
    assert route(ev(1, ["e", B, "", "reply"])) == (B, B, B)


def test_row_kind_1111_comment_with_uppercase_e() -> None:
    event = ev(1111, ["E", A, "wss://r", C], ["K", "1"], ["e", B, "wss://r", D], ["k", "1111"])
    assert route(event) == (A, B, A)


def test_row_kind_1111_comment_without_lowercase_e_has_the_root_as_parent() -> None:
    assert route(ev(1111, ["E", A, "", C], ["K", "1"], ["k", "1"])) == (A, A, A)


def test_row_kind_1111_takes_the_last_valid_uppercase_and_lowercase_e() -> None:
    event = ev(1111, ["E", A], ["e", C], ["E", B], ["E", "B" * 64], ["e", D], ["e", "bad"])
    assert route(event) == (B, D, B)


def test_row_kind_1_positional_first_is_root_last_is_parent() -> None:
    event = ev(1, ["e", A], ["e", B, "wss://r"], ["e", C, ""], ["e", D, "", ""])
    assert route(event) == (A, D, A)


def test_row_kind_1_single_positional_tag() -> None:
    assert route(ev(1, ["e", A])) == (A, A, A)


def test_row_top_level_event_is_its_own_destination() -> None:
    event = ev(9, ["h", "general"], ["p", C])
    assert route(event) == (None, None, event.id)
    assert nip10.thread_ref(event) == ThreadRef(None, None)


# --- the rules around the table ----------------------------------------------------------


def test_duplicate_markers_last_valid_wins() -> None:
    event = ev(
        9,
        ["e", A, "", "root"],
        ["e", C, "", "reply"],
        ["e", B, "", "root"],
        ["e", D, "", "reply"],
        ["e", "F" * 64, "", "root"],  # invalid: does not win
        ["e", "d" * 63, "", "reply"],
    )
    assert route(event) == (B, D, B)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_marked_tags_with_bad_ids_are_ignored(bad: str) -> None:
    event = ev(9, ["e", bad, "", "root"], ["e", bad, "", "reply"])
    assert route(event) == (None, None, event.id)
    # A valid marked tag still routes next to an invalid one.
    assert route(ev(9, ["e", bad, "", "root"], ["e", B, "", "reply"])) == (B, B, B)


def test_invalid_marked_tags_leave_room_for_the_kind_1_fallback() -> None:
    event = ev(1, ["e", "A" * 64, "", "root"], ["e", C])
    assert route(event) == (C, C, C)


def test_valid_markers_beat_positional_tags() -> None:
    assert route(ev(1, ["e", C], ["e", A, "", "root"], ["e", D])) == (A, A, A)


@pytest.mark.parametrize("kind", [9, 7, 42, 1311, 1111, 0, 30023])
def test_positional_fallback_only_on_kind_1(kind: int) -> None:
    event = ev(kind, ["e", A], ["e", B, "wss://r"])
    assert route(event) == (None, None, event.id)


def test_markers_route_on_chat_kinds_too() -> None:
    assert route(ev(9, ["h", "g"], ["e", A, "", "root"], ["e", B, "", "reply"])) == (A, B, A)


def test_markers_are_not_consulted_on_kind_1111() -> None:
    event = ev(1111, ["e", A, "", "root"], ["e", B, "", "reply"])
    assert route(event) == (None, None, event.id)


@pytest.mark.parametrize(
    "scope", [["A", "30023:" + C + ":article"], ["I", "https://example.com"], ["E", "A" * 64]]
)
def test_kind_1111_without_a_valid_uppercase_e_is_top_level(scope: list[str]) -> None:
    event = ev(1111, scope, ["e", B], ["k", "1111"])
    assert route(event) == (None, None, event.id)


def test_mention_marker_never_routes() -> None:
    event = ev(1, ["e", A, "", "mention"])
    assert route(event) == (None, None, event.id)
    assert route(ev(1, ["e", A, "", "mention"], ["e", B])) == (B, B, B)


@pytest.mark.parametrize("fourth", ["mention", "Root", "REPLY", " root", "fork", "x"])
def test_other_fourth_elements_never_route(fourth: str) -> None:
    event = ev(1, ["e", A, "", fourth])
    assert route(event) == (None, None, event.id)


def test_empty_fourth_element_is_unmarked() -> None:
    assert route(ev(1, ["e", A, "", ""], ["e", B, "", "", "extra"])) == (A, B, A)


def test_unmarked_tags_with_bad_ids_are_skipped() -> None:
    assert route(ev(1, ["e", "A" * 64], ["e", B], ["e", "b" * 65], ["e", C], ["e"])) == (B, C, B)


@pytest.mark.parametrize("kind", [1, 9, 1111])
def test_q_tags_never_route(kind: int) -> None:
    event = ev(kind, ["q", A], ["q", B, "wss://r", "root"], ["q", C, "", "reply"])
    assert route(event) == (None, None, event.id)


def test_other_tag_names_never_route() -> None:
    event = ev(1, ["E", A, "", "root"], ["a", B], ["p", C], ["t", D])
    assert route(event) == (None, None, event.id)


# --- channel, mentions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("general", True),
        ("a", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("Group_1-b", True),
        ("123e4567-e89b-12d3-a456-426614174000", True),
        ("dm-" + A, True),
        ("general\n", False),
        ("gen eral", False),
        ("café", False),
        ("١٢٣", False),  # non-ASCII digits
        ("ｇｅｎ", False),  # fullwidth letters
        ("a.b", False),
        ("a/b", False),
    ],
)
def test_is_valid_channel_id(value: str, valid: bool) -> None:
    assert nip10.is_valid_channel_id(value) is valid


def test_is_valid_channel_id_on_non_strings() -> None:
    for value in (None, 5, b"general", ["general"]):
        assert nip10.is_valid_channel_id(value) is False


def test_channel_is_the_first_h_tag_with_a_value() -> None:
    assert nip10.channel(ev(9, ["h"], ["h", "general", "wss://r"], ["h", "other"])) == "general"
    assert nip10.channel(ev(9, ["p", A])) is None


@pytest.mark.parametrize("first", ["", "bad id", "x" * 129, "dm-" + A, "dm-x", "general\n"])
def test_bad_first_h_tag_means_no_channel_and_later_ones_are_never_consulted(first: str) -> None:
    assert nip10.channel(ev(9, ["h", first], ["h", "general"])) is None


def test_dm_prefix_is_case_sensitive_as_written() -> None:
    assert nip10.channel(ev(9, ["h", "DM-x"])) == "DM-x"


def test_mentions_every_p_value_in_order_with_duplicates_as_written() -> None:
    event = ev(
        9, ["p", B], ["p"], ["e", A], ["p", "C" * 64, "wss://r"], ["p", B], ["P", D], ["p", ""]
    )
    assert nip10.mentions(event) == [B, "C" * 64, B, ""]
    assert nip10.mentions(ev(9)) == []


# --- properties --------------------------------------------------------------------------

tag_names = st.sampled_from(["e", "E", "q", "p", "h", "a", "k"])
ids = st.sampled_from([A, B, C, *BAD_IDS])
fourths = st.sampled_from(["", "root", "reply", "mention", "x"])
tag = st.builds(
    lambda name, value, rest: [name, value, *rest],
    tag_names,
    ids,
    st.lists(st.sampled_from(["", "wss://r"]), max_size=1).flatmap(
        lambda r: st.lists(fourths, max_size=1).map(lambda f: r + f if r else f)
    ),
)
HEX64 = re.compile(r"[0-9a-f]{64}")


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from([1, 9, 1111, 42]), tags=st.lists(tag, max_size=6))
def test_destination_is_always_one_spelling_of_an_id(kind: int, tags: list[list[str]]) -> None:
    event = ev(kind, *tags)
    root, parent, destination = route(event)
    assert (root is None) == (parent is None)
    assert HEX64.fullmatch(destination)
    assert destination == (root or event.id)
    for value in (root, parent):
        assert value is None or value in (A, B, C)


def test_one_set_of_kinds_and_literals() -> None:
    from typing import get_args

    from nostr_buzz.acp import types
    from nostr_buzz.bot import outputs
    from nostr_buzz.core import queue, turn_input
    from nostr_buzz.nips import nip10, nip22, nip_am

    assert nip10.COMMENT_KIND is nip22.COMMENT_KIND
    assert queue.CancelReason is turn_input.CancelReason
    assert not hasattr(queue, "SteerOutcome")  # the driver's SteerOutcome is the only one
    # How a turn ends has one vocabulary: the metric's (the agent edge and the bot use it).
    assert types.Outcome is nip_am.Outcome and types.TerminalEvidence is nip_am.TerminalEvidence
    assert types.StopReason is nip_am.StopReason
    assert set(get_args(nip_am.StopReason)) == nip_am.STOP_REASONS
    assert set(get_args(nip_am.Outcome)) == nip_am.OUTCOMES
    assert set(get_args(nip_am.TerminalEvidence)) == nip_am.TERMINAL_EVIDENCE
    fields = nip_am.MetricPayload.__annotations__
    assert fields["outcome"] == "Outcome | None"
    assert fields["terminal_evidence"] == "TerminalEvidence | None"
    assert fields["stop_reason"] == "StopReason | None"
    assert outputs.TurnResult is types.TurnResult
    assert nip10.direct_channel("ab" * 32) == nip10.DIRECT_CHANNEL_PREFIX + "ab" * 32


# =================================================================================================
# Conformance: NIP-10 routing, channels and mentions checked from the table and rules of
# docs/events.md, and against a reference router written from that table.
# =================================================================================================


# --- NIP-10 routing -----------------------------------------------------------------------------


R = "1" * 64
P = "2" * 64


def routed(kind: int = 1, tags: list[list[str]] | None = None) -> Event:
    return ev(kind, *(tags or []))


def test_thread_ref_is_named_tuple() -> None:
    e = routed()
    ref = nip10.thread_ref(e)
    assert isinstance(ref, tuple)
    assert ref._fields == ("root", "parent")  # type: ignore[attr-defined]
    assert ref == (None, None)
    assert nip10.destination(e) == e.id


@pytest.mark.parametrize("kind", [1, 9, 7, 1111])
def test_top_level(kind: int) -> None:
    e = routed(kind, [["p", A], ["t", "x"]])
    assert route(e) == (None, None, e.id)


@pytest.mark.parametrize("kind", [1, 9, 42])
def test_marked_rows(kind: int) -> None:
    assert route(routed(kind, [["e", R, "", "root"], ["e", P, "", "reply"]]))[:3] == (R, P, R)
    assert route(routed(kind, [["e", P, "wss://x", "reply"], ["e", R, "wss://y", "root"]])) == (
        R,
        P,
        R,
    )
    assert route(routed(kind, [["e", R, "", "root"]])) == (R, R, R)
    assert route(routed(kind, [["e", P, "", "reply"]])) == (P, P, P)
    # A 5th element (NIP-10 pubkey) does not stop a tag from being marked.
    assert route(routed(kind, [["e", R, "", "root", A]])) == (R, R, R)


def test_last_valid_marker_wins() -> None:
    tags = [
        ["e", A, "", "root"],
        ["e", B, "", "root"],
        ["e", C.upper(), "", "root"],
        ["e", P, "", "reply"],
        ["e", "short", "", "reply"],
    ]
    assert route(routed(1, tags)) == (B, P, B)


def test_three_element_tag_is_unmarked() -> None:
    # ["e", id, "root"]: the 3rd element is a relay URL slot, not a marker.
    assert route(routed(1, [["e", A, "root"]])) == (A, A, A)
    e9 = routed(9, [["e", A, "reply"]])
    assert route(e9) == (None, None, e9.id)


def test_positional_kind1() -> None:
    assert route(routed(1, [["e", A], ["e", B, "wss://r"], ["e", C, "", ""]])) == (A, C, A)
    assert route(routed(1, [["e", A]])) == (A, A, A)
    # Invalid ids are skipped: first/last *valid*.
    tags = [["e", A.upper()], ["e", B], ["e", "xyz"], ["e", C], ["e", C[:-1]]]
    assert route(routed(1, tags)) == (B, C, B)


@pytest.mark.parametrize("kind", [9, 42, 7, 1111, 11])
def test_positional_only_on_kind1(kind: int) -> None:
    e = routed(kind, [["e", A], ["e", B]])
    assert route(e) == (None, None, e.id)


def test_positional_ignored_when_valid_marked_exists() -> None:
    assert route(routed(1, [["e", A], ["e", P, "", "reply"], ["e", B]])) == (P, P, P)


def test_invalid_marked_tag_does_not_block_positional() -> None:
    assert route(routed(1, [["e", B.upper(), "", "root"], ["e", A]])) == (A, A, A)


@pytest.mark.parametrize("fourth", ["mention", "ROOT", "Root", "reply ", "other"])
def test_other_fourth_element_never_routes(fourth: str) -> None:
    e = routed(1, [["e", A, "", fourth]])
    assert route(e) == (None, None, e.id)
    assert route(routed(1, [["e", A, "", fourth], ["e", B]])) == (B, B, B)


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
    assert route(routed(1111, tags)) == (B, P, B)
    assert route(routed(1111, [["E", A]])) == (A, A, A)
    assert route(routed(1111, [["E", A], ["e", A.upper()]])) == (A, A, A)
    # Markers are not consulted on kind 1111.
    assert route(routed(1111, [["E", A], ["e", R, "", "root"], ["e", P, "", "reply"]])) == (A, P, A)
    assert route(routed(1111, [["E", A], ["e", P, "", "mention"]])) == (A, P, A)


def test_kind_1111_without_valid_E_is_top_level() -> None:
    for tags in (
        [["A", "30023:" + A + ":d"], ["e", P, "", "root"]],
        [["I", "https://x"], ["e", P]],
        [["E", A.upper()], ["E", "x"]],
        [["E"]],
    ):
        e = routed(1111, tags)
        assert route(e) == (None, None, e.id)


def test_uppercase_E_ignored_outside_1111() -> None:
    e = routed(1, [["E", A]])
    assert route(e) == (None, None, e.id)


def test_short_and_odd_e_tags_do_not_crash() -> None:
    e = routed(1, [["e"], ["e", ""], ["e", A, "", "root", "x", "y"]])
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
    assert nip10.channel(routed(9, tags)) == expected


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
    assert nip10.mentions(routed(1, tags)) == [A, B, A, "Not-Hex"]
    assert nip10.mentions(routed(1)) == []


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
    e = routed(kind, tags)
    root, parent = ref_route(kind, tags)
    assert nip10.thread_ref(e) == (root, parent)
    assert nip10.destination(e) == (root if root is not None else e.id)
    assert nip10.channel(e) == ref_channel(tags)
    assert nip10.mentions(e) == [t[1] for t in tags if t[0] == "p" and len(t) >= 2]
