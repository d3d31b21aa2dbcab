"""A reply cut to fit a relay's NIP-11 message and content limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.bot.outputs import fitted_parts, frame_size

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
    parts = fitted_parts(9, TAGS, "y" * 5000, 1, max_content=1000)
    assert all(len(p.content.encode()) <= 1000 for p in parts)


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=6000), st.integers(min_value=1500, max_value=5000))
def test_escaping_never_makes_a_frame_too_long(text: str, limit: int) -> None:
    # Quotes, backslashes and control characters grow when JSON-escaped: still within limit.
    parts = fitted_parts(9, TAGS, text + '"\\\x01' * 300, 1, max_message=limit)
    assert all(frame_size(p) <= limit for p in parts)
