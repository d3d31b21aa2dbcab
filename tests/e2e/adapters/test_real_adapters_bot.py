"""The bot end to end with the real adapters (claude-agent-acp, codex-acp) on a real relay.

The model is the local server of ``model_server.py``; the questions carry ``ASK:<word>``
markers and the model answers ``ANSWER:<word>``, so each reply can be traced to its question.
``HOLD:<name>`` keeps a turn running until the test releases it: mid-turn messages and the
owner's ``!cancel`` land while the turn is provably live, without timing guesses.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.agent_group import group_members
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, open_metric_event
from tests.support.model_server import ModelServer, Usage
from tests.support.real_adapters import (
    BIN,
    CLAUDE,
    CODEX,
    adapter,
    claude_env,
    codex_env,
)
from tests.support.relays import RunningRelay, local_relay

WAIT = 30.0
USAGE = Usage(input_tokens=100, output_tokens=20, cache_read=30, cache_write=40)


async def _until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.02)
    return value


@dataclass
class Bot:
    """A relay, keys, the model server and the diagnostics of one bot."""

    relay: RunningRelay
    server: ModelServer
    tmp: Path
    owner: SecretKey = field(default_factory=SecretKey.generate)
    agent: SecretKey = field(default_factory=SecretKey.generate)
    human: SecretKey = field(default_factory=SecretKey.generate)
    records: list[DiagnosticRecord] = field(default_factory=list)
    clock: int = field(default_factory=lambda: int(time.time()) - 100)

    def config(self, name: str, **changes: Any) -> PluginConfig:
        home, work = self.tmp / "home", self.tmp / "work"
        work.mkdir(exist_ok=True)
        env = claude_env(self.server, home) if name == CLAUDE else codex_env(self.server, home)
        values: dict[str, Any] = {
            "agent_secret": self.agent,
            "owner": self.owner.public_key,
            "read_relays": (self.relay.url,),
            "write_relays": (self.relay.url,),
            "agent_command": adapter(name),
            "agent_env": env,
            "agent_cwd": str(work),
            "state_dir": self.tmp / "state",
            "relay_timeout": 3.0,
            "coalesce_window": 0.1,
        }
        values.update(changes)
        return PluginConfig(**values)

    def of(self, kind: str) -> list[DiagnosticRecord]:
        return [r for r in self.records if r.kind == kind]

    async def count(self, kind: str, n: int) -> list[DiagnosticRecord]:
        return list(await _until(lambda: len(self.of(kind)) >= n and self.of(kind), f"{n}× {kind}"))

    def message(
        self, content: str, *, author: SecretKey | None = None, reply_to: Event | None = None
    ) -> Event:
        tags = [["h", "eng"]]
        if reply_to is not None:
            tags.append(["e", reply_to.id, "", "root"])
        tags.append(["p", self.agent.public_key.hex])
        self.clock += 1
        return sign_event(
            author or self.owner, kind=9, content=content, tags=tags, created_at=self.clock
        )

    async def replies(self) -> dict[str, str]:
        """The agent's replies on the relay: {the event answered: the text}."""
        pool = RelayPool([self.relay.url], timeout=3.0)
        found = await pool.query({"kinds": [9], "authors": [self.agent.public_key.hex]})
        answered = {}
        for reply in found.events:
            ref = nip10.thread_ref(reply)
            answered[ref.parent or ref.root or ""] = reply.content
        return answered

    async def metrics(self, count: int) -> list[MetricPayload]:
        pool = RelayPool([self.relay.url], timeout=3.0)
        flt = {"kinds": [44200], "#p": [self.owner.public_key.hex]}

        async def enough() -> list[Event]:
            deadline = time.monotonic() + WAIT
            while True:
                events = (await pool.query(flt)).events
                if len(events) >= count or time.monotonic() > deadline:
                    return events
                await asyncio.sleep(0.1)

        payloads = [open_metric_event(self.owner, e) for e in await enough()]
        return sorted(payloads, key=lambda p: p.timestamp)


@asynccontextmanager
async def _bot(tmp_path: Path, **server: Any) -> AsyncIterator[Bot]:
    async with local_relay() as relay:
        with ModelServer(usage=USAGE, **server) as model:
            bot = Bot(relay, model, tmp_path)
            yield bot
            assert model.outbound == []


@asynccontextmanager
async def _running(bot: Bot, name: str, **changes: Any) -> AsyncIterator[BuzzPlugin]:
    plugin = BuzzPlugin(bot.config(name, **changes), on_diagnostic=bot.records.append)
    async with plugin:
        pid = plugin.supervisor.driver.pid
        yield plugin
    assert pid is not None and group_members(pid) == []


async def _answer(bot: Bot, plugin: BuzzPlugin, event: Event) -> str:
    await plugin.handle_event(event)
    return await _until_reply(bot, event)


async def _held(bot: Bot, plugin: BuzzPlugin, event: Event, hold: str) -> None:
    """Queue ``event`` and wait until the model is holding its turn (the prompt is live)."""
    await plugin.handle_event(event)
    await _until(lambda: bot.server.holding(hold), f"the model holding {hold}")


async def _nudge(bot: Bot, plugin: BuzzPlugin, event: Event, hold: str) -> None:
    """A message into the held turn's thread: without a native steer the turn is cancelled
    (and merged with it); then the hold is released (the merged prompt still carries it)."""
    completed = len(bot.of("turn_completed"))
    await plugin.handle_event(event)
    [*_, ended] = await bot.count("turn_completed", completed + 1)
    assert ended.payload["outcome"] == "cancelled"
    bot.server.release(hold)


# -- claude-agent-acp ----------------------------------------------------------------------


async def test_claude_reply_metric_steer_cancel_then_three_answers(tmp_path: Path) -> None:
    async with _bot(tmp_path) as bot, _running(bot, CLAUDE) as plugin:
        first = bot.message("Hello buzz ASK:one")
        assert await _answer(bot, plugin, first) == "ANSWER:one"
        [metric] = await bot.metrics(1)
        # input folded with the cache, the cache parts, output; cost from usage_update
        assert metric.turn is not None
        assert (metric.turn.input_tokens, metric.turn.output_tokens) == (170, 20)
        assert (metric.turn.cache_read_tokens, metric.turn.cache_write_tokens) == (30, 40)
        assert metric.turn.cost_usd is not None and metric.turn.cost_usd > 0
        assert metric.context_window_tokens == 200_000 and metric.context_used_tokens

        # A message in the same thread while the turn runs: claude has no native steer, so
        # the turn is cancelled and merged with it; the merged turn answers the newest.
        busy = bot.message("ASK:two HOLD:two")
        await _held(bot, plugin, busy, "two")
        nudge = bot.message("ASK:three", reply_to=busy)
        await _nudge(bot, plugin, nudge, "two")
        assert await _until_reply(bot, nudge) == "ANSWER:three"

        # The owner's !cancel while a turn runs.
        doomed = bot.message("ASK:four HOLD:four")
        await _held(bot, plugin, doomed, "four")
        completed = len(bot.of("turn_completed"))
        await plugin.handle_event(bot.message("!cancel"))
        await bot.count("turn_completed", completed + 1)
        bot.server.release("four")

        # Three more questions: each answered with its own answer, none empty (the second
        # runs a shell command: the owner's turn, approved while it runs).
        before = len(bot.of("turn_completed"))
        assert await _answer(bot, plugin, bot.message("ASK:five")) == "ANSWER:five"
        six = await _answer(bot, plugin, bot.message("SHELL:touch six;; ASK:six"))
        assert six == "Let me run that.\n\nTOOL-DONE ANSWER:six"
        assert await _answer(bot, plugin, bot.message("ASK:seven")) == "ANSWER:seven"
        later = bot.of("turn_completed")[before:]
        # every turn that reached the agent has its metric
        metrics = await bot.metrics(len(bot.of("turn_completed")))
        assert len(metrics) == len(bot.of("turn_completed"))
    assert [r.payload["outcome"] for r in later] == ["success"] * 3
    # claude's cancelled sessions are retired; each cancel is followed by a fresh session
    assert len(bot.of("session_retired")) == 2 and len(bot.of("session_started")) == 3
    decisions = bot.of("permission_decision")
    assert [(r.payload["decision"], r.payload["turnRunning"]) for r in decisions] == [
        ("approved", True)
    ]
    assert (tmp_path / "work" / "six").exists()


@pytest.mark.parametrize("name", [CLAUDE, CODEX])
async def test_a_failed_turn_is_reported_and_retried_in_a_fresh_session(
    tmp_path: Path, name: str
) -> None:
    async with _bot(tmp_path) as bot, _running(bot, name) as plugin:
        question = bot.message("FAIL:overloaded ASK:again")
        # the model refuses once: the turn fails with the agent's error, the batch is retried
        # (every session is retired after a failed turn) and answered in a new session
        assert await _answer(bot, plugin, question) == "ANSWER:again"
        [failed] = bot.of("turn_failed")
        metrics = await bot.metrics(2)
    assert "-32603" in failed.payload["error"]
    assert "the mock refuses: overloaded" in failed.payload["error"]
    assert failed.turn_id is not None
    assert [r.payload["outcome"] for r in bot.of("turn_completed")] == ["failed", "success"]
    assert len(bot.of("session_replaced")) == 1
    assert sorted(m.outcome or "" for m in metrics) == ["failed", "success"]


# -- codex-acp -----------------------------------------------------------------------------


async def test_codex_metrics_with_unknown_counters_steer_and_cancel(tmp_path: Path) -> None:
    async with _bot(tmp_path) as bot, _running(bot, CODEX) as plugin:
        first = bot.message("Hello buzz ASK:one")
        assert (await _answer(bot, plugin, first)).endswith("ANSWER:one")

        busy = bot.message("ASK:two HOLD:two")
        await _held(bot, plugin, busy, "two")
        nudge = bot.message("ASK:three", reply_to=busy)
        await _nudge(bot, plugin, nudge, "two")
        assert (await _until_reply(bot, nudge)).endswith("ANSWER:three")

        doomed = bot.message("ASK:four HOLD:four")
        await _held(bot, plugin, doomed, "four")
        completed = len(bot.of("turn_completed"))
        await plugin.handle_event(bot.message("!cancel"))
        await bot.count("turn_completed", completed + 1)
        bot.server.release("four")
        assert (await _answer(bot, plugin, bot.message("ASK:five"))).endswith("ANSWER:five")
        turns = bot.of("turn_completed")
        metrics = await bot.metrics(len(turns))
    assert len(metrics) == len(turns) >= 4
    unknown = TokenCounts(None, None, None, None)
    assert all(m.turn == unknown for m in metrics)
    assert {m.outcome for m in metrics} >= {"success", "cancelled"}
    answered = [m for m in metrics if m.outcome == "success"]
    assert all(m.context_used_tokens and m.context_window_tokens for m in answered)


# -- permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mode", "human", "owner"),
    [
        (CLAUDE, "owner", False, True),
        (CODEX, "owner", False, True),
        (CLAUDE, "allow", True, True),
        (CLAUDE, "reject", False, False),
    ],
)
async def test_shell_tool_follows_the_permissions_setting(
    tmp_path: Path, name: str, mode: str, human: bool, owner: bool
) -> None:
    """Default ``owner``: the owner's turn whose model asks for a shell command is approved, then
    a non-owner's (gate ``allowlist``) in the same channel is refused (the command does not run).
    The owner goes first: once someone else spoke in the agent session, the owner rule rejects
    every later request of that session (docs/bot.md, "Permissions")."""
    work = tmp_path / "work"
    async with _bot(tmp_path) as bot:
        config = {
            "gate": "allowlist",
            "allowlist": frozenset({bot.human.public_key.hex}),
            "permissions": mode,
        }
        async with _running(bot, name, **config) as plugin:
            owners = bot.message("SHELL:touch by-owner;; ASK:o")
            await plugin.handle_event(owners)
            await bot.count("permission_decision", 1)
            await bot.count("turn_completed", 1)
            stranger = bot.message("SHELL:touch by-human;; ASK:h", author=bot.human)
            await plugin.handle_event(stranger)
            await bot.count("permission_decision", 2)
            await bot.count("turn_completed", 2)
    decisions = [(r.payload["decision"], r.payload["title"]) for r in bot.of("permission_decision")]
    expected = ["approved" if ok else "rejected" for ok in (owner, human)]
    assert [d for d, _ in decisions] == expected
    assert "touch by-owner" in decisions[0][1] and "touch by-human" in decisions[1][1]
    assert (work / "by-human").exists() is human
    assert (work / "by-owner").exists() is owner
    # each decision names the turn it was made for
    assert all(r.turn_id for r in bot.of("permission_decision"))


# -- processes -----------------------------------------------------------------------------


def _adapter_processes() -> list[int]:
    """Live processes started from this checkout's adapters (launchers and native binaries)."""
    mine = str(BIN.parent)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mine in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def test_a_crashed_codex_is_restarted_and_leaves_nothing_behind(tmp_path: Path) -> None:
    async with _bot(tmp_path) as bot, _running(bot, CODEX) as plugin:
        driver = plugin.supervisor.driver
        first_pid = driver.pid
        assert first_pid is not None
        held = bot.message("ASK:crash HOLD:crash")
        await _held(bot, plugin, held, "crash")
        # The native binary dies mid-turn: the launcher exits after it, the turn fails.
        native = [p for p in group_members(first_pid) if p != first_pid]
        assert native
        for pid in native:
            os.kill(pid, signal.SIGKILL)
        await bot.count("agent_restarted", 1)
        bot.server.release("crash")
        assert group_members(first_pid) == []
        assert driver.pid != first_pid
        assert (await _answer(bot, plugin, bot.message("ASK:after"))).endswith("ANSWER:after")
    failed = bot.of("turn_failed")
    assert failed and failed[0].payload["terminalEvidence"] == "agent_exit"


async def test_buzz_demo_reports_the_agent_error_and_keeps_its_log(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE, refuse="quota-exhausted") as server:
        done = await _demo(codex_env(server, tmp_path / "home"))
    assert done.returncode == 1 and done.stdout == ""
    # the agent's own error text (−32603, the provider's message in data), at once
    assert "the turn failed: JSON-RPC error -32603" in done.stderr
    assert "the mock refuses: quota-exhausted" in done.stderr
    kept = re.search(r"the agent log is kept at (\S+);", done.stderr)
    assert kept is not None
    Path(kept.group(1)).unlink()
    assert _adapter_processes() == []


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
    async with _bot(tmp_path) as bot:
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
            await _until(lambda: started.exists() or proc.poll() is not None, "the bot starting")
            assert proc.poll() is None, proc.communicate()[1]
            await RelayPool([bot.relay.url], timeout=3.0).publish(question)
            answered = await _until_reply(bot, question)
            assert answered.endswith("ANSWER:run")
            assert _adapter_processes()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(proc.communicate, timeout=WAIT)
        assert proc.returncode == 0, err
        assert _adapter_processes() == []


async def _until_reply(bot: Bot, question: Event) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answered = await bot.replies()
        if question.id in answered:
            return answered[question.id]
        await asyncio.sleep(0.05)
    seen = [(r.kind, r.payload) for r in bot.records]
    raise AssertionError(f"no reply to {question.content!r}; replies: {answered}; {seen}")


async def test_buzz_demo_with_codex_meters_every_turn_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    # a small delay keeps turn 4 running while the demo's mid-turn message arrives
    with ModelServer(usage=USAGE, delay=1.0) as server:
        done = await _demo(codex_env(server, tmp_path / "home"), "--pass-env", "RUST_LOG")
        assert server.outbound == []
    assert done.returncode == 0, done.stderr
    turns = done.stdout.split("totals:")[1]
    # every turn metered, all of unknown usage: the totals row counts them as unknown
    row = [line for line in turns.splitlines() if line.startswith("20")]
    assert len(row) == 1 and row[0].split()[-1] == row[0].split()[3] != "0"
    assert _adapter_processes() == []
