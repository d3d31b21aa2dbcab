"""``buzz metrics --format html`` rendered in headless Chromium.

200 real metrics (signed, NIP-44 encrypted to the owner) over ten UTC days go to a real relay;
the real ``buzz metrics --format html --output FILE`` reads them back, and Chromium, driven over
the DevTools protocol, loads the page: every chart is drawn with as many points as the JSON
report of the same relay implies, the console shows no error, and a screenshot of the whole page
is kept (under the test's tmp dir and tests/artifacts/, ignored by git; its path is printed).
Then an agent's markup in a model name, a channel and a session id is shown as text: no script
runs, nothing loads, the page stays whole.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.reports.metrics_charts import CHART_NAMES, MAX_CHANNEL_BARS
from tests.support import cli
from tests.support.chromium import chromium
from tests.support.cli import BackgroundLoop
from tests.support.hostile_metrics import HTML_INJECTIONS, html_injection_metrics
from tests.support.keys import OWNER
from tests.support.metric_days import DAYS, ten_days
from tests.support.metric_scenario import publish_all
from tests.support.relays import start_relay

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

#: Load a page (and keep its screenshot): what the page says about itself, console errors, and
#: the console's other messages.
Render = Callable[..., tuple[Any, list[str], list[str]]]

#: What the page says about itself: each chart's declared and drawn marks, and what it holds.
PAGE_FACTS = """(() => {
  const charts = {};
  const chart = document.querySelector("svg.chart"), table = document.querySelector("table");
  for (const svg of document.querySelectorAll("svg.chart")) {
    charts[svg.dataset.chart] = {
      declared: Number(svg.dataset.points),
      drawn: svg.querySelectorAll(".point").length,
      height: svg.getBoundingClientRect().height,
    };
  }
  return {
    charts,
    title: document.title,
    scripts: document.scripts.length,
    loaders: document.querySelectorAll("img, iframe, object, embed, link, [onload], [onerror]")
      .length,
    styles: document.querySelectorAll("style").length,
    tables: document.querySelectorAll("table").length,
    chartsBeforeTables: !!(chart && table &&
      chart.compareDocumentPosition(table) & Node.DOCUMENT_POSITION_FOLLOWING),
    bodyShown: getComputedStyle(document.body).display !== "none",
    text: document.body.textContent,
  };
})()"""


@pytest.fixture(scope="module")
def relays() -> Iterator[tuple[str, str]]:
    """One relay with the ten days of metrics, one with the markup."""
    bg = BackgroundLoop()
    days = bg.call(start_relay())
    hostile = bg.call(start_relay())
    try:
        bg.call(publish_all(days.url, ten_days()))
        bg.call(publish_all(hostile.url, html_injection_metrics()))
        yield days.url, hostile.url
    finally:
        bg.call(days.close())
        bg.call(hostile.close())
        bg.close()


def buzz_metrics(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = OWNER.hex
    cmd = [sys.executable, "-m", "nostr_buzz", "metrics", "--timeout", "5", *argv]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=env, cwd=cwd, check=False
    )


def expected_points(doc: dict[str, Any]) -> dict[str, int]:
    """Each chart's marks, counted from the JSON report: one per (agent, model, day) with a
    cost, or with tokens; one bar per channel; three percentiles per day with a timed turn;
    a cache read and a cache write share per day that has them; a known and an unknown bar
    per day where there are such turns."""
    totals, turns = doc["totals"], doc["turns"]
    channels = Counter(t["channelId"] for t in turns)
    cache: defaultdict[str, set[str]] = defaultdict(set)
    for t in turns:
        if t["inputTokens"]:
            for part in ("cacheReadTokens", "cacheWriteTokens"):
                if t[part] is not None:
                    cache[t["day"]].add(part)
    unknown: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in totals:
        unknown[row["day"]][0] += row["turns"] - row["unknownTurns"]
        unknown[row["day"]][1] += row["unknownTurns"]
    return {
        "spend": sum(r["costUsd"] is not None for r in totals),
        "tokens": sum(
            r["inputTokens"] is not None or r["outputTokens"] is not None for r in totals
        ),
        "channels": min(len(channels), MAX_CHANNEL_BARS),
        "durations": 3 * len({t["day"] for t in turns if t["durationSeconds"] is not None}),
        "cache": sum(len(parts) for parts in cache.values()),
        "unknown": sum((k > 0) + (u > 0) for k, u in unknown.values()),
    }


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Render]:
    """One headless Chromium for the module, on a loop of its own."""
    bg = BackgroundLoop()
    try:
        running = bg.enter(chromium(tmp_path_factory.mktemp("chromium-profile")))

        def render(page: Path, shot: Path | None = None) -> tuple[Any, list[str], list[str]]:
            load = bg.call(running.open(page))
            facts = bg.call(running.evaluate(PAGE_FACTS))
            if shot is not None:
                bg.call(running.screenshot(shot))
            return facts, load.errors, load.messages

        yield render
    finally:
        bg.close()


def keep(shot: Path) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / shot.name
    shutil.copyfile(shot, kept)
    print(f"\nscreenshot: {kept} (also {shot})")
    return kept


def test_the_console_check_sees_what_a_page_logs(browser: Render, tmp_path: Path) -> None:
    """The check below can fail: a console error, an exception and a load the page's policy
    blocks all reach it."""
    page = tmp_path / "noisy.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body>'
        "<script>console.error('logged'); throw new Error('thrown');</script></body></html>"
    )
    _, errors, _ = browser(page)
    assert any("logged" in e for e in errors) and any("thrown" in e for e in errors), errors
    blocked = tmp_path / "blocked.html"
    blocked.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv='
        '"Content-Security-Policy" content="default-src \'none\'"><title>t</title></head>'
        '<body><img src="x.png"></body></html>'
    )
    _, errors, _ = browser(blocked)
    assert any("Content Security Policy" in e for e in errors), errors


def test_two_hundred_metrics_over_ten_days_render_in_chromium(
    relays: tuple[str, str], browser: Render, tmp_path: Path
) -> None:
    url = relays[0]
    json_run = buzz_metrics(tmp_path, "--relay", url, "--json")
    assert json_run.returncode == 0, json_run.stderr
    doc = json.loads(json_run.stdout)
    assert len(doc["turns"]) == 200
    assert len({t["day"] for t in doc["turns"]}) == DAYS

    page = tmp_path / "report.html"
    html_run = buzz_metrics(tmp_path, "--relay", url, "--format", "html", "--output", str(page))
    assert html_run.returncode == 0, html_run.stderr
    assert html_run.stdout == ""  # the page went to the file
    assert f"report written to {page}" in html_run.stderr

    shot = tmp_path / "metrics-report.png"
    facts, errors, messages = browser(page, shot)
    kept = keep(shot)
    assert errors == [], errors
    assert set(facts["charts"]) == set(CHART_NAMES)
    expected = expected_points(doc)
    for name in CHART_NAMES:
        chart = facts["charts"][name]
        assert chart["drawn"] == chart["declared"] == expected[name], (name, chart, messages)
        assert chart["height"] > 50, (name, chart)  # laid out, not collapsed
    assert expected["durations"] == 3 * DAYS and expected["channels"] == 4
    assert facts["scripts"] == 0 and facts["loaders"] == 0
    assert facts["chartsBeforeTables"] and facts["tables"] >= 5
    assert f"{len(doc['turns'])}" in facts["text"]
    assert kept.stat().st_size > 20_000  # a drawn page, not a blank one


def test_an_agents_markup_is_shown_as_text_and_never_runs(
    relays: tuple[str, str], browser: Render, tmp_path: Path
) -> None:
    run = buzz_metrics(tmp_path, "--relay", relays[1], "--format", "html")
    assert run.returncode == 0, run.stderr
    page = tmp_path / "hostile.html"
    page.write_text(run.stdout, encoding="utf-8")
    assert "<script" not in run.stdout and "<img" not in run.stdout

    facts, errors, _ = browser(page, tmp_path / "hostile.png")
    keep(tmp_path / "hostile.png")
    assert errors == [], errors  # a blocked script or load would be a console error
    assert facts["title"] == "buzz metrics"  # no script changed it
    assert facts["scripts"] == 0 and facts["loaders"] == 0 and facts["styles"] == 1
    assert facts["bodyShown"]
    assert set(facts["charts"]) == set(CHART_NAMES)
    text = facts["text"]
    assert HTML_INJECTIONS["model"] in text  # shown as written
    assert HTML_INJECTIONS["session_id"] in text
    assert HTML_INJECTIONS["channel_id"] in text
    assert "\\u202e" in text and "\u202e" not in text  # bidirectional controls shown, not obeyed


@pytest.mark.usefixtures("no_ambient_config")
def test_an_empty_window_is_a_page_with_empty_charts(
    relays: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--relay", relays[0], "--key", OWNER.hex, "--format", "html", "--since", "2030-01-01")
    code, out, err = cli.buzz(capsys, "metrics", *argv)
    assert code == 0, err
    assert "no metrics in this window" in err
    assert out.count('data-points="0"') == len(CHART_NAMES) and out.count("no data") == 6
    assert "from 2030-01-01 00:00:00 UTC to the last" in out
