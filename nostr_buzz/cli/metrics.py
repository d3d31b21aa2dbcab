"""``buzz metrics``: the owner's usage report from NIP-AM metrics (docs/metrics.md, docs/cli.md).

The owner reads with their own secret key (``--key``, else ``BUZZ_PRIVATE_KEY``, else
``buzz.toml``): it decrypts the metrics and answers NIP-42 challenges on the listed relays.

Output (stdout, or ``--output FILE``, replaced whole or left as it was; notes about ignored
events, manifest mismatches and unreachable relays go to stderr):

- ``--format table`` (default): totals per UTC day, agent and model, with the cache read and
  write parts of the input (``--turns``: one row per turn, without the cache and context
  columns, which JSON and CSV carry); a rich table on a terminal, aligned plain text otherwise.
- ``--format csv``: the same rows with a header line of the JSON field names; unknown values
  are empty cells.
- ``--format json``: one object::

      {"owner": hex, "since": unix|null, "until": unix|null,
       "relays": {url: {"finished": bool, "error": str|null, "events": n, "rejected": n}},
       "totals": [{"day", "agent", "model", "turns", "inputTokens", "outputTokens",
                   "totalTokens", "costUsd", "unknownTurns", "cacheReadTokens",
                   "cacheWriteTokens"}],
       "turns": [{"eventId", "agent", "harness", "model", "day", "timestamp", "sessionId",
                  "turnSeq", "turnId", "channelId", "inputTokens", "outputTokens",
                  "totalTokens", "costUsd", "deltaSource", "deltaReliable", "stopReason",
                  "outcome", "manifestHash", "manifestValid", "cacheReadTokens",
                  "cacheWriteTokens", "contextUsedTokens", "contextWindowTokens",
                  "durationSeconds", "compactions"}],
       "ignored": {"total": n, "byReason": {reason: n}},
       "manifestMismatches": n,
       "unknownAgents": [{"agent", "metrics", "firstTimestamp", "lastTimestamp"}]}

  Unknown counters are ``null`` and a total is ``null`` when no turn reported that counter.
- ``--format html``: one self-contained page (reports/metrics_html.py): charts of spend and tokens
  per day for each agent and model, turns per channel, turn duration percentiles, the cache
  share of the input and turns with unknown usage, drawn as inline SVG, then the tables.  It
  loads nothing and runs no script; the agents' words in it are escaped.

Only the owner's agents count: ``--agent KEY`` (repeatable, hex or npub), else ``agents`` in
``buzz.toml``.  Metrics signed by any other key are listed apart (``unknownAgents``, and a note
on stderr), never in the turns or totals; with no agents named every agent counts (and a note
says so).  CSV cells that would start a spreadsheet formula are prefixed with ``'``; table and
CSV output show control (ESC, OSC), bidirectional and zero-width characters as escapes, and the
table never reads rich markup.

Exit codes (docs/cli.md): 0 report printed (also when some events were ignored or a manifest is
flagged: the report shows them); 1 bad input (times, format, key, no relay configured); 2 no
relay answered.  An ``--output`` that cannot be written is bad input too (exit 1), refused before
any relay is asked when its directory does not exist.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec
import typer

from nostr_buzz.cli.access import Relays, relay_command
from nostr_buzz.cli.common import pick_format as pick_format  # also used from here
from nostr_buzz.cli.common import progress, run
from nostr_buzz.cli.options import JsonFormatOption, format_option, option, time_option
from nostr_buzz.cli.output import (
    CliFailure,
    ExitCode,
    note,
    terminal_safe,
    utc_time,
    write_stdout,
)
from nostr_buzz.io.metrics_reader import MetricsFetch, read_metrics
from nostr_buzz.keys import SecretKey
from nostr_buzz.reports.metrics_html import render_html
from nostr_buzz.reports.metrics_report import MetricsReport, TotalRow, TurnRow

Format = Literal["table", "json", "csv", "html"]
FORMATS: tuple[Format, ...] = ("table", "json", "csv", "html")

_UNIX: Final = re.compile(r"[0-9]{1,12}")
_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATE_TIME: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_DAY: Final = 86_400

_TOTAL_FIELDS: Final = [f.encode_name for f in msgspec.structs.fields(TotalRow)]
_TURN_FIELDS: Final = [f.encode_name for f in msgspec.structs.fields(TurnRow)]


def parse_time(text: str, *, option: str, end_of_day: bool = False) -> int:
    """Unix seconds from unix seconds, an RFC 3339 date-time (with its offset) or a date.

    A bare date is midnight UTC, or with ``end_of_day`` (for ``--until``) its last second, so
    ``--since D --until D`` covers the whole day D.
    """
    s = text.strip()
    try:
        if _UNIX.fullmatch(s):
            return int(s)
        if _DATE.fullmatch(s):
            day = date.fromisoformat(s)
            start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
            return start + (_DAY - 1 if end_of_day else 0)
        if _DATE_TIME.fullmatch(s):
            # Python reads "Z" and "+hh:mm"; fractions are cut (created_at is whole seconds).
            moment = datetime.fromisoformat(s[:10] + "T" + s[11:].upper())
            return int(moment.timestamp() // 1)
    except ValueError:
        pass
    raise CliFailure(
        ExitCode.BAD_INPUT,
        f"{option}: {s[:40]!r} is not a time: give unix seconds, a date (2026-12-02) or an "
        "RFC 3339 date-time with its offset (2026-12-02T10:00:00Z)",
    )


# --- rendering --------------------------------------------------------------------------------


def _rows(report: MetricsReport, turns: bool) -> tuple[list[str], list[dict[str, Any]]]:
    rows = report.turns if turns else report.totals
    fields = _TURN_FIELDS if turns else _TOTAL_FIELDS
    return fields, [msgspec.to_builtins(row) for row in rows]


def render_json(
    report: MetricsReport,
    fetch: MetricsFetch,
    owner: str,
    since: int | None,
    until: int | None,
) -> str:
    doc = {
        "owner": owner,
        "since": since,
        "until": until,
        "relays": {
            url: {
                "finished": r.finished,
                "error": r.error,
                "events": r.events,
                "rejected": r.rejected,
            }
            for url, r in fetch.relays.items()
        },
        "totals": msgspec.to_builtins(report.totals),
        "turns": msgspec.to_builtins(report.turns),
        "ignored": {"total": report.ignored_total, "byReason": report.ignored},
        "manifestMismatches": report.manifest_mismatches,
        "unknownAgents": msgspec.to_builtins(report.unknown_agents),
    }
    return json.dumps(doc, ensure_ascii=False) + "\n"


#: A CSV cell starting with one of these is a formula in a spreadsheet.
_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        # Text from an agent: no ESC/OSC sequence, bidirectional or zero-width character
        # reaches the terminal that shows the file (escaped as in the table), and it is
        # never a formula (OWASP CSV injection).
        text = terminal_safe(value, multiline=False)
        return "'" + text if text.startswith(_FORMULA_START) else text
    return str(value)


def render_csv(report: MetricsReport, turns: bool) -> str:
    fields, rows = _rows(report, turns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for row in rows:
        writer.writerow([_cell(row[f]) for f in fields])
    return out.getvalue()


_TABLE_TOTALS: Final = [
    ("day", "day"),
    ("agent", "agent"),
    ("model", "model"),
    ("turns", "turns"),
    ("inputTokens", "input"),
    ("cacheReadTokens", "cache read"),
    ("cacheWriteTokens", "cache write"),
    ("outputTokens", "output"),
    ("totalTokens", "total"),
    ("costUsd", "cost USD"),
    ("unknownTurns", "unknown"),
]
_TABLE_TURNS: Final = [
    ("timestamp", "time (UTC)"),
    ("agent", "agent"),
    ("model", "model"),
    ("sessionId", "session"),
    ("turnSeq", "seq"),
    ("inputTokens", "input"),
    ("outputTokens", "output"),
    ("totalTokens", "total"),
    ("costUsd", "cost USD"),
    ("deltaSource", "delta"),
    ("manifestValid", "manifest"),
]
_NUMERIC: Final = {
    "turns",
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "costUsd",
    "unknownTurns",
    "turnSeq",
    "cacheReadTokens",
    "cacheWriteTokens",
    "contextUsedTokens",
    "contextWindowTokens",
}


def _flat(text: str, width: int) -> str:
    # Payload strings come from the agent: no control or bidirectional character reaches the
    # terminal (shown as escapes), and the cut never splits an escape.
    clean = text if len(text) <= width else text[: width - 1] + "…"
    return terminal_safe(clean, multiline=False)


def _table_cell(field: str, value: Any) -> str:
    if value is None:
        return "-" if field != "manifestValid" else ""
    if field == "agent":
        return str(value)[:12] + "…"
    if field == "costUsd":
        return f"{value:.6f}"
    if field == "manifestValid":
        return "ok" if value else "MISMATCH"
    if field == "timestamp":
        return str(value).replace("T", " ").rstrip("Z")
    return _flat(str(value), 32)


def _table(report: MetricsReport, turns: bool) -> tuple[list[str], list[list[str]], list[bool]]:
    columns = _TABLE_TURNS if turns else _TABLE_TOTALS
    _, rows = _rows(report, turns)
    header = [title for _, title in columns]
    body = [[_table_cell(f, row[f]) for f, _ in columns] for row in rows]
    right = [f in _NUMERIC for f, _ in columns]
    return header, body, right


def render_plain_table(report: MetricsReport, turns: bool) -> str:
    header, body, right = _table(report, turns)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip() + "\n"

    return "".join(line(r) for r in [header, *body])


def render_rich_table(report: MetricsReport, turns: bool, *, width: int | None = None) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    header, body, right = _table(report, turns)
    table = Table(title="turns" if turns else "usage per day, agent and model")
    for title, is_right in zip(header, right, strict=True):
        table.add_column(title, justify="right" if is_right else "left")
    for row in body:
        table.add_row(*(Text(cell) for cell in row))  # cells are text, never rich markup
    buffer = io.StringIO()
    columns = width if width is not None else max(80, shutil.get_terminal_size().columns)
    Console(file=buffer, force_terminal=True, width=columns).print(table)
    return buffer.getvalue()


# --- the command ------------------------------------------------------------------------------


SinceOption = Annotated[
    str | None,
    time_option("--since", "From this time: unix seconds, a date or an RFC 3339 date-time."),
]
UntilOption = Annotated[
    str | None, time_option("--until", "Up to this time, inclusive (a bare date means its end).")
]
AgentOption = Annotated[
    list[str] | None,
    option(
        "--agent",
        metavar="KEY",
        help="Only this agent's metrics (public key, repeatable); default: agents in "
        "buzz.toml, else every agent.",
    ),
]


def _check_output(path: Path | None) -> None:
    """Refuse an ``--output`` that cannot be written, before any relay is asked."""
    if path is not None and not path.parent.is_dir():
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"--output: {terminal_safe(str(path.parent), multiline=False)} is not a directory",
        )


def _write_output(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all: written beside it, then renamed over it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(text.encode("utf-8"))
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        shown = terminal_safe(str(path), multiline=False)
        raise CliFailure(
            ExitCode.BAD_INPUT, f"--output: cannot write {shown}: {e.strerror or e}"
        ) from None
    note(f"buzz: report written to {terminal_safe(str(path), multiline=False)}")


def parse_window(since: str | None, until: str | None) -> tuple[int | None, int | None]:
    """``--since`` and ``--until`` as unix seconds (None when not given); since after until
    is bad input."""
    start = parse_time(since, option="--since") if since is not None else None
    end = parse_time(until, option="--until", end_of_day=True) if until is not None else None
    if start is not None and end is not None and start > end:
        raise CliFailure(ExitCode.BAD_INPUT, "--since is later than --until")
    return start, end


def read_window(
    owner: SecretKey,
    relays: Sequence[str],
    agents: Sequence[str],
    window: tuple[int | None, int | None],
    timeout: float,
) -> tuple[MetricsReport, MetricsFetch]:
    """The owner's metrics in ``window`` from ``relays``, with their problems noted on stderr
    (:func:`report_problems`; no relay answering is exit 2)."""
    progress(f"reading metrics for {owner.public_key.hex[:12]}… from {len(relays)} relay(s)")
    report, fetch = run(
        read_metrics(
            owner,
            relays,
            since=window[0],
            until=window[1],
            timeout=timeout,
            progress=progress,
            agents=agents or None,
        )
    )
    report_problems(report, fetch)
    return report, fetch


def report_problems(report: MetricsReport, fetch: MetricsFetch) -> None:
    if not fetch.any_finished:
        lines = [f"{url}: {r.error or 'no answer'}" for url, r in fetch.relays.items()]
        raise CliFailure(ExitCode.NETWORK, "no relay answered:\n  " + "\n  ".join(lines))
    for url, r in fetch.relays.items():
        if r.error is not None:
            what = "partial result" if r.finished else "not used"
            error = terminal_safe(r.error, multiline=False)  # a relay's words, maybe hostile
            note(f"buzz: warning: relay {url}: {error} ({what})")
        if r.rejected:
            note(
                f"buzz: warning: relay {url} served {r.rejected} event(s) that failed verification"
            )
    if report.ignored:
        reasons = ", ".join(f"{reason} {n}" for reason, n in report.ignored.items())
        note(f"buzz: ignored {report.ignored_total} metric event(s): {reasons}")
    if report.unknown_agents:
        keys = ", ".join(f"{a.agent[:12]}… ({a.metrics})" for a in report.unknown_agents)
        count = sum(a.metrics for a in report.unknown_agents)
        note(f"buzz: {count} metric(s) from keys that are not your agents, not counted: {keys}")
    if report.manifest_mismatches:
        note(
            f"buzz: warning: {report.manifest_mismatches} metric(s) carry a manifest whose hash "
            "does not match its layers (manifestValid: false)"
        )


@relay_command
def metrics_command(
    since: SinceOption = None,
    until: UntilOption = None,
    output_format: Annotated[
        str | None,
        format_option(
            "[table|json|csv|html]",
            "table (default), json, csv or html (one self-contained page with charts).",
        ),
    ] = None,
    json_flag: JsonFormatOption = False,
    output: Annotated[
        Path | None,
        option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write the report to FILE (replaced whole) instead of stdout.",
            dir_okay=False,
        ),
    ] = None,
    turns: Annotated[
        bool, typer.Option("--turns", help="table/csv: one row per turn instead of totals.")
    ] = False,
    agent: AgentOption = None,
    *,
    access: Relays,
) -> None:
    """The owner's usage report: NIP-AM metrics decrypted with the owner's key, totalled per
    agent, model and UTC day."""
    fmt = pick_format(output_format, json_flag, FORMATS)
    start, end = parse_window(since, until)
    _check_output(output)
    owner = access.owner_key()
    relays = access.relays("read")
    agents = access.cfg.agents(agent or ())
    report, fetch = read_window(owner, relays, agents, (start, end), access.timeout)
    if not agents and report.turns:
        note(
            "buzz: counting every key that sends you metrics: name your agents with --agent "
            "or agents in buzz.toml"
        )
    if fmt == "table" and not (report.turns if turns else report.totals):
        note("buzz: no metrics in this window")
        return
    text = _render(fmt, report, fetch, owner.public_key.hex, (start, end), turns, output)
    if output is None:
        write_stdout(text)
    else:
        _write_output(output, text)


def _render(
    fmt: Format,
    report: MetricsReport,
    fetch: MetricsFetch,
    owner: str,
    window: tuple[int | None, int | None],
    turns: bool,
    output: Path | None,
) -> str:
    """The report in ``fmt``; a table is rich on a terminal (not into ``output``)."""
    start, end = window
    if fmt == "json":
        return render_json(report, fetch, owner, start, end)
    if fmt == "csv":
        return render_csv(report, turns)
    if fmt == "html":
        since_text = None if start is None else utc_time(start) + " UTC"
        until_text = None if end is None else utc_time(end) + " UTC"
        page = render_html(
            report, owner=owner, since=since_text, until=until_text, relays=list(fetch.relays)
        )
        if not report.turns:
            note("buzz: no metrics in this window (the page's charts are empty)")
        return page
    if sys.stdout.isatty() and output is None:
        return render_rich_table(report, turns)
    return render_plain_table(report, turns)
