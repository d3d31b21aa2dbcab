"""``buzz verify``: check events' ids and signatures (nak's ``verify``).

Events come from the arguments (one JSON event each) or, with none or ``-``, one per line from
stdin.  Each verdict goes to stderr, naming the event by its position and its stated id; when
every event passes, the events are printed on stdout as canonical JSON lines (so ``buzz verify``
can sit in a pipeline).  Exit 4 when any event fails, with stdout empty.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from nostr_buzz.cli.common import read_stdin_lines
from nostr_buzz.cli.output import CliFailure, ExitCode, note, write_stdout
from nostr_buzz.errors import InvalidEvent

_HEX64 = re.compile(r"[0-9a-f]{64}")


def _stated_id(text: str) -> str:
    """The id an event claims, if it claims a well-formed one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ""
    value = doc.get("id") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and _HEX64.fullmatch(value) else ""


def verify_command(
    events: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[EVENT]...",
            help="Events as JSON; none or '-': one per line from stdin.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check the id and signature of each event; exit 4 if any fails, naming it."""
    from nostr_buzz.event import Event

    texts = list(events or ())
    if not texts or texts == ["-"]:
        texts = read_stdin_lines("event")
    passed: list[str] = []
    failed = 0
    for position, text in enumerate(texts, 1):
        label = f"event {position}"
        try:
            event = Event.from_json(text)
        except InvalidEvent as exc:
            failed += 1
            stated = _stated_id(text)
            named = f"{label} (id {stated})" if stated else label
            note(f"invalid: {named}: {exc}")
            continue
        note(f"valid: {label} (id {event.id})")
        passed.append(event.to_json() + "\n")
    if failed:
        raise CliFailure(
            ExitCode.VERIFICATION, f"{failed} of {len(texts)} event(s) failed verification"
        )
    write_stdout("".join(passed))
