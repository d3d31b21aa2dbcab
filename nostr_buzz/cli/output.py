"""Exit codes and output helpers shared by every command (docs/cli.md).

Data goes to stdout, human messages to stderr; on any non-zero exit stdout stays empty, so
commands compute everything first and write their data last.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import IntEnum

from nostr_buzz.text.unicode import backslash_escape, escape_hidden


class ExitCode(IntEnum):
    OK = 0
    BAD_INPUT = 1  # bad usage or bad input (the argument parser's own 2 is mapped here)
    NETWORK = 2  # relay or network failure
    NOT_FOUND = 3
    VERIFICATION = 4  # an event or manifest failed its checks


class CliFailure(Exception):
    """Ends a command with an exit code and a message for stderr."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@contextmanager
def bad_input(*errors: type[Exception]) -> Iterator[None]:
    """Ends the command with exit 1 and the error's own message on any of ``errors`` (a
    configuration the user gave that does not hold, say)."""
    try:
        yield
    except errors as exc:
        raise CliFailure(ExitCode.BAD_INPUT, str(exc)) from None


def write_stdout(text: str) -> None:
    """Write data to stdout as UTF-8, whatever the locale."""
    data = text.encode("utf-8")
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        sys.stdout.flush()
        buffer.write(data)
        buffer.flush()
    else:  # a test runner's capture object without a byte buffer
        sys.stdout.write(text)
        sys.stdout.flush()


def note(message: str) -> None:
    """A human message on stderr."""
    print(message, file=sys.stderr, flush=True)


def utc_time(seconds: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` of a Unix time, or the number itself past the year 9999 (a
    sender's ``created_at`` may be any integer up to 2^53 - 1)."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):
        return str(seconds)


def terminal_safe(text: str, *, multiline: bool) -> str:
    """Text for a human reader: control, format (bidirectional, zero-width, soft hyphen, …),
    default-ignorable and line-separator characters shown as ``\\xNN`` / ``\\uNNNN`` /
    ``\\UNNNNNNNN`` escapes (:func:`~nostr_buzz.text.unicode.is_hidden`).

    Text from others (signed messages, metric payloads, relay messages) cannot move the cursor,
    recolour the terminal, set its title (ESC and OSC sequences lose their ESC), reverse what
    follows or hide a character; JSON output carries the exact characters.  ``multiline`` keeps
    newlines and tabs.
    """
    return escape_hidden(text, backslash_escape, keep="\n\t" if multiline else "")
