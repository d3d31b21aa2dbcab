"""``buzz metrics`` without a relay: the rich table renders, and the time forms of --since and
--until (the reports over real relays are in tests/e2e/cli/test_metrics.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nostr_buzz.cli.metrics import parse_time
from nostr_buzz.cli.output import CliFailure
from tests.support import cli
from tests.support.metric_scenario import (
    OWNER,
    scenario,
)

pytestmark = pytest.mark.usefixtures("no_ambient_config")


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return cli.buzz(capsys, "metrics", *argv)


# --- output formats ---------------------------------------------------------------------------


def test_rich_table_renders() -> None:
    from nostr_buzz.cli.metrics import render_rich_table
    from nostr_buzz.reports.metrics_report import build_report, open_metric

    opened = [open_metric(OWNER, e) for e in scenario().valid]
    report = build_report([m for m in opened if not isinstance(m, str)])
    text = render_rich_table(report, turns=False, width=160)
    assert "model-a" in text and "usage per day" in text and "0.030000" in text
    assert "MISMATCH" in render_rich_table(report, turns=True, width=200)


# --- windows ----------------------------------------------------------------------------------


def test_time_forms() -> None:
    assert parse_time("1796205600", option="--since") == 1_796_205_600
    assert parse_time("2026-12-02T10:00:00Z", option="--since") == 1_796_205_600
    assert parse_time("2026-12-02t12:00:00.9+02:00", option="--since") == 1_796_205_600
    assert parse_time("2026-12-02", option="--since") == 1_796_169_600
    assert parse_time("2026-12-02", option="--until", end_of_day=True) == 1_796_255_999
    for bad in ("yesterday", "2026-13-01", "2026-12-02T10:00:00", "-5", "1.5"):
        with pytest.raises(CliFailure):
            parse_time(bad, option="--since")


# --- sources and exit codes -------------------------------------------------------------------


# =================================================================================================
# Conformance: metric publishing and the owner's reader checked from docs/metrics.md "Publishing:
# never lose a metric" and "The owner's reader (buzz metrics)".
# =================================================================================================


WAIT = 10.0  # bound on every wait for something a relay or a process does


# --- building metrics by hand -----------------------------------------------------------------


async def until(predicate: Any, what: str) -> None:
    """Wait (bounded) for a condition another task or process makes true."""
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.02)
