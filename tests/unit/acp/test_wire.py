"""ACP frames ↔ typed values, and the permission answer (no process: the frames are dicts)."""

from __future__ import annotations

from typing import Any

import pytest
from acp.exceptions import RequestError

from nostr_buzz.acp import permission, wire
from nostr_buzz.acp.facts import (
    Cost,
    CumulativeUsage,
    ModelFailed,
    Occupancy,
    PromptAnswered,
    PromptUsage,
    RunId,
    Text,
    ToolCall,
    Update,
)
from nostr_buzz.acp.profiles import CLAUDE, CODEX, GENERIC, GOOSE, choose_strategy, profile_for
from nostr_buzz.acp.types import AgentInfo, PermissionRequest
from nostr_buzz.core.permission import PermissionDecision


def info(**changes: Any) -> AgentInfo:
    base: dict[str, Any] = {
        "protocol_version": 1,
        "name": "x",
        "version": None,
        "capabilities": {},
        "steering_supported": False,
        "system_prompt_append": False,
        "pid": 1,
    }
    return AgentInfo(**{**base, **changes})


def update(session_update: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": "s", "update": {"sessionUpdate": session_update, **fields}}


def test_initialize_result_becomes_agent_info() -> None:
    raw = {
        "protocolVersion": 1,
        "agentCapabilities": {"sessionCapabilities": {"systemPrompt": {}, "close": {}}},
        "agentInfo": {"name": "claude-agent-acp", "version": "0.23.1"},
        "_meta": {"steering": {"supported": True}, "systemPrompt": {"append": "yes"}},
    }
    got = wire.agent_info(raw, 42)
    assert (got.name, got.version, got.pid) == ("claude-agent-acp", "0.23.1", 42)
    assert got.steering_supported and got.system_prompt_capability and got.session_close
    assert not got.system_prompt_append  # only ``true`` counts
    assert profile_for(got.name) is CLAUDE


@pytest.mark.parametrize(
    ("name", "changes", "strategy", "field"),
    [
        ("goose", {}, "goose", None),
        ("claude-agent-acp", {}, "claude_meta", {"_meta": {"systemPrompt": {"append": "S"}}}),
        (
            "demo",
            {"system_prompt_append": True},
            "claude_meta",
            {"_meta": {"systemPrompt": {"append": "S"}}},
        ),
        (
            "claude-agent-acp",
            {"system_prompt_capability": True},
            "system_prompt",
            {"systemPrompt": {"mode": "append", "content": [{"type": "text", "text": "S"}]}},
        ),
        ("next", {"protocol_version": 2}, "system_prompt", {"systemPrompt": "S"}),
        ("codex-acp", {}, "legacy", None),
    ],
)
def test_the_standing_strategy_and_its_field(
    name: str, changes: dict[str, Any], strategy: str, field: dict[str, Any] | None
) -> None:
    agent = info(name=name, **changes)
    chosen = choose_strategy(profile_for(name), agent)
    assert chosen == strategy
    params = wire.new_session_params("/w", "S", chosen, agent)
    assert params == {"cwd": "/w", "mcpServers": [], **(field or {})}
    assert wire.new_session_params("/w", "", chosen, agent) == {"cwd": "/w", "mcpServers": []}


def test_profiles_by_name() -> None:
    assert profile_for("goose") is GOOSE and profile_for("Goose-CLI") is GENERIC
    assert profile_for("codex-acp") is CODEX and profile_for(None) is GENERIC


def test_session_updates_become_facts() -> None:
    chunk = update("agent_message_chunk", content={"type": "text", "text": "hi"}, messageId="m1")
    assert wire.session_update_facts(chunk) == (Update("agent_message_chunk"), Text("hi", "m1"))
    thought = update("agent_thought_chunk", content={"type": "text", "text": "hmm"})
    assert wire.session_update_facts(thought) == (Update("agent_thought_chunk"),)
    tool = update("tool_call", toolCallId="c1", title="ls", kind="execute", status="pending")
    started = ToolCall("c1", kind="execute", title="ls", status="pending", started=True)
    assert wire.session_update_facts(tool) == (Update("tool_call"), started)
    done = update("tool_call_update", toolCallId="c1", status="completed")
    assert wire.session_update_facts(done) == (
        Update("tool_call_update"),
        ToolCall("c1", status="completed"),
    )
    long = update("tool_call", toolCallId="c2", title="é" * 1000)
    [_, cut] = wire.session_update_facts(long)
    assert isinstance(cut, ToolCall) and cut.title is not None
    assert len(cut.title.encode()) <= wire.MAX_TOOL_TITLE_BYTES
    usd = update("usage_update", used=10, size=100, cost={"amount": 0.5, "currency": "usd"})
    assert wire.session_update_facts(usd) == (Update("usage_update"), Cost(0.5), Occupancy(10, 100))
    eur = update("usage_update", used=1, size=2, cost={"amount": 0.5, "currency": "EUR"})
    assert wire.session_update_facts(eur) == (Update("usage_update"), Occupancy(1, 2))
    run = update("session_info_update", _meta={"goose": {"activeRunId": "r1"}})
    assert wire.session_update_facts(run) == (Update("session_info_update"), RunId("r1"))
    assert wire.session_update_facts(update("no_such_kind")) == (Update(None),)
    assert wire.session_of({"sessionId": 3}) is None


def test_goose_counters_and_prompt_responses() -> None:
    counters = {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "usage_update",
            "accumulatedInputTokens": 9,
            "accumulatedCost": 0.1,
        },
    }
    assert wire.goose_update_facts(counters) == (CumulativeUsage(input_tokens=9, cost_usd=0.1),)
    assert wire.goose_update_facts({"update": {"sessionUpdate": "other"}}) == ()
    raw = {
        "stopReason": "end_turn",
        "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7},
    }
    assert wire.prompt_response(raw) == (
        PromptAnswered("end_turn"),
        PromptUsage(5, 2, 7, None, None),
    )
    assert wire.prompt_response({"stopReason": "end_turn", "usage": {"inputTokens": "many"}}) == (
        PromptAnswered("end_turn"),
        None,  # malformed usage is not observed
    )
    assert wire.prompt_response([]) == (PromptAnswered(None), None)
    assert [wire.stop_reason(n) for n in ("end_turn", "max_turn_requests", "cancelled")] == [
        "end_turn",
        "unknown",
        "cancelled",
    ]


def test_steer_frames_and_answers() -> None:
    assert wire.steer_params("s", "t", "r1") == {
        "sessionId": "s",
        "prompt": [{"type": "text", "text": "t"}],
        "expectedRunId": "r1",
    }
    assert wire.steer_answer({"outcome": "injected"}, any_success=False) == "injected"
    assert wire.steer_answer({"outcome": "startedNewTurn"}, any_success=False) == "started_new_turn"
    assert wire.steer_answer({"outcome": "queued"}, any_success=False) == "failed"
    assert wire.steer_answer(None, any_success=True) == "injected"  # goose answers nothing
    assert wire.steer_error(-32601) == "failed" and wire.steer_error(-32603) == "released"


def test_errors_are_described_with_the_agents_detail() -> None:
    codex = RequestError(-32603, "Internal error", {"message": "upstream 500"})
    assert wire.describe(codex) == "JSON-RPC error -32603: Internal error: upstream 500"
    assert wire.describe(TimeoutError()) == "no answer in time"
    assert wire.describe(ConnectionError("closed")) == "ConnectionError: closed"


OPTIONS = [
    {"optionId": "always", "kind": "allow_always"},
    {"optionId": "yes", "kind": "allow_once"},
    {"optionId": "no", "kind": "reject_once"},
]


def ask(options: list[Any] = OPTIONS) -> dict[str, Any]:
    tool = {"toolCallId": "c", "title": "rm -rf /", "kind": "execute"}
    return {"sessionId": "s", "toolCall": tool, "options": options}


def test_permission_is_asked_only_while_the_turn_runs() -> None:
    seen: list[PermissionRequest] = []

    def policy(request: PermissionRequest) -> bool:
        seen.append(request)
        return True

    late = permission.answer(ask(), running=False, policy=policy)
    assert seen == [] and late.result == {"outcome": {"outcome": "selected", "optionId": "no"}}
    assert late.payload == {
        "decision": "rejected",
        "title": "rm -rf /",
        "toolKind": "execute",
        "turnRunning": False,
        "reason": "no_live_turn",
    }
    live = permission.answer(ask(), running=True, policy=policy)
    assert seen == [PermissionRequest("s", "rm -rf /", "execute", "c", True)]
    assert live.result == {"outcome": {"outcome": "selected", "optionId": "yes"}}
    assert live.payload["decision"] == "approved" and live.payload["reason"] == "policy"


def test_a_broken_policy_or_a_missing_option_never_approves() -> None:
    def broken(request: PermissionRequest) -> bool:
        raise ValueError("bug")

    failed = permission.answer(ask(), running=True, policy=broken)
    assert (
        failed.payload["reason"] == "policy_failed" and failed.policy_error == "ValueError('bug')"
    )
    assert failed.result["outcome"]["optionId"] == "no"
    only_reject = permission.answer(ask(OPTIONS[2:]), running=True, policy=lambda r: True)
    assert only_reject.result == {"outcome": {"outcome": "cancelled"}}
    assert only_reject.payload["reason"] == "no_allow_option"
    nothing = permission.answer(ask([]), running=True, policy=lambda r: False)
    assert nothing.result == {"outcome": {"outcome": "cancelled"}}
    decided = permission.answer(
        ask(), running=True, policy=lambda r: PermissionDecision(False, "not_owner", "batch", "ab")
    )
    assert decided.payload["reason"] == "not_owner" and decided.payload["decision"] == "rejected"


def test_the_asking_mode_and_the_adapters_own_usage_and_error_reports() -> None:
    modes = {"currentModeId": "auto", "availableModes": [{"id": "auto"}, {"id": "read-only"}]}
    assert wire.asking_mode({"sessionId": "s", "modes": modes}) == (
        "read-only",
        ["auto", "read-only"],
        True,
    )
    modes = {"currentModeId": "default", "availableModes": [{"id": "default"}]}
    assert wire.asking_mode({"modes": modes}) == ("default", ["default"], False)
    assert wire.asking_mode({"modes": {"availableModes": [{"id": "yolo"}]}}) == (
        None,
        ["yolo"],
        False,
    )
    assert wire.asking_mode({"sessionId": "s"}) is None
    gemini = {
        "stopReason": "end_turn",
        "_meta": {"quota": {"token_count": {"input_tokens": 9, "output_tokens": 3}}},
    }
    assert wire.prompt_response(gemini)[1] == PromptUsage(9, 3, 12, None, None)
    forged = {
        "stopReason": "end_turn",
        "_meta": {"quota": {"token_count": {"input_tokens": True, "output_tokens": 3}}},
    }
    assert wire.prompt_response(forged)[1] is None
    codex = update(
        "session_info_update", _meta={"codex": {"threadStatus": {"type": "systemError"}}}
    )
    assert wire.session_update_facts(codex) == (Update("session_info_update"), ModelFailed())
