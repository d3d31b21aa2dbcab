"""``buzz metrics`` against hostile metrics, as a real process on a real relay.

Anyone can encrypt a metric to the owner: a second agent key sends forged-but-valid metrics,
and the owner's own agent key is made to send absurd counters, formula-shaped model names,
rich markup and bidirectional controls.  The report counts only the owner's agents, keeps every
total finite, writes safe CSV and never crashes on a name.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import BackgroundLoop
from tests.support.hostile_metrics import (
    ESCAPES_SHOWN,
    MARKUP,
    MINE,
    TS,
    hostile_metrics,
)
from tests.support.keys import OWNER, STRANGER
from tests.support.metric_scenario import publish_all
from tests.support.relays import start_relay


@pytest.fixture(scope="module")
def relay_url() -> Iterator[str]:
    bg = BackgroundLoop()
    relay = bg.call(start_relay())
    try:
        bg.call(publish_all(relay.url, hostile_metrics()))
        yield relay.url
    finally:
        bg.call(relay.close())
        bg.close()


def buzz(tmp_path: Path, *argv: str, tty: bool = False) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = OWNER.hex
    env["COLUMNS"] = "200"
    cmd = [sys.executable, "-m", "nostr_buzz", "metrics", "--timeout", "5", *argv]
    if not tty:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False
        )
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(cmd, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=tmp_path) as p:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        _, err = p.communicate(timeout=60)
    os.close(master)
    return p.returncode, b"".join(chunks).decode(), err.decode()


def no_constants(name: str) -> object:
    raise AssertionError(f"{name} in JSON output")


def test_totals_count_only_the_owners_agents_and_stay_finite(
    relay_url: str, tmp_path: Path
) -> None:
    code, out, err = buzz(
        tmp_path, "--relay", relay_url, "--json", "--agent", MINE.public_key.bech32
    )
    assert code == 0, err
    assert "Traceback" not in err
    doc = json.loads(out, parse_constant=no_constants)
    assert {t["agent"] for t in doc["totals"]} == {MINE.public_key.hex}
    assert {t["agent"] for t in doc["turns"]} == {MINE.public_key.hex}
    assert doc["unknownAgents"] == [
        {
            "agent": STRANGER.public_key.hex,
            "metrics": 2,
            "firstTimestamp": TS.format(7),
            "lastTimestamp": TS.format(8),
        }
    ]
    assert doc["ignored"]["byReason"] == {"invalid_payload": 3}
    assert sum(t["inputTokens"] or 0 for t in doc["totals"]) == 600 + 2**53 + 1 + 1
    cost = sum(t["costUsd"] or 0 for t in doc["totals"])
    assert cost == pytest.approx(3.0 + 1e6)  # the 10^9 jump is unknown, not counted
    by_seq = {t["turnSeq"]: t for t in doc["turns"] if t["sessionId"] == "s"}
    assert by_seq[2]["costUsd"] is None and by_seq[2]["inputTokens"] == 1
    assert "not your agents" in err and STRANGER.public_key.hex[:12] in err


def test_the_config_names_the_agents_too(relay_url: str, tmp_path: Path) -> None:
    (tmp_path / "buzz.toml").write_text(f'agents = ["{MINE.public_key.hex}"]\n')
    code, out, err = buzz(tmp_path, "--relay", relay_url, "--json")
    assert code == 0, err
    doc = json.loads(out, parse_constant=no_constants)
    assert {t["agent"] for t in doc["totals"]} == {MINE.public_key.hex}
    assert [a["agent"] for a in doc["unknownAgents"]] == [STRANGER.public_key.hex]


def test_without_agents_every_agent_counts_and_a_note_says_so(
    relay_url: str, tmp_path: Path
) -> None:
    code, out, err = buzz(tmp_path, "--relay", relay_url, "--json")
    assert code == 0, err
    doc = json.loads(out, parse_constant=no_constants)
    assert {t["agent"] for t in doc["totals"]} == {MINE.public_key.hex, STRANGER.public_key.hex}
    assert doc["unknownAgents"] == []
    assert "name your agents with --agent" in err


def test_csv_cells_are_never_formulas(relay_url: str, tmp_path: Path) -> None:
    for rows in ([], ["--turns"]):
        code, out, err = buzz(tmp_path, "--relay", relay_url, "--format", "csv", *rows)
        assert code == 0, err
        cells = [cell for line in out.splitlines()[1:] for cell in line.split(",")]
        assert not [c for c in cells if c.startswith(("=", "+", "-", "@"))], out
        assert "'=cmd|' /C calc'!A0" in out.replace('"', "") or "'=cmd" in out
        assert "'-1+1" in out


def test_tables_show_markup_and_bidi_as_text(relay_url: str, tmp_path: Path) -> None:
    for tty in (False, True):
        code, out, err = buzz(
            tmp_path, "--relay", relay_url, "--turns", "--agent", MINE.public_key.hex, tty=tty
        )
        assert code == 0, err
        assert "Traceback" not in err
        assert MARKUP in out  # shown literally, never read as rich markup
        assert "\u202e" not in out and "\u2066" not in out
        assert "gpt\\u202eevil\\u2066" in out
        assert "\x1b" not in out or tty  # colour only on a terminal
        assert "\x1b]" not in out and "\x07" not in out and "\x9b" not in out
        assert "\u200b" not in out and "\u2060" not in out and "\ufeff" not in out
        assert ESCAPES_SHOWN[:30] in out  # its start: a narrow terminal wraps the cell


def test_csv_shows_escape_sequences_and_invisible_characters_as_text(
    relay_url: str, tmp_path: Path
) -> None:
    """An agent's model name sets the terminal title (OSC), colours it (C1 CSI) and hides
    zero-width and bidi characters: the CSV carries it escaped, as the table does."""
    for rows in ([], ["--turns"]):
        code, out, err = buzz(tmp_path, "--relay", relay_url, "--format", "csv", *rows)
        assert code == 0, err
        assert ESCAPES_SHOWN in out
        hidden = "\x1b\x07\x9b\u200b\u2060\ufeff\u202e\u2066"
        assert not [c for c in out if c in hidden], out
