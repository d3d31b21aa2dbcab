"""``buzz demo`` as a real subprocess: the whole pipeline on loopback, well under a minute."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from nostr_buzz.event import Event

SECTIONS = [
    "== 1. setup ==",
    "== 2. a mention (turn 1) ==",
    "== 3. a burst of replies in one thread (coalesced: turn 2) ==",
    "== 4. a reply by a second person (a separate turn: turn 3) ==",
    "== 5. a message while a turn is running (a steer into turn 4) ==",
    "== 6. a private message (NIP-17), answered privately (turn 6) ==",
    "== 7. metrics: published by the agent, read back by the owner ==",
    "== 8. one message, fetched with `buzz messages raw --event` ==",
    "== 9. a new canvas revision: the running session keeps its own ==",
    "== 10. the owner starts a new session (!new): it sees the new revision ==",
    "== 11. done ==",
]


def _buzz(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    return subprocess.run(
        [sys.executable, "-m", "nostr_buzz", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        env=env,
        check=False,
    )


def test_buzz_demo_runs_the_whole_pipeline_and_exits_0() -> None:
    started = time.monotonic()
    done = _buzz("demo")
    assert time.monotonic() - started < 60
    assert done.returncode == 0, done.stderr
    out = done.stdout
    positions = [out.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    # The first turn's envelope and every manifest (hash + layer table).
    assert "<buzz-turn>" in out and "</buzz-turn>" in out
    assert "Content: Hi buzz, why did last night" in out
    for turn in (1, 2, 3, 4):
        assert f"manifest of turn {turn}: sha256:" in out
    assert "platform_contract" in out and "current_instruction" in out
    assert "alex posted 3 replies; turn 2 was triggered by 3" in out
    assert "steer delivery: injected" in out
    assert "steer_delivery_contract" in out
    # A private message answered privately, never in the clear on the relay or in the log.
    assert "alex (private, kind 14 in a kind 1059 gift wrap)" in out
    assert "prompt text in the diagnostics: withheld" in out
    assert "alex opened it:\n  demo-agent turn" in out
    assert "the relay holds gift wraps only" in out
    # Metrics read back by the owner: six turns (sam's message during turn 4 is the fifth,
    # the private message the sixth), every manifest valid.
    assert "6 metric event(s)" in out
    per_turn = out.split("per turn:\n")[1].split("\n\n")[0].splitlines()
    assert len(per_turn) == 1 + 6 and all(line.endswith("ok") for line in per_turn[1:])
    # The raw message is one canonical, verifiable event: the agent's first reply.
    raw_line = out.split("== 8.")[1].splitlines()[2]
    event = Event.from_json(raw_line)
    assert event.kind == 9 and json.loads(raw_line)["content"].startswith("demo-agent turn 1")
    # Standing context from Nostr: the canvas and the core memory reach the system role; a new
    # revision leaves the running session alone and changes the next session's manifest.
    standing = out.split("the standing context frozen for this session (in the agent's system")[1]
    assert "<core-memory>\nAlex owns the deploys" in standing
    assert "<channel-canvas>\nCanvas revision (event ID): " in standing
    assert "Fetch current content with: buzz canvas get --channel demo" in standing
    assert "the revision this session started with" in out
    diff = out.split("what changed between the two turns")[1].split("== 11.")[0]
    assert "changed  channel_canvas" in diff and "hash moved" in diff
    assert "demo finished in" in out


def test_buzz_demo_with_an_agent_that_cannot_start_fails_clearly() -> None:
    done = _buzz("demo", "--agent", "/nonexistent/agent acp")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "demo failed" in done.stderr and "cannot start the agent" in done.stderr
    assert _buzz("demo", "--agent", "  ").returncode == 1


def test_buzz_demo_keeps_the_agent_log_and_shows_its_last_lines(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho 'boom: the model endpoint refused us' >&2\nexit 3\n")
    script.chmod(0o755)
    done = _buzz("demo", "--agent", str(script))
    assert done.returncode == 1 and done.stdout == ""
    assert "boom: the model endpoint refused us" in done.stderr
    kept = re.search(r"the agent log is kept at (\S+);", done.stderr)
    assert kept is not None
    log = Path(kept.group(1))
    try:
        assert "boom: the model endpoint refused us" in log.read_text(encoding="utf-8")
    finally:
        log.unlink()


def test_buzz_demo_pass_env_names_are_checked() -> None:
    done = _buzz("demo", "--pass-env", "NOT=A_NAME")
    assert done.returncode == 1
    assert "--pass-env: 'NOT=A_NAME' is not an environment variable name" in done.stderr
