"""``buzz watch`` in process: the screen it draws (others' text shown, never obeyed), the
``--once`` JSON, and the exit codes of a state directory that is not a bot's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from nostr_buzz.bot.plugin import DIAGNOSTICS_FILE
from nostr_buzz.bot.state import BotStore
from nostr_buzz.cli.watch import render
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.reports.watch import (
    FeedRecord,
    FeedSummary,
    Moment,
    OutboxRow,
    QueuedRow,
    StateSnapshot,
    watch_view,
)
from tests.support.cli import buzz
from tests.support.events import chat
from tests.support.keys import ALICE

T0 = 1_800_000_000.0
EVENT = "e" * 64


def screen(summary: FeedSummary, snapshot: StateSnapshot) -> str:
    view = watch_view(
        snapshot, summary, moment=Moment(T0 + 75, "now", "2027-01-15"), state_dir="/s"
    )
    console = Console(record=True, width=140, color_system=None)
    console.print(render(view))
    return console.export_text()


def test_the_screen_shows_turns_queue_outbox_and_spend() -> None:
    summary = FeedSummary()
    started = FeedRecord(
        0, "2027-01-15T08:00:00.000Z", "agent_started", payload={"agentName": "demo"}
    )
    summary.add(started, T0)
    for kind, payload in (
        ("turn_started", {"triggeringEventIds": [EVENT]}),
        ("permission_decision", {"title": "Read notes.md", "decision": "approved"}),
        ("metric_queued", {"costUsd": 0.0125}),
    ):
        record = FeedRecord(1, "t", kind, channel_id="eng", turn_id="t1", payload=payload)
        summary.add(record, T0)
    snapshot = StateSnapshot(
        queued=(
            QueuedRow(EVENT, "eng", ALICE.public_key.hex, T0, False),
            QueuedRow("f" * 64, "eng", ALICE.public_key.hex, T0, False),
        ),
        outbox=(OutboxRow(44200, T0 + 60, 1),),
    )
    text = screen(summary, snapshot)
    npub = ALICE.public_key.bech32
    assert f"{npub[:12]}…{npub[-4:]}" in text and "1 min 15 s" in text
    assert "Read notes.md: approved" in text
    assert "buzz watch: /s | demo, up since 08:00:00 UTC" in text
    assert "outbox: 1 waiting (1 metric), oldest 15.0 s" in text
    assert "today (UTC 2027-01-15): $0.0125 over 1 turn; no budget configured" in text
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()]
    assert ["eng", "1", "1", "0", "1 min 15 s", "-"] in rows  # pending, in flight, cancelled


def test_a_tool_title_cannot_drive_the_terminal_or_inject_markup() -> None:
    hostile = "\x1b]0;owned\x07[bold red]x[/] \u202eevil\nforged line"
    summary = FeedSummary()
    summary.add(FeedRecord(1, "t", "turn_started", channel_id="eng", turn_id="t1"), T0)
    summary.add(
        FeedRecord(2, "t", "permission_decision", turn_id="t1", payload={"title": hostile}), T0
    )
    text = screen(summary, StateSnapshot())
    assert "\x1b" not in text and "\u202e" not in text and "forged line" in text
    assert "[bold red]x[/]" in text  # shown as typed, not read as markup
    assert "\\x1b]0;owned\\x07" in text and "\\u202e" in text
    assert not any(line.startswith("forged line") for line in text.splitlines())


def test_once_prints_the_json_view_of_a_bots_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = BotStore(tmp_path / "state")
    queue = store.journal.load_queue()
    event = chat(ALICE, 5, channel="eng")
    queue.push(event, now=T0)
    store.journal.record_push(queue, QueuedEvent(event, "@mention", T0), [], 5)
    store.close()
    (tmp_path / "buzz.toml").write_text('state_dir = "state"\n')
    code, out, err = buzz(capsys, "watch", "--once", "--config", str(tmp_path / "buzz.toml"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["stateDir"] == str(tmp_path / "state") and doc["runningTurns"] == []
    assert [(c["channel"], c["pending"], c["inFlight"]) for c in doc["queue"]] == [("eng", 1, 0)]
    assert doc["budget"] is None and doc["outbox"] == {
        "pending": 0,
        "oldestAgeSeconds": None,
        "kinds": [],
        "entries": [],
    }
    assert not (tmp_path / "state" / DIAGNOSTICS_FILE).exists()  # nothing was written


def test_a_state_directory_that_is_not_a_bots_is_refused_with_its_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = buzz(capsys, "watch", "--once", "--state-dir", str(tmp_path / "absent"))
    assert (code, out) == (3, "") and "no state directory" in err
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    code, out, err = buzz(capsys, "watch", "--once", "--state-dir", str(empty))
    assert (code, out) == (3, "") and "no bot state in" in err
    (empty / "bot.sqlite3").write_text("hello")
    code, out, err = buzz(capsys, "watch", "--once", "--state-dir", str(empty))
    assert (code, out) == (1, "") and "is not a SQLite database" in err
    empty.chmod(0o770)
    code, out, err = buzz(capsys, "watch", "--once", "--state-dir", str(empty))
    assert (code, out) == (1, "") and "may be written by group or others" in err


def test_a_threads_queue_is_shown_by_its_channel_and_root() -> None:
    # [sessions] scope = "thread": each thread queues apart, under {channel}/{root}.
    key = "eng/" + "ab" * 32
    snapshot = StateSnapshot(queued=(QueuedRow(EVENT, key, ALICE.public_key.hex, T0, False),))
    text = screen(FeedSummary(), snapshot)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()]
    assert ["eng/abababab…", "1", "0", "0", "1 min 15 s", "-"] in rows
    view = watch_view(snapshot, FeedSummary(), moment=Moment(T0, "now", "d"), state_dir="/s")
    assert [(c.channel, c.thread) for c in view.queue] == [(key, "ab" * 32)]
