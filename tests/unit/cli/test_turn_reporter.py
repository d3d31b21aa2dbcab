"""``buzz run``'s line per turn: it waits for the turn's metric (sealed through the agent's
signer after the turn ends), and says so when the metric does not come in time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nostr_buzz.cli.run import TurnReporter
from nostr_buzz.io.diagnostics import DiagnosticRecord


def record(kind: Any, **payload: Any) -> DiagnosticRecord:
    return DiagnosticRecord(0, "t", kind, "eng", "s", "turn-1", payload)


async def run(metric_after: float | None, wait: float) -> list[str]:
    lines: list[str] = []
    reporter = TurnReporter(lines.append, Path("state"), lambda: 0.0)
    reporter.metric_wait = wait
    reporter.tokens_of = lambda event_id: f"tokens of {event_id}"
    reporter(record("turn_started", triggeringEventIds=["e" * 64]))
    reporter(record("turn_completed", outcome="success"))
    if metric_after is not None:
        await asyncio.sleep(metric_after)  # the signer's work after the turn's end
        reporter(record("metric_queued", eventId="m1"))
    await asyncio.sleep(wait + 0.05)
    return lines


def test_the_line_waits_for_the_metric_sealed_after_the_turn() -> None:
    # By default long enough for a local signer; a bunker adds its own timeout (buzz run).
    assert TurnReporter(print, Path("state"), lambda: 0.0).metric_wait >= 5
    [line] = asyncio.run(run(metric_after=0.02, wait=0.5))
    assert line.startswith("buzz: turn in eng for eeeeeeeeeeee: success, tokens of m1, ")


def test_without_a_metric_in_time_the_line_says_no_usage_was_reported() -> None:
    [line] = asyncio.run(run(metric_after=None, wait=0.05))
    assert ": success, no usage reported, " in line


def test_a_failed_telemetry_export_is_a_line_of_its_own() -> None:
    lines: list[str] = []
    TurnReporter(lines.append, Path("state"), lambda: 0.0)(
        record("telemetry_failed", error="RuntimeError")
    )
    assert lines == ["buzz: telemetry export failed (RuntimeError); turns go on"]
