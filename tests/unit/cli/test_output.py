"""What the CLI prints of others' text: nothing hidden, nothing a terminal would obey."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.cli.common import one_line
from nostr_buzz.cli.output import terminal_safe, utc_time
from nostr_buzz.text.unicode import is_hidden

_EMOJI_JOINERS = "\u200d\ufe0e\ufe0f"


def test_escape_sequences_lose_their_escape() -> None:
    osc = "\x1b]0;owned\x07title"
    assert terminal_safe(osc, multiline=False) == "\\x1b]0;owned\\x07title"
    assert terminal_safe("\x9b31m", multiline=False) == "\\x9b31m"  # the one-byte C1 CSI
    assert terminal_safe("a\u200bb\u2060c\ufeffd\u00ade", multiline=False) == (
        "a\\u200bb\\u2060c\\ufeffd\\xade"
    )
    assert terminal_safe("\u202eevil\u2066", multiline=False) == "\\u202eevil\\u2066"
    assert terminal_safe("tag\U000e0041", multiline=False) == "tag\\U000e0041"
    assert terminal_safe("\U0001f468\u200d\U0001f4bb ok", multiline=False) == (
        "\U0001f468\u200d\U0001f4bb ok"  # an emoji sequence keeps its joiner
    )


def test_one_line_reads_breaks_as_spaces_and_escapes_the_rest() -> None:
    assert one_line("a\nb\tc\u2028d\x1b[2Je", 80) == "a b c d\\x1b[2Je"
    assert one_line("x" * 10 + "\u200b", 5) == "xxxx…"  # cut before escaping


def test_times_past_the_year_9999_print_as_numbers() -> None:
    assert utc_time(0) == "1970-01-01 00:00:00"
    assert utc_time(2**53 - 1) == str(2**53 - 1)


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_nothing_hidden_reaches_the_terminal(text: str) -> None:
    for shown in (terminal_safe(text, multiline=False), one_line(text, 40)):
        assert [c for c in shown if is_hidden(c) and c not in _EMOJI_JOINERS] == []
    multiline = terminal_safe(text, multiline=True)
    assert [c for c in multiline if is_hidden(c) and c not in "\n\t" + _EMOJI_JOINERS] == []
