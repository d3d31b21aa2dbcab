"""``buzz metrics`` against real relays on 127.0.0.1 (LocalRelay in a background loop).

The world is ``test_metrics_reader.scenario()``: two agents, three sessions over two UTC days,
created_at out of turn order, a tampered manifest and four forged metrics.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from relays import free_port, start_relay
from test_metrics_reader import AGENT_A, AGENT_B, OWNER, Scenario, publish_all, scenario

from nostr_buzz.cli.app import main
from nostr_buzz.cli.metrics import parse_time
from nostr_buzz.cli.output import CliFailure

T = TypeVar("T")
WAIT = 15.0


class BackgroundLoop:
    """An asyncio loop in a daemon thread, where the relays live while ``main`` runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


async def _stop(running: Any) -> None:
    running.stop()


@pytest.fixture(scope="module")
def world() -> Scenario:
    return scenario()


@pytest.fixture(scope="module")
def relays(world: Scenario) -> Iterator[tuple[str, str]]:
    """Relay one has everything; relay two a copy of part of it (to be de-duplicated)."""
    bg = BackgroundLoop()
    one = bg.call(start_relay())
    two = bg.call(start_relay())
    try:
        bg.call(publish_all(one.url, world.all))
        bg.call(publish_all(two.url, world.valid[:3] + world.forged[:2]))
        yield one.url, two.url
    finally:
        bg.call(_stop(one))
        bg.call(_stop(two))
        bg.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["metrics", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def as_owner(relays: tuple[str, str]) -> list[str]:
    return ["--relay", relays[0], "--relay", relays[1], "--key", OWNER.bech32, "--timeout", "5"]


def dead_url() -> str:
    return f"ws://127.0.0.1:{free_port()}"


# --- output formats ---------------------------------------------------------------------------


def test_json_report_has_totals_turns_ignored_counts_and_flags(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str], world: Scenario
) -> None:
    code, out, err = buzz(capsys, "--format", "json", *as_owner(relays))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["owner"] == OWNER.public_key.hex and doc["since"] is None
    assert set(doc["relays"]) == set(relays)
    assert all(r["finished"] for r in doc["relays"].values())
    # De-duplicated across the two relays; the metric for another owner never arrives.
    assert sorted(t["eventId"] for t in doc["turns"]) == sorted(e.id for e in world.valid)
    assert doc["ignored"] == {
        "total": 4,
        "byReason": {
            "not_for_owner": 1,
            "agent_mismatch": 1,
            "undecryptable": 1,
            "invalid_payload": 1,
        },
    }
    assert doc["manifestMismatches"] == 1
    a1 = [t for t in doc["turns"] if t["sessionId"] == "a1"]
    assert [t["turnSeq"] for t in a1] == [1, 2, 3]
    assert [t["manifestValid"] for t in a1] == [True, False, None]
    assert [t["inputTokens"] for t in a1] == [100, 150, None]
    assert [t["deltaSource"] for t in a1] == ["reported", "cumulative", "cumulative"]
    totals = {(t["day"], t["agent"], t["model"]): t for t in doc["totals"]}
    assert set(totals) == {
        ("2026-12-02", AGENT_A.public_key.hex, "model-a"),
        ("2026-12-01", AGENT_B.public_key.hex, "model-b"),
        ("2026-12-02", AGENT_B.public_key.hex, "model-b"),
    }
    b2 = totals[("2026-12-02", AGENT_B.public_key.hex, "model-b")]
    assert b2 == {
        "day": "2026-12-02",
        "agent": AGENT_B.public_key.hex,
        "model": "model-b",
        "turns": 2,
        "inputTokens": 2001,
        "outputTokens": 202,
        "totalTokens": 2203,
        "costUsd": 0.25,
        "unknownTurns": 1,
        "cacheReadTokens": None,
        "cacheWriteTokens": None,
    }
    assert "ignored 4 metric event(s)" in err and "manifestValid: false" in err


def test_csv_totals_and_turns_have_a_header_line(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, err = buzz(capsys, "--format", "csv", *as_owner(relays))
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [
        "day",
        "agent",
        "model",
        "turns",
        "inputTokens",
        "outputTokens",
        "totalTokens",
        "costUsd",
        "unknownTurns",
        "cacheReadTokens",
        "cacheWriteTokens",
    ]
    assert len(rows) == 4
    by_day = {(r[0], r[2]): r for r in rows[1:]}
    assert by_day[("2026-12-02", "model-a")][4:8] == ["250", "30", "280", "0.03"]

    code, out, _ = buzz(capsys, "--format", "CSV", "--turns", *as_owner(relays))
    assert code == 0
    turns = list(csv.DictReader(io.StringIO(out)))
    assert len(turns) == 6
    third = next(t for t in turns if t["sessionId"] == "a1" and t["turnSeq"] == "3")
    assert third["inputTokens"] == "" and third["deltaReliable"] == "false"


def test_plain_table_when_stdout_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, _ = buzz(capsys, *as_owner(relays))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "day",
        "agent",
        "model",
        "turns",
        "input",
        "cache",
        "read",
        "cache",
        "write",
        "output",
        "total",
        "cost",
        "USD",
        "unknown",
    ]
    assert len(lines) == 4
    assert "\x1b" not in out  # no terminal escapes when piped
    a_line = next(line for line in lines if "model-a" in line)
    assert AGENT_A.public_key.hex[:12] + "…" in a_line and "0.030000" in a_line

    code, out, _ = buzz(capsys, "--turns", *as_owner(relays))
    assert code == 0
    assert len(out.splitlines()) == 7 and "MISMATCH" in out


def test_rich_table_renders() -> None:
    from nostr_buzz.cli.metrics import render_rich_table
    from nostr_buzz.core.metrics_report import build_report, open_metric

    opened = [open_metric(OWNER, e) for e in scenario().valid]
    report = build_report([m for m in opened if not isinstance(m, str)])
    text = render_rich_table(report, turns=False, width=160)
    assert "model-a" in text and "usage per day" in text and "0.030000" in text
    assert "MISMATCH" in render_rich_table(report, turns=True, width=200)


# --- windows ----------------------------------------------------------------------------------


def test_since_and_until_as_dates_cover_whole_utc_days(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, _ = buzz(
        capsys,
        "--format",
        "json",
        "--since",
        "2026-12-01",
        "--until",
        "2026-12-01",
        *as_owner(relays),
    )
    assert code == 0
    doc = json.loads(out)
    assert [t["timestamp"] for t in doc["turns"]] == ["2026-12-01T23:59:59.999Z"]
    assert doc["until"] - doc["since"] == 86_399

    code, out, _ = buzz(
        capsys, "--format", "json", "--since", "2026-12-02T10:30:00+00:00", *as_owner(relays)
    )
    assert code == 0
    assert sorted(t["timestamp"] for t in json.loads(out)["turns"]) == [
        "2026-12-02T11:00:00.000Z",
        "2026-12-02T12:00:00.000Z",
    ]


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


def test_key_and_relays_from_the_environment(
    capsys: pytest.CaptureFixture[str],
    relays: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", OWNER.hex)
    monkeypatch.setenv("BUZZ_RELAYS", relays[0])
    code, out, _ = buzz(capsys, "--format", "json")
    assert code == 0
    assert len(json.loads(out)["turns"]) == 6


def test_another_key_reads_nothing_but_still_succeeds(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, err = buzz(capsys, "--format", "json", "--relay", relays[0], "--key", AGENT_A.hex)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["turns"] == [] and doc["totals"] == []


def test_one_dead_relay_is_a_warning(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    dead = dead_url()
    code, out, err = buzz(
        capsys,
        "--format",
        "json",
        "--relay",
        relays[0],
        "--relay",
        dead,
        "--key",
        OWNER.hex,
        "--timeout",
        "2",
    )
    assert code == 0
    assert len(json.loads(out)["turns"]) == 6
    assert f"relay {dead}" in err


def test_no_relay_reachable_exits_2_with_empty_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = buzz(
        capsys,
        "--relay",
        dead_url(),
        "--relay",
        dead_url(),
        "--key",
        OWNER.hex,
        "--timeout",
        "2",
    )
    assert (code, out) == (2, "")
    assert "no relay answered" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "last tuesday"], "--since"),
        (["--until", "2026-02-30"], "--until"),
        (["--since", "2026-12-03", "--until", "2026-12-02"], "later than --until"),
        (["--format", "xml"], "--format"),
        (["--relay", "http://127.0.0.1:1"], "ws://"),
        (["--no-such-option"], "No such option"),
    ],
)
def test_bad_input_exits_1_with_empty_stdout(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = buzz(capsys, *argv, "--key", OWNER.hex)
    assert (code, out) == (1, "")
    assert message in err


def test_missing_key_or_relay_exits_1_naming_the_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = buzz(capsys, "--relay", dead_url())
    assert (code, out) == (1, "")
    assert "--key, BUZZ_PRIVATE_KEY" in err
    code, out, err = buzz(capsys, "--key", OWNER.hex)
    assert (code, out) == (1, "")
    assert "--relay, BUZZ_RELAYS" in err


def test_a_bad_key_is_never_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    bad = "nsec1" + "q" * 58
    code, out, err = buzz(capsys, "--relay", dead_url(), "--key", bad)
    assert (code, out) == (1, "")
    assert bad not in err


def test_real_process_prints_no_progress_when_stderr_is_not_a_terminal(
    relays: tuple[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = OWNER.hex
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "metrics", "--format", "csv", "--relay", relays[0]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("day,agent,model,")
    assert "reading metrics" not in proc.stderr and "so far" not in proc.stderr
    assert proc.stderr.startswith("buzz: ignored 4 metric event(s)")


def test_buzz_toml_is_used_and_the_environment_wins_over_it(
    capsys: pytest.CaptureFixture[str],
    relays: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    (tmp_path / "buzz.toml").write_text(
        f'secret_key = "{OWNER.hex}"\nrelays = ["{relays[0]}"]\n', encoding="utf-8"
    )
    (tmp_path / "buzz.toml").chmod(0o600)  # it holds secret_key inline
    code, out, err = buzz(capsys, "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["turns"]) == 6
    monkeypatch.setenv("BUZZ_RELAYS", dead_url())  # replaces the file's list, never merged
    code, out, err = buzz(capsys, "--format", "json", "--timeout", "2")
    assert (code, out) == (2, "")
