"""``buzz compile TURN.json``: compile a turn-input file offline (docs/turn-input.md, docs/cli.md).

Exit codes: 0 compiled; 1 the file is unreadable or not a valid turn input (not JSON, wrong
shape, a malformed event, no valid channel id, …); 4 an event in ``events`` or
``cancelledEvents`` is well-formed but fails its id, public-key or signature check.  The turn
reader checks the whole file's shape before verifying any event, so exit 4 means the file is
otherwise valid.

Also home of the pieces ``buzz manifest`` shares: input reading, ``--format``/``--json`` and
the plain-text layer table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import msgspec
from rich.cells import cell_len

from nostr_buzz.cli.common import pick_format
from nostr_buzz.cli.options import JsonFormatOption, argument, option
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout
from nostr_buzz.cli.output import terminal_safe as terminal_safe  # shared, re-exported
from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.errors import BuzzError, InvalidEvent
from nostr_buzz.manifest import Layer, Manifest

STDIN = "-"
_BOM = b"\xef\xbb\xbf"


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


def resolve_format(fmt: OutputFormat | None, json_flag: bool) -> OutputFormat:
    """``--json`` is ``--format json``; asking for both json and text is bad usage."""
    return OutputFormat(pick_format(fmt, json_flag, ("text", "json")))


def display_name(path: str) -> str:
    """How messages name an input."""
    return "standard input" if path == STDIN else path


def read_input(path: str, what: str) -> bytes:
    """The bytes of a file (``-`` is stdin); anything unreadable is bad input (exit 1)."""
    name = display_name(path) if path == STDIN else f"{what} {path}"
    try:
        data = sys.stdin.buffer.read() if path == STDIN else Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CliFailure(ExitCode.BAD_INPUT, f"cannot read {name}: {reason}") from None
    if data.startswith(_BOM):
        # Checked here too so the message can say what to do about it.
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"{name} starts with a UTF-8 byte-order mark; save it as UTF-8 without one",
        )
    try:
        # msgspec skips ignored members without checking their UTF-8, so check the whole file.
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliFailure(
            ExitCode.BAD_INPUT, f"{name} is not UTF-8 (invalid byte at offset {exc.start})"
        ) from None
    return data


def aligned(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Plain columns separated by two spaces, padded by display width, no trailing spaces.

    Plain text rather than a rich table: rich wraps to the terminal width (80 columns when
    piped), which would cut 71-character versions; these lines are stable wherever they go.
    """
    right_cols = set(right)
    widths = [max(cell_len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - cell_len(cell))
            cells.append(pad + cell if i in right_cols else cell + pad)
        lines.append("  ".join(cells).rstrip())
    return lines


def layer_table(layers: Sequence[Layer]) -> list[str]:
    """The manifest's layers as aligned text lines (header first); version last, it is long."""
    header = (
        "order",
        "layer",
        "scope",
        "source",
        "authority",
        "freshness",
        "estimatedTokens",
        "truncated",
        "version",
    )
    rows = [header]
    for layer in layers:
        rows.append(
            (
                str(layer.order),
                terminal_safe(layer.layer, multiline=False),
                terminal_safe(layer.scope, multiline=False),
                terminal_safe(layer.source, multiline=False),
                terminal_safe(layer.authority, multiline=False),
                terminal_safe(layer.freshness, multiline=False),
                str(layer.estimated_tokens),
                "true" if layer.truncated else "false",
                terminal_safe(layer.version, multiline=False),
            )
        )
    return aligned(rows, right=(0, 6))


class CompileOutput(msgspec.Struct, frozen=True):
    """``buzz compile --format json``: ``{"sections": [...], "manifest": {...}}``."""

    sections: list[str]
    manifest: Manifest


def render_json(sections: Sequence[str], manifest: Manifest) -> str:
    # msgspec writes compact JSON with non-ASCII raw; the manifest object is Manifest.to_json's.
    return msgspec.json.encode(CompileOutput(list(sections), manifest)).decode("utf-8") + "\n"


def render_text(sections: Sequence[str], manifest: Manifest) -> str:
    """The sections separated by blank lines, then the manifest hash and its layer table."""
    body = "\n\n".join(terminal_safe(section, multiline=True) for section in sections)
    count = len(manifest.layers)
    summary = f"manifest {manifest.hash} ({count} layer{'' if count == 1 else 's'})"
    return body + "\n\n" + "\n".join([summary, *layer_table(manifest.layers)]) + "\n"


def compile_command(
    turn_file: Annotated[
        str,
        argument(
            "TURN.json",
            "A turn-input JSON file (format: docs/turn-input.md); '-' reads standard input.",
        ),
    ],
    fmt: Annotated[
        OutputFormat | None,
        option(
            "--format",
            metavar="[text|json]",
            help="text (default): the sections, the manifest hash and a layer table. "
            "json: one line {sections, manifest}.",
        ),
    ] = None,
    json_flag: JsonFormatOption = False,
) -> None:
    """Compile a turn-input file offline: the prompt sections and the context manifest.

    Exit 1: the file is unreadable or not a valid turn input.

    Exit 4: an event in it fails its id, pubkey or signature check.
    """
    output = resolve_format(fmt, json_flag)
    data = read_input(turn_file, "turn file")
    name = display_name(turn_file)
    try:
        compiled = compile_turn(TurnInput.from_json(data))
    except InvalidEvent as exc:
        if exc.reason == "malformed":
            raise CliFailure(ExitCode.BAD_INPUT, f"{name}: malformed event: {exc.detail}") from None
        # The detail names the event (events[i] / cancelledEvents[i]) and the failed check;
        # the event itself is never printed.
        raise CliFailure(
            ExitCode.VERIFICATION,
            f"{name}: event failed verification ({exc.reason}): {exc.detail}",
        ) from None
    except BuzzError as exc:  # TurnInputError and anything else wrong with the input
        raise CliFailure(ExitCode.BAD_INPUT, f"{name}: {exc}") from None
    if output is OutputFormat.json:
        write_stdout(render_json(compiled.sections, compiled.manifest))
    else:
        write_stdout(render_text(compiled.sections, compiled.manifest))
