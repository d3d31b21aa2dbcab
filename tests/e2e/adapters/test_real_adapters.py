"""The ACP driver against the real adapters, claude-agent-acp 0.101 and codex-acp 2.6.

Both run as subprocesses (installed by ``make agents``) against the local model server of
``model_server.py``; nothing leaves the machine (the server is also their proxy and records
any attempt).  These tests pin what the real wire does where the ACP schema suggests
otherwise (docs/acp-adapters.md): usage meanings, cancel survival, where errors are reported,
permission requests, and launchers that leave their native child behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.acp.types import PermissionRequest, TurnResult
from nostr_buzz.errors import AgentError
from nostr_buzz.io.agent_driver import AgentDriver
from nostr_buzz.io.agent_group import group_members
from tests.support.model_server import ModelServer, Usage
from tests.support.real_adapters import (
    CLAUDE,
    CODEX,
    GEMINI,
    adapter_driver,
)

WAIT = 30.0
USAGE = Usage(input_tokens=100, output_tokens=20, cache_read=30, cache_write=40)


@asynccontextmanager
async def _agent(
    name: str,
    server: ModelServer,
    tmp_path: Path,
    **kwargs: Any,
) -> AsyncIterator[tuple[AgentDriver, list[tuple[str, str | None, dict[str, Any]]]]]:
    diagnostics: list[tuple[str, str | None, dict[str, Any]]] = []
    # A turn the adapter never ends fails after a minute of silence, not the default ten.
    kwargs.setdefault("idle_timeout", 2 * WAIT)
    on_diagnostic = lambda kind, sid, payload: diagnostics.append((kind, sid, payload))  # noqa: E731
    started, pgid = False, None
    try:
        async with adapter_driver(
            name, server, tmp_path, request_timeout=WAIT, on_diagnostic=on_diagnostic, **kwargs
        ) as driver:
            started, pgid = True, driver.pid
            yield driver, diagnostics
    finally:
        if started:  # closed: nothing of its process group is left
            assert pgid is not None and group_members(pgid) == []
    assert server.outbound == []


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.02)


async def _held_then_cancelled(driver: AgentDriver, server: ModelServer, sid: str) -> TurnResult:
    """A turn the model holds until the driver has cancelled it."""
    turn = asyncio.create_task(driver.run_turn(sid, ["ASK:held HOLD:h1"]))
    await _until(lambda: server.holding("h1"))
    await driver.cancel(sid)
    result = await turn
    server.release("h1")
    return result


# -- claude-agent-acp ----------------------------------------------------------------------


async def test_claude_answers_with_folded_usage_cost_and_context(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE) as server:
        async with _agent(CLAUDE, server, tmp_path) as (driver, _):
            assert driver.profile.name == "claude" and not driver.profile.survives_cancel
            assert driver.info.steering_supported and driver.info.system_prompt_capability
            start = await driver.new_session(str(tmp_path / "work"), "<base>Be brief.</base>")
            assert start.strategy == "system_prompt"
            result = await driver.run_turn(start.session_id, ["Hello ASK:one"])
            second = await driver.run_turn(start.session_id, ["ASK:two"])
    assert (result.outcome, result.stop_reason, result.reply) == (
        "success",
        "end_turn",
        "ANSWER:one",
    )
    assert result.usage is not None and second.usage is not None
    counts = result.usage.turn
    # inputTokens excludes the cache, the metric's input includes it.
    assert (counts.input_tokens, counts.output_tokens) == (170, 20)
    assert (counts.cache_read_tokens, counts.cache_write_tokens) == (30, 40)
    assert counts.total_tokens == 190
    # The cost comes only from usage_update and is cumulative: each turn gets its own share.
    assert counts.cost_usd is not None and counts.cost_usd > 0
    # (Claude Code's side calls, such as the title, land in whichever turn's total they reach)
    assert second.usage.turn.cost_usd is not None and second.usage.turn.cost_usd > 0
    assert second.usage.turn_seq == 2 and second.reply == "ANSWER:two"
    # context occupancy: the last model call's input, cache and output as the adapter saw it
    assert result.context_used is not None and result.context_used > 170
    assert result.context_size == 1_000_000
    # The standing context reached the model's system prompt.
    assert server.main_requests()


async def test_claude_session_is_retired_after_a_cancel(tmp_path: Path) -> None:
    approved: list[PermissionRequest] = []

    def policy(request: PermissionRequest) -> bool:
        approved.append(request)
        return True

    with ModelServer(usage=USAGE) as server:
        async with _agent(CLAUDE, server, tmp_path, permission=policy) as (driver, diags):
            first = await driver.new_session(str(tmp_path / "work"))
            cancelled = await _held_then_cancelled(driver, server, first.session_id)
            assert (cancelled.outcome, cancelled.stop_reason) == ("cancelled", "cancelled")
            assert not driver.usable(first.session_id)
            with pytest.raises(AgentError, match="retired after a cancelled or failed turn"):
                await driver.run_turn(first.session_id, ["ASK:never"])
            fresh = await driver.new_session(str(tmp_path / "work"))
            answers = [
                await driver.run_turn(fresh.session_id, [f"ASK:{q}"])
                for q in ("two", "three", "four")
            ]
    assert [(r.outcome, r.reply) for r in answers] == [
        ("success", "ANSWER:two"),
        ("success", "ANSWER:three"),
        ("success", "ANSWER:four"),
    ]
    assert all(r.usage is not None and r.usage.turn.output_tokens == 20 for r in answers)
    assert ("session_retired", first.session_id, {}) in diags
    assert approved == []


async def test_claude_0101_survives_a_cancel(tmp_path: Path) -> None:
    """0.23 answered every prompt after a cancel with the previous one's answer; 0.101 answers
    each with its own.  The driver still retires claude's sessions after a cancel (a fresh
    session costs only the standing context again)."""
    with ModelServer(usage=USAGE) as server:
        async with _agent(CLAUDE, server, tmp_path) as (driver, _):
            # Pretend the agent survives cancels, to meet its session on the wire again.
            driver.profile = dataclasses.replace(driver.profile, survives_cancel=True)
            start = await driver.new_session(str(tmp_path / "work"))
            await _held_then_cancelled(driver, server, start.session_id)
            assert driver.usable(start.session_id)
            answers = [
                await driver.run_turn(start.session_id, [f"ASK:{q}"]) for q in ("two", "three")
            ]
    assert [(r.outcome, r.reply) for r in answers] == [
        ("success", "ANSWER:two"),
        ("success", "ANSWER:three"),
    ]
    assert all(r.usage is not None and r.usage.turn.output_tokens == 20 for r in answers)


async def _shell_under_policy(
    name: str, tmp_path: Path, approve: bool
) -> tuple[list[PermissionRequest], TurnResult, list[str], Path]:
    """One turn whose model asks to run ``touch <marker>``, under a policy that approves or
    rejects: (requests the policy saw, the result, the decisions reported, the marker)."""
    marker = tmp_path / "work" / ("approved" if approve else "rejected")
    seen: list[PermissionRequest] = []

    def policy(request: PermissionRequest) -> bool:
        seen.append(request)
        return approve

    with ModelServer(usage=USAGE) as server:
        async with _agent(name, server, tmp_path, permission=policy) as (driver, diags):
            start = await driver.new_session(str(tmp_path / "work"))
            result = await driver.run_turn(
                start.session_id, [f"Please SHELL:touch {marker.name};; ASK:tool"]
            )
    decisions = [p["decision"] for k, sid, p in diags if k == "permission_decision"]
    assert all(sid == start.session_id for k, sid, _ in diags if k == "permission_decision")
    return seen, result, decisions, marker


@pytest.mark.parametrize("approve", [False, True])
async def test_claude_shell_tool_follows_the_permission_policy(
    tmp_path: Path, approve: bool
) -> None:
    seen, result, decisions, marker = await _shell_under_policy(CLAUDE, tmp_path, approve)
    assert [(r.title, r.turn_running) for r in seen] == [(f"touch {marker.name}", True)]
    assert marker.exists() is approve
    assert decisions == ["approved" if approve else "rejected"]
    assert result.outcome == "success"
    if approve:
        # Text separated by a tool call becomes two paragraphs.
        assert result.reply == "Let me run that.\n\nTOOL-DONE ANSWER:tool"


async def test_claude_error_text_reaches_the_turn_result(tmp_path: Path) -> None:
    """Claude Code retries a refused model call a few times on its own, then the prompt fails
    with −32603 and the provider's text in ``message``."""
    with ModelServer(usage=USAGE, refuse="the-mock-says-no") as server:
        async with _agent(CLAUDE, server, tmp_path) as (driver, _):
            start = await driver.new_session(str(tmp_path / "work"))
            failed = await driver.run_turn(start.session_id, ["ASK:x"])
            assert not driver.usable(start.session_id)
    assert (failed.outcome, failed.stop_reason, failed.terminal_evidence) == (
        "failed",
        "error",
        "error",
    )
    assert failed.error is not None and "-32603" in failed.error
    assert "API Error: 400 the mock refuses: the-mock-says-no" in failed.error
    assert len(server.main_requests()) > 1


async def test_codex_error_is_a_system_error_not_an_answer(tmp_path: Path) -> None:
    """codex-acp 2.6 ends a turn whose model call failed with ``end_turn`` and the provider's
    body as the agent's text, after a ``session_info_update`` whose
    ``_meta.codex.threadStatus.type`` is ``systemError``: the driver fails that turn."""
    with ModelServer(usage=USAGE) as server:
        async with _agent(CODEX, server, tmp_path) as (driver, _):
            start = await driver.new_session(str(tmp_path / "work"))
            failed = await driver.run_turn(start.session_id, ["FAIL:the-mock-says-no ASK:x"])
            # every session is retired after a failed turn
            assert not driver.usable(start.session_id)
            with pytest.raises(AgentError):
                await driver.run_turn(start.session_id, ["ASK:late"])
            start = await driver.new_session(str(tmp_path / "work"))
            after = [await driver.run_turn(start.session_id, [f"ASK:{q}"]) for q in "ab"]
    assert (failed.outcome, failed.stop_reason, failed.native_stop_reason) == (
        "failed",
        "error",
        "end_turn",
    )
    assert failed.error is not None and "the mock refuses: the-mock-says-no" in failed.error
    assert [(r.outcome, r.reply) for r in after] == [
        ("success", "ANSWER:a"),
        ("success", "ANSWER:b"),
    ]


# -- codex-acp -----------------------------------------------------------------------------


async def test_codex_answers_with_usage_and_context_figures(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE) as server:
        async with _agent(CODEX, server, tmp_path) as (driver, _):
            assert driver.profile.survives_cancel and driver.info.steering_supported
            start = await driver.new_session(str(tmp_path / "work"), "<base>Be brief.</base>")
            result = await driver.run_turn(start.session_id, ["Hello ASK:one"])
    assert (result.outcome, result.stop_reason, result.reply) == (
        "success",
        "end_turn",
        "ANSWER:one",
    )
    # 2.6 reports usage per prompt: inputTokens without the cached part, cachedReadTokens
    assert result.usage is not None
    counts = result.usage.turn
    assert (counts.input_tokens, counts.cache_read_tokens, counts.output_tokens) == (130, 30, 20)
    assert counts.total_tokens == 150 and counts.cost_usd is None
    assert result.context_used is not None and result.context_used > 0
    assert result.context_size is not None and result.context_size >= result.context_used
    # the standing context travels in session/new's systemPrompt, not the first prompt
    assert start.strategy == "system_prompt"
    assert "<workspace>" not in server.main_requests()[0].user_text


async def test_codex_survives_a_cancel(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE) as server:
        async with _agent(CODEX, server, tmp_path) as (driver, _):
            start = await driver.new_session(str(tmp_path / "work"))
            cancelled = await _held_then_cancelled(driver, server, start.session_id)
            assert cancelled.outcome == "cancelled"
            assert driver.usable(start.session_id)
            answers = [
                await driver.run_turn(start.session_id, [f"ASK:{q}"]) for q in ("two", "three")
            ]
    assert [(r.outcome, r.reply.rsplit("ANSWER:", 1)[-1]) for r in answers] == [
        ("success", "two"),
        ("success", "three"),
    ]


@pytest.mark.parametrize("approve", [False, True])
async def test_codex_shell_tool_follows_the_permission_policy(
    tmp_path: Path, approve: bool
) -> None:
    seen, result, decisions, marker = await _shell_under_policy(CODEX, tmp_path, approve)
    assert [r.turn_running for r in seen] == [True] and marker.name in seen[0].title
    assert marker.exists() is approve
    assert decisions == ["approved" if approve else "rejected"]
    # codex offers no "deny and go on" for a command: its only rejection aborts the turn
    assert result.outcome == ("success" if approve else "cancelled")


async def test_codex_close_ends_the_native_binary_too(tmp_path: Path) -> None:
    with ModelServer(usage=USAGE) as server:
        async with _agent(CODEX, server, tmp_path) as (driver, _):
            start = await driver.new_session(str(tmp_path / "work"))
            await driver.run_turn(start.session_id, ["ASK:one"])
            pgid = driver.pid
            assert pgid is not None
            members = group_members(pgid)
            # the npm launcher and the native binary it started
            assert len(members) >= 2
            await driver.restart()
            assert group_members(pgid) == []
            assert driver.pid is not None and group_members(driver.pid)


# -- gemini-cli ----------------------------------------------------------------------------


async def test_gemini_error_carries_the_http_status_and_survives_a_cancel(tmp_path: Path) -> None:
    """gemini-cli fails a prompt whose model call failed with the HTTP status as the JSON-RPC
    code and the provider's body as the message; a cancelled session answers on."""
    with ModelServer(usage=USAGE) as server:
        async with _agent(GEMINI, server, tmp_path) as (driver, _):
            assert driver.profile.survives_cancel and not driver.info.steering_supported
            start = await driver.new_session(str(tmp_path / "work"))
            assert start.strategy == "legacy"
            failed = await driver.run_turn(start.session_id, ["FAIL:the-mock-says-no ASK:x"])
            start = await driver.new_session(str(tmp_path / "work"))
            cancelled = await _held_then_cancelled(driver, server, start.session_id)
            assert driver.usable(start.session_id)
            after = [await driver.run_turn(start.session_id, [f"ASK:{q}"]) for q in "ab"]
    assert (failed.outcome, failed.terminal_evidence) == ("failed", "error")
    assert failed.error is not None and failed.error.startswith("JSON-RPC error 400:")
    assert "the mock refuses: the-mock-says-no" in failed.error
    assert cancelled.outcome == "cancelled"
    assert [(r.outcome, r.reply) for r in after] == [
        ("success", "ANSWER:a"),
        ("success", "ANSWER:b"),
    ]
