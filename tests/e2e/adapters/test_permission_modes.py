"""The driver puts every session in the agent's mode that asks the client before a tool runs
(docs/acp-adapters.md, "Permission modes"), and opens no session where it cannot.

The agent is the scripted one, playing an adapter whose default mode decides on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.errors import AgentError
from tests.support.scripted_agent import Scripted


def _modes(current: str, *ids: str) -> dict[str, Any]:
    return {"currentModeId": current, "availableModes": [{"id": i, "name": i} for i in ids]}


async def _session(tmp_path: Path, config: dict[str, Any]) -> tuple[Scripted, list[Any]]:
    agent = Scripted(tmp_path, config)
    diagnostics: list[Any] = []
    driver = agent.driver(on_diagnostic=lambda *d: diagnostics.append(d), request_timeout=10)
    async with driver:
        await driver.new_session(str(tmp_path))
    return agent, diagnostics


async def test_a_session_in_auto_mode_is_switched_to_the_asking_mode(tmp_path: Path) -> None:
    modes = _modes("auto", "default", "acceptEdits", "auto")
    config = {"modes": modes, "ok_methods": ["session/set_mode"]}
    agent, diagnostics = await _session(tmp_path, config)
    [set_mode] = agent.requests("session/set_mode")
    assert set_mode["params"] == {"sessionId": "sess-1", "modeId": "default"}
    [started] = [p for kind, _, p in diagnostics if kind == "session_started"]
    assert started["permissionMode"] == "default"


async def test_codex_like_modes_get_read_only(tmp_path: Path) -> None:
    modes = _modes("agent", "read-only", "workspace-write", "agent", "agent-full-access")
    agent, _ = await _session(tmp_path, {"modes": modes, "ok_methods": ["session/set_mode"]})
    assert [r["params"]["modeId"] for r in agent.requests("session/set_mode")] == ["read-only"]


async def test_no_asking_mode_means_no_session(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="no mode that asks before running tools"):
        await _session(tmp_path, {"modes": _modes("yolo", "yolo", "auto")})


async def test_a_refused_mode_means_no_session(tmp_path: Path) -> None:
    # the agent answers session/set_mode with −32601: its own default would decide
    with pytest.raises(AgentError, match="refused the session mode 'default'"):
        await _session(tmp_path, {"modes": _modes("auto", "default", "auto")})


async def test_an_agent_without_modes_is_left_alone(tmp_path: Path) -> None:
    agent, diagnostics = await _session(tmp_path, {})
    assert agent.requests("session/set_mode") == []
    [started] = [p for kind, _, p in diagnostics if kind == "session_started"]
    assert "permissionMode" not in started
