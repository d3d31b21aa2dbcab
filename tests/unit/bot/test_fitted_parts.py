"""A reply cut to fit a relay's NIP-11 message and content limits, never finer than the part
floor; a relay whose limits cannot hold a part of the floor is skipped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.bot.outputs import (
    DEFAULT_PART_BYTES,
    MAX_PARTS,
    PART_FLOOR,
    cut_notice,
    fitted_parts,
    frame_size,
    too_large,
    too_small,
)
from nostr_buzz.config import MAX_REPLY_BYTES
from nostr_buzz.io.relay_info import RelayLimits
from nostr_buzz.signer import template

TAGS = [["h", "eng"], ["e", "ab" * 32, "", "reply"], ["p", "cd" * 32]]


def test_a_short_reply_is_one_event_and_a_long_one_parts_that_fit() -> None:
    [one] = fitted_parts(9, TAGS, "short", 100, max_message=16384)
    assert one.content == "short"
    text = "\n".join(f"line {i}: " + "x" * 70 for i in range(800))  # ~64 KB
    parts = fitted_parts(9, TAGS, text, 100, max_message=16384)
    assert len(parts) >= 4
    assert all(frame_size(p) <= 16384 for p in parts)
    assert [p.created_at for p in parts] == list(range(100, 100 + len(parts)))
    assert parts[0].content.startswith(f"[1/{len(parts)}]\n")


def test_the_content_limit_counts_too() -> None:
    parts = fitted_parts(9, TAGS, "y" * 20_000, 1, max_content=5000)
    assert len(parts) >= 4
    assert all(len(p.content.encode()) <= 5000 for p in parts)


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=6000), st.integers(min_value=24_576, max_value=40_000))
def test_escaping_never_makes_a_frame_too_long(text: str, limit: int) -> None:
    # Quotes, backslashes and control characters grow when JSON-escaped: still within limit.
    parts = fitted_parts(9, TAGS, text + '"\\\x01' * 3000, 1, max_message=limit)
    assert all(frame_size(p) <= limit for p in parts)


@pytest.mark.parametrize("limits", [{"max_message": 1}, {"max_content": 1}, {"max_message": 600}])
def test_no_part_is_cut_finer_than_the_floor_so_a_reply_has_few_parts(
    limits: dict[str, int],
) -> None:
    # What a relay announcing a tiny limit made of a 20 kB answer: 91 parts; the floor: 5.
    parts = fitted_parts(9, TAGS, "word " * 4000, 1, **limits)
    assert len(parts) <= -(-20_000 // (PART_FLOOR - 16))
    assert all(len(p.content.encode()) <= PART_FLOOR for p in parts)
    # The largest reply the cap allows, cut at the floor: at most MAX_PARTS parts.
    most = fitted_parts(9, TAGS, "y" * MAX_REPLY_BYTES + cut_notice(1 << 20, 10**12), 1, **limits)
    assert len(most) <= MAX_PARTS


def test_a_relay_whose_limits_cannot_hold_a_part_of_the_floor_is_too_small() -> None:
    empty = frame_size(template(kind=9, content="", tags=TAGS, created_at=1))
    limits = {
        "wss://tiny": RelayLimits(max_message_length=1),
        "wss://small-content": RelayLimits(max_content_length=PART_FLOOR - 1),
        "wss://just-enough": RelayLimits(max_message_length=empty + PART_FLOOR),
        "wss://one-short": RelayLimits(max_message_length=empty + PART_FLOOR - 1),
        "wss://silent": RelayLimits(),
        "wss://roomy": RelayLimits(max_message_length=1 << 20, max_content_length=65_536),
    }
    assert too_small(limits, 9, TAGS, 1) == ["wss://tiny", "wss://small-content", "wss://one-short"]


def test_a_connection_lost_while_sending_a_large_reply_counts_as_too_large() -> None:
    # nostr-sdk's relay drops the connection on a frame of a few MB instead of answering.
    for lost in ("connection lost: connection dropped", "connection lost: closed by relay"):
        assert too_large(lost, 6_000_000) == DEFAULT_PART_BYTES
        assert too_large(lost, 1_000) is None  # a small event: the network, not its size
    assert too_large("timeout", 6_000_000) is None
    assert too_large(
        "blocked: event size (100351 bytes) exceeds maximum allowed size (65536 bytes)"
    )
    assert too_large("too large: max 100 bytes") == PART_FLOOR  # never finer than the floor
