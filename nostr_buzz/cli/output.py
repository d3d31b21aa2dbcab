"""Exit codes and output helpers shared by every command (spec 05).

Data goes to stdout, human messages to stderr; on any non-zero exit stdout stays empty, so
commands compute everything first and write their data last.
"""

from __future__ import annotations

import sys
from enum import IntEnum


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
