"""The bot end to end with the real adapters on a real relay: what the per-adapter tests
(``test_claude_agent_acp.py``, ``test_codex_acp.py``, ``test_gemini_cli.py``) leave out —
failed turns, the ``[agent] permissions`` settings, crashes, ``buzz demo`` and ``buzz run``.

The harness is :mod:`tests.support.adapter_bot`.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nostr_buzz.io.agent_group import group_members
from nostr_buzz.io.pool import RelayPool
from tests.support.adapter_bot import (
    USAGE,
    WAIT,
    adapter_processes,
    answer,
    bot_world,
    held,
    running,
    until,
    until_reply,
)
from tests.support.model_server import ModelServer
from tests.support.real_adapters import CLAUDE, CODEX, GEMINI, adapter, codex_env

# -- failed turns ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [CODEX, GEMINI])
async def test_a_failed_turn_is_reported_and_retried_in_a_fresh_session(
    tmp_path: Path, name: str
) -> None:
    """(Claude Code retries a refused model call on its own: the mock's one refusal never
    reaches the bot.)"""
    async with bot_world(tmp_path) as bot, running(bot, name) as plugin:
        question = bot.message("FAIL:overloaded ASK:again")
        # the model refuses once: the turn fails with the agent's error, the batch is retried
        # (every session is retired after a failed turn) and answered in a new session
        assert await answer(bot, plugin, question) == "ANSWER:again"
        [failed] = bot.of("turn_failed")
        metrics = await bot.metrics(2)
        # the error's text is never posted as a reply
        assert (await bot.answers())[question.id] == ["ANSWER:again"]
    assert "the mock refuses: overloaded" in failed.payload["error"]
    assert failed.turn_id is not None
    assert [r.payload["outcome"] for r in bot.of("turn_completed")] == ["failed", "success"]
    assert len(bot.of("session_replaced")) == 1
    assert sorted(m.outcome or "" for m in metrics) == ["failed", "success"]


# -- permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mode", "human", "owner"),
    [
        (CLAUDE, "allow", True, True),
        (CLAUDE, "reject", False, False),
    ],
)
async def test_shell_tool_follows_the_permissions_setting(
    tmp_path: Path, name: str, mode: str, human: bool, owner: bool
) -> None:
    """``allow`` approves a non-owner's (gate ``allowlist``) shell command, ``reject`` even the
    owner's (the default, ``owner``, is played by each adapter's own test)."""
    work = tmp_path / "work"
    async with bot_world(tmp_path) as bot:
        config = {
            "gate": "allowlist",
            "allowlist": frozenset({bot.human.public_key.hex}),
            "permissions": mode,
        }
        async with running(bot, name, **config) as plugin:
            stranger = bot.message("SHELL:touch by-human;; ASK:h", author=bot.human)
            await plugin.handle_event(stranger)
            await bot.count("permission_decision", 1)
            await bot.count("turn_completed", 1)
            owners = bot.message("SHELL:touch by-owner;; ASK:o")
            await plugin.handle_event(owners)
            await bot.count("permission_decision", 2)
            await bot.count("turn_completed", 2)
    decisions = [(r.payload["decision"], r.payload["title"]) for r in bot.of("permission_decision")]
    expected = ["approved" if ok else "rejected" for ok in (human, owner)]
    assert [d for d, _ in decisions] == expected
    assert "touch by-human" in decisions[0][1] and "touch by-owner" in decisions[1][1]
    assert (work / "by-human").exists() is human
    assert (work / "by-owner").exists() is owner
    # each decision names the turn it was made for
    assert all(r.turn_id for r in bot.of("permission_decision"))


# -- processes -----------------------------------------------------------------------------


async def test_a_crashed_codex_is_restarted_and_leaves_nothing_behind(tmp_path: Path) -> None:
    async with bot_world(tmp_path) as bot, running(bot, CODEX) as plugin:
        driver = plugin.supervisor.driver
        first_pid = driver.pid
        assert first_pid is not None
        crashing = bot.message("ASK:crash HOLD:crash")
        await held(bot, plugin, crashing, "crash")
        # The adapter dies mid-turn, leaving codex's app-server (its child) behind: the turn
        # fails and the whole group is ended.  (Were only the app-server killed, codex-acp 2.6
        # would start a new one itself.)
        assert [p for p in group_members(first_pid) if p != first_pid]
        os.kill(first_pid, signal.SIGKILL)
        await bot.count("agent_restarted", 1)
        bot.server.release("crash")
        assert group_members(first_pid) == []
        assert driver.pid != first_pid
        assert (await answer(bot, plugin, bot.message("ASK:after"))).endswith("ANSWER:after")
    failed = bot.of("turn_failed")
    assert failed and failed[0].payload["terminalEvidence"] == "agent_exit"


async def test_buzz_demo_reports_the_agent_error_and_keeps_its_log(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE, refuse="quota-exhausted") as server:
        done = await _demo(codex_env(server, tmp_path / "home"))
    assert done.returncode == 1 and done.stdout == ""
    # the agent's own error text (codex's system error: the provider's body), at once
    assert "the turn failed: " in done.stderr
    assert "the mock refuses: quota-exhausted" in done.stderr
    kept = re.search(r"the agent log is kept at (\S+);", done.stderr)
    assert kept is not None
    Path(kept.group(1)).unlink()
    assert adapter_processes(tmp_path) == []


async def _demo(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    """``buzz demo --agent codex-acp`` as a subprocess, with the adapter's environment."""
    command = [sys.executable, "-m", "nostr_buzz", "demo", "--agent", adapter(CODEX), *flags]
    return await asyncio.to_thread(
        subprocess.run,
        command,
        env=_buzz_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _buzz_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env.update(extra)
    return env


async def test_buzz_run_stopped_leaves_no_agent_process(tmp_path: Path) -> None:
    async with bot_world(tmp_path) as bot:
        env = codex_env(bot.server, tmp_path / "home")
        (tmp_path / "work").mkdir()
        key = tmp_path / "agent.key"
        key.write_text(bot.agent.hex, encoding="utf-8")
        key.chmod(0o600)  # buzz refuses a key file others can read
        names = ", ".join(f'"{name}"' for name in env)
        (tmp_path / "buzz.toml").write_text(
            f'key_file = "agent.key"\nowner = "{bot.owner.public_key.hex}"\n'
            f'relays = ["{bot.relay.url}"]\nstate_dir = "state"\n'
            f'[agent]\ncommand = "{adapter(CODEX)}"\npass_env = [{names}]\n'
            f'cwd = "{tmp_path / "work"}"\n',
            encoding="utf-8",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "nostr_buzz", "run", "--config", str(tmp_path / "buzz.toml")],
            env=_buzz_env(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            bot.clock = int(time.time()) + 2  # a first start serves what is newer than it
            question = bot.message("ASK:run")
            started = tmp_path / "state" / "diagnostics.jsonl"
            await until(lambda: started.exists() or proc.poll() is not None, "the bot starting")
            assert proc.poll() is None, proc.communicate()[1]
            await RelayPool([bot.relay.url], timeout=3.0).publish(question)
            answered = await until_reply(bot, question)
            assert answered.endswith("ANSWER:run")
            assert adapter_processes(tmp_path)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(proc.communicate, timeout=WAIT)
        assert proc.returncode == 0, err
        assert adapter_processes(tmp_path) == []


async def test_buzz_demo_with_codex_meters_every_turn_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    # a small delay keeps turn 4 running while the demo's mid-turn message arrives
    with ModelServer(usage=USAGE, delay=1.0) as server:
        done = await _demo(codex_env(server, tmp_path / "home"), "--pass-env", "RUST_LOG")
        assert server.outbound == []
    assert done.returncode == 0, done.stderr
    turns = done.stdout.split("totals:")[1]
    # every turn metered with its tokens (codex-acp 2.6 reports them), none with a cost: the
    # totals row counts no turn as unknown (tokens known, docs/metrics.md) and sums the input
    row = [line for line in turns.splitlines() if line.startswith("20")]
    assert len(row) == 1 and row[0].split()[-1] == "0" != row[0].split()[3]
    assert int(row[0].split()[4]) > 0
    assert adapter_processes(tmp_path) == []
