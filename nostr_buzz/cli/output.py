"""Exit codes and output helpers shared by every command (docs/cli.md).

Data goes to stdout, human messages to stderr; on any non-zero exit stdout stays empty, so
commands compute everything first and write their data last.
"""

from __future__ import annotations

import sys
import unicodedata
from enum import IntEnum
from typing import Final

#: Characters that reorder or hide text on a terminal (bidirectional controls and marks) or
#: break its lines without being control characters (U+2028, U+2029).
_INVISIBLE: Final = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


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


def _shown(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, multiline: bool) -> str:
    """Text for a human reader: control, bidirectional and line-separator characters shown as
    ``\\xNN`` / ``\\uNNNN`` escapes.

    Text from others (signed messages, metric payloads, relay messages) cannot move the cursor,
    recolour the terminal or reverse what follows; JSON output carries the exact characters.
    ``multiline`` keeps newlines and tabs.
    """
    keep = "\n\t" if multiline else ""

    def unsafe(c: str) -> bool:
        return c not in keep and (unicodedata.category(c) == "Cc" or c in _INVISIBLE)

    if not any(unsafe(c) for c in text):
        return text
    return "".join(_shown(c) if unsafe(c) else c for c in text)
