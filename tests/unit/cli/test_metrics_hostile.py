"""Hostile metrics, pure: the usage tracker never builds a metric it cannot publish, and the report
keeps strangers apart (the command against a relay full of them is in
tests/e2e/cli/test_metrics_hostile.py)."""

from __future__ import annotations

from nostr_buzz.core.usage import UsageTracker
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event
from nostr_buzz.reports.metrics_report import build_report, open_metric
from tests.support.hostile_metrics import (
    MINE,
    TS,
    hostile_metrics,
)
from tests.support.keys import OWNER, STRANGER


def test_a_tracker_never_builds_a_metric_it_cannot_publish() -> None:
    tracker = UsageTracker()
    tracker.session_started("s")
    tracker.begin_turn("s")
    tracker.observe_turn("s", input_tokens=2**60, output_tokens=1, total_tokens=2**60)
    tracker.observe_cost("s", 5e6)
    record = tracker.end_turn("s")
    assert record is not None
    assert record.turn.input_tokens is None and record.turn.total_tokens is None
    assert record.turn.cost_usd is None and record.turn.output_tokens == 1
    payload = MetricPayload(harness="goose", timestamp=TS.format(1), turn=record.turn)
    build_metric_event(MINE, OWNER.public_key, payload)  # valid


def test_the_report_itself_keeps_strangers_apart() -> None:
    opened = [open_metric(OWNER, e) for e in hostile_metrics()]
    metrics = [m for m in opened if not isinstance(m, str)]
    report = build_report(metrics, agents=[MINE.public_key.hex.upper()])
    assert {r.agent for r in report.turns} == {MINE.public_key.hex}
    assert [(a.agent, a.metrics) for a in report.unknown_agents] == [(STRANGER.public_key.hex, 2)]
