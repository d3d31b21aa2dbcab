"""``buzz watch``: a live view of a bot from its state directory (docs/cli.md, "buzz watch").

The running turns (channel, who, how long, the last tool call), the queue depth per channel,
the outbox and today's spend, refreshed in place every second until Ctrl-C (exit 0);
``--once`` prints the view once as JSON.  Read-only, and no key needed
(:mod:`nostr_buzz.io.watch`); the view itself is :mod:`nostr_buzz.reports.watch`.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from nostr_buzz.cli.common import ConfigOption, one_line, sources
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout
from nostr_buzz.core.session_key import channel_of, thread_of
from nostr_buzz.errors import StateDirError, StateError
from nostr_buzz.nips import nip10

if TYPE_CHECKING:
    from rich.console import RenderableType

    from nostr_buzz.io.watch import Watcher
    from nostr_buzz.reports.watch import (
        ChannelView,
        OutboxEntryView,
        ToolView,
        TurnView,
        WatchView,
    )

__all__ = ["render", "watch_command"]

#: Longest channel, agent or tool text shown in a cell (before escapes).
_CELL: Final = 48


def _duration(seconds: float) -> str:
    """``4.2 s``, ``3 min 05 s``, ``2 h 07 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _short_key(npub: str) -> str:
    """``npub1abcdef…wxyz``: enough to tell keys apart on a screen."""
    return npub if len(npub) <= 20 else f"{npub[:12]}…{npub[-4:]}"


def _channel(name: str | None) -> str:
    """A queue channel for a person: a direct channel's key shortened, and a thread's root
    (``[sessions] scope = "thread"``: ``{channel}/{root}``) to its first 8 digits."""
    if name is None:
        return "?"
    root = thread_of(name)
    if root is not None:
        return f"{_channel(channel_of(name))}/{root[:8]}…"
    for prefix in (nip10.PRIVATE_CHANNEL_PREFIX, nip10.DIRECT_CHANNEL_PREFIX):
        if name.startswith(prefix) and len(name) == len(prefix) + 64:
            return f"{prefix}{name[len(prefix) : len(prefix) + 8]}…"
    return one_line(name, _CELL)


def _tool(tool: ToolView | None) -> str:
    if tool is None:
        return "-"
    what = one_line(tool.title, _CELL) if tool.title is not None else f"({tool.kind or 'tool'})"
    return f"{what}: {tool.decision or tool.status or 'started'}"


def _turn_row(turn: TurnView) -> tuple[str, ...]:
    who = ", ".join(_short_key(a) for a in turn.actors) or "?"
    where = _channel(turn.queue_channel or turn.channel)
    return where, who, _duration(turn.duration_seconds), _tool(turn.last_tool)


def _table(title: str, rows: list[tuple[str, ...]], *columns: str) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title), title_justify="left", expand=False)
    for column in columns:
        table.add_column(Text(column))
    for row in rows:
        table.add_row(*map(Text, row))
    return table


def _queue_row(c: ChannelView) -> tuple[str, ...]:
    retry = "-" if not c.attempts else f"{c.attempts} failed"
    if c.backoff_seconds is not None:
        retry += f", next in {_duration(c.backoff_seconds)}"
    counts = (str(c.pending), str(c.in_flight), str(c.cancelled))
    return (_channel(c.channel), *counts, _duration(c.oldest_age_seconds), retry)


def _outbox_row(entry: OutboxEntryView) -> tuple[str, ...]:
    """One pending outbox entry: what, how old, and each relay it is meant for."""
    states = []
    for r in entry.relays:
        state = r.state
        if r.state == "failing":
            state += f" {r.attempts}x"
            if r.retry_in_seconds is not None:
                state += f", next in {_duration(r.retry_in_seconds)}"
            if r.last_error:
                state += f": {one_line(r.last_error, _CELL)}"
        states.append(f"{one_line(r.relay, _CELL)} {state}")
    return (entry.name, entry.event_id[:12], _duration(entry.age_seconds), "\n".join(states))


def _lines(view: WatchView) -> tuple[str, str, str]:
    """The header, the outbox line and the spend line."""
    head = f"buzz watch: {one_line(view.state_dir, 200)}"
    if view.agent is not None:
        name = one_line(view.agent.name or "agent", _CELL)
        since = view.agent.started_at[11:19]  # HH:MM:SS of an RFC 3339 UTC timestamp
        head += f" | {name}, {'exited' if view.agent.exited else f'up since {since} UTC'}"
    outbox = view.outbox
    waiting = "outbox: empty"
    if outbox.pending:
        kinds = ", ".join(f"{k.pending} {k.name}" for k in outbox.kinds)
        oldest = _duration(outbox.oldest_age_seconds or 0.0)
        waiting = f"outbox: {outbox.pending} waiting ({kinds}), oldest {oldest}"
    spend = view.spend
    unknown = f", {spend.turns_without_cost} without a cost" if spend.turns_without_cost else ""
    plural = "" if spend.turns == 1 else "s"
    spent = (
        f"today (UTC {spend.day}): ${spend.cost_usd:.4f} over {spend.turns} turn{plural}"
        f"{unknown}; {_budget(view)}"
    )
    return head, waiting, spent


def _budget(view: WatchView) -> str:
    """Each cap against what counts in its period, what being over does, the held channels."""
    budget = view.budget
    if budget is None:
        return "no budget configured"
    caps = ", ".join(
        f"{c.name} {c.spent:g}/{c.limit:g}"
        if c.name == "daily_tokens"
        else f"{c.name} ${c.spent:.4f}/${c.limit:g}"
        for c in budget.caps
    )
    held = f", {len(budget.held)} channel(s) held" if budget.held else ""
    return f"budget ({budget.action}): {caps}{held}"


def render(view: WatchView) -> RenderableType:
    """The view as a terminal screen.  Every text is a :class:`rich.text.Text` (never markup)
    and others' text is flattened and escaped (:func:`~nostr_buzz.cli.common.one_line`)."""
    from rich.console import Group
    from rich.text import Text

    head, waiting, spent = _lines(view)
    turns = [_turn_row(turn) for turn in view.running_turns]
    queue = [_queue_row(c) for c in view.queue]
    pending = [_outbox_row(entry) for entry in view.outbox.entries]
    return Group(
        Text(head),
        _table("running turns", turns, "channel", "who", "for", "last tool call")
        if turns
        else Text("no turn running"),
        _table("queue", queue, "channel", "pending", "in flight", "cancelled", "oldest", "retry")
        if queue
        else Text("queue empty"),
        Text(waiting),
        *(
            [_table("outbox, relay by relay", pending, "event", "id", "age", "relays")]
            if pending
            else []
        ),
        Text(spent),
    )


def _frame(watcher: Watcher) -> RenderableType:
    from rich.text import Text

    try:
        return render(watcher.view())
    except StateError as exc:  # the bot may be mid-way through something: try again
        return Text(f"buzz watch: cannot read the state: {one_line(str(exc), 300)}")


def _open(config: Path | None, state_dir: Path | None) -> Watcher:
    import msgspec

    from nostr_buzz.core.budget import Caps
    from nostr_buzz.io.watch import Watcher

    overrides = {"state_dir": str(state_dir)} if state_dir is not None else None
    cfg = sources(config, overrides)
    caps = Caps(**msgspec.structs.asdict(cfg.file.budget))  # as the bot reads [budget]
    try:
        return Watcher(cfg.state_dir(), clock=time.time, caps=caps)
    except StateDirError as exc:
        code = ExitCode.NOT_FOUND if exc.reason == "missing" else ExitCode.BAD_INPUT
        raise CliFailure(code, exc.detail) from None


def watch_command(
    once: Annotated[
        bool, typer.Option("--once", help="Print the view once as JSON and exit.")
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            metavar="DIR",
            help="The bot's state directory. Else $BUZZ_STATE_DIR, else state_dir in "
            "buzz.toml, else .buzz.",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    interval: Annotated[
        float,
        typer.Option("--interval", metavar="SECONDS", min=0.1, max=3600.0, help="Refresh period."),
    ] = 1.0,
) -> None:
    """A live view of a running bot: turns, queue, outbox, today's spend (read-only)."""
    watcher = _open(config, state_dir)
    try:
        try:
            first = watcher.view()
        except StateDirError as exc:  # a database that is not the bot's
            raise CliFailure(ExitCode.BAD_INPUT, exc.detail) from None
        if once:
            write_stdout(first.to_json() + "\n")
        else:
            _live(watcher, first, interval)
    finally:
        watcher.close()


def _live(watcher: Watcher, first: WatchView, interval: float) -> None:
    from rich.console import Console
    from rich.live import Live

    if isinstance(sys.stdout, io.TextIOWrapper):
        # A terminal whose locale cannot show a character gets an escape, not a crash.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        with Live(render(first), console=Console(), auto_refresh=False) as live:
            while True:
                time.sleep(interval)  # the refresh period
                live.update(_frame(watcher), refresh=True)
    except KeyboardInterrupt:
        return  # Ctrl-C is how the view ends: exit 0
