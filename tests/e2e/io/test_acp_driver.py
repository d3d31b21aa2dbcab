"""The ACP driver against real agent subprocesses (the bundled demo agent over stdio)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nostr_buzz.acp.types import SessionStart, TurnResult
from nostr_buzz.core.compiler import compile_steer, compile_turn
from nostr_buzz.core.ledger import TurnLedger
from nostr_buzz.core.turn_input import ChannelInfo, Standing, TurnEvent, TurnInput
from nostr_buzz.errors import AgentError
from nostr_buzz.event import Event
from nostr_buzz.io.acp_driver import standing_text
from nostr_buzz.io.agent_driver import AgentDriver
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.keys import SecretKey
from tests.support.events import chat
from tests.support.scripted_agent import USAGE, Scripted, chunk, usage_update
from tests.support.waits import wait_for

WAIT = 15.0
STANDING = Standing(base="Be brief.", persona="You are the demo agent.")
T0 = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)


def _clock() -> Callable[[], datetime]:
    ticks = iter(range(10_000))
    return lambda: T0 + timedelta(seconds=next(ticks))


def _event(content: str, created_at: int = 1_800_000_000) -> Event:
    return chat(SecretKey.generate(), created_at, content=content, channel="general")


def _turn_input(session: SessionStart, *contents: str, first: bool = True) -> TurnInput:
    events = [_event(c, 1_800_000_000 + i) for i, c in enumerate(contents)]
    return TurnInput(
        events=tuple(TurnEvent(e) for e in events),
        channel=ChannelInfo(name="general", id="general"),
        standing=STANDING,
        system_prompt_support=session.system_prompt_support,
        standing_context_sent=session.standing_context_sent or not first,
    )


@asynccontextmanager
async def _driver(tmp_path: Path, *flags: str, **kwargs: Any) -> AsyncIterator[AgentDriver]:
    driver = AgentDriver(
        sys.executable,
        ["-m", "nostr_buzz.demo.agent", *flags],
        cwd=str(tmp_path),
        log_path=tmp_path / "agent.log",
        clock=_clock(),
        **kwargs,
    )
    await driver.start()
    process = driver.agent.process
    try:
        yield driver
    finally:
        await driver.close()
        assert process is not None and process.returncode is not None


async def _session(driver: AgentDriver, tmp_path: Path) -> SessionStart:
    standing = standing_text(_with_workspace(STANDING, str(tmp_path)))
    return await driver.new_session(str(tmp_path), standing)


def _with_workspace(standing: Standing, cwd: str) -> Standing:
    return msgspec.structs.replace(standing, workspace=cwd)


def _started() -> tuple[asyncio.Event, Callable[[str], None]]:
    """An event set once the agent reports progress on the turn (its first update)."""
    seen = asyncio.Event()
    return seen, lambda kind: seen.set()


async def _wait(event: asyncio.Event) -> None:
    async with asyncio.timeout(WAIT):
        await event.wait()


async def test_turn_with_usage_both_ways_is_reliable_from_the_first_turn(tmp_path: Path) -> None:
    async with _driver(tmp_path) as driver:
        assert driver.info.name == "buzz-demo-agent" and driver.info.protocol_version == 1
        assert driver.info.steering_supported and driver.info.system_prompt_append
        session = await _session(driver, tmp_path)
        assert session.strategy == "claude_meta" and session.system_prompt_support
        first = compile_turn(_turn_input(session, "hello agent\nsecond line"))
        assert not first.sections[0].startswith("<base>")  # delivered by the system role
        result = await driver.run_turn(session.session_id, first.sections)
        second = await driver.run_turn(
            session.session_id, compile_turn(_turn_input(session, "again", first=False)).sections
        )
    assert (result.stop_reason, result.outcome, result.terminal_evidence) == (
        "end_turn",
        "success",
        "prompt_response",
    )
    assert result.native_stop_reason == "end_turn"
    assert result.adapter_session_id == session.session_id
    assert result.started_at < result.ended_at and result.started_at.tzinfo is UTC
    assert "standing context: yes" in result.reply
    assert "instruction: hello agent" in result.reply and result.final_message == result.reply
    size = sum(len(s.encode()) for s in first.sections)
    reply_tokens = (len(result.reply.encode()) + 3) // 4
    usage = result.usage
    assert usage is not None
    assert usage.delta_reliable and usage.turn_seq == 1 and usage.cumulative is None
    assert usage.turn.input_tokens == (size + 3) // 4
    assert usage.turn.output_tokens == reply_tokens
    assert usage.turn.total_tokens == usage.turn.input_tokens + reply_tokens
    expected_cost = round((usage.turn.input_tokens * 3 + reply_tokens * 15) / 1e6, 9)
    assert usage.turn.cost_usd == pytest.approx(expected_cost)  # delta from a zero baseline
    assert second.usage is not None and second.usage.turn_seq == 2
    out2 = (len(second.reply.encode()) + 3) // 4
    in2 = second.usage.turn.input_tokens
    assert in2 is not None and second.usage.turn.output_tokens == out2
    # The per-turn cost is the delta of the agent's cumulative cost, not the running total.
    assert second.usage.turn.cost_usd == pytest.approx((in2 * 3 + out2 * 15) / 1e6, abs=1e-9)


async def test_legacy_agent_gets_the_standing_sections_in_its_first_turn(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--legacy", "--no-steering") as driver:
        session = await _session(driver, tmp_path)
        assert session.strategy == "legacy"
        assert not session.system_prompt_support and not session.standing_context_sent
        first = compile_turn(_turn_input(session, "hi"))
        assert first.sections[0] == "<base>\nBe brief.\n</base>"
        result = await driver.run_turn(session.session_id, first.sections)
    assert "standing context: yes" in result.reply


async def test_goose_strategy_steer_and_cumulative_counters(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--goose", "--delay", "20") as driver:
        assert driver.profile.name == "goose"
        session = await _session(driver, tmp_path)
        assert session.strategy == "goose"
        seen, on_update = _started()
        compiled = compile_turn(_turn_input(session, "goose job"))
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, compiled.sections, on_update=on_update)
        )
        await _wait(seen)
        assert driver.can_steer(session.session_id)
        steer = compile_steer(_event("goose steer"), channel_id="general")
        assert await driver.steer(session.session_id, steer.text) == "injected"
        async with asyncio.timeout(WAIT):  # the 20 s turn wraps up at once
            result = await turn
        assert not driver.can_steer(session.session_id)  # the run id ended with the turn
        # Steering the idle goose session: no run id, no native route, no probe.
        assert await driver.steer(session.session_id, steer.text) == "failed"
    assert result.run_id is not None and result.run_id.startswith("run-")
    assert "standing context: yes" in result.reply and "steer: goose steer" in result.reply
    usage = result.usage
    assert usage is not None and usage.delta_reliable and usage.cumulative is not None
    assert usage.cumulative.input_tokens == usage.turn.input_tokens  # from a zero baseline
    assert usage.turn.cost_usd is not None and usage.turn.cost_usd > 0
    log = (tmp_path / "agent.log").read_text()
    assert log.count("_goose/unstable/session/steer") == 1
    assert "_session/steering" not in log


async def test_goose_without_system_prompt_method_falls_back_to_legacy(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--goose", "--legacy") as driver:
        session = await _session(driver, tmp_path)
        result = await driver.run_turn(
            session.session_id, compile_turn(_turn_input(session, "hi")).sections
        )
    assert session.strategy == "legacy"
    assert "standing context: yes" in result.reply  # prepended to the first turn instead
    assert "_goose/unstable/session/system-prompt/set" in (tmp_path / "agent.log").read_text()


async def test_decreasing_cumulative_counters_make_the_turn_unreliable(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--goose", "--decreasing") as driver:
        session = await _session(driver, tmp_path)
        first = await driver.run_turn(session.session_id, ["<buzz-turn>", "a" * 400])
        second = await driver.run_turn(session.session_id, ["<buzz-turn>"])
    assert first.usage is not None and first.usage.delta_reliable
    assert second.usage is not None and not second.usage.delta_reliable
    assert second.usage.turn.input_tokens is None and second.usage.turn.output_tokens is None
    assert second.usage.turn.cost_usd is None
    assert second.usage.cumulative is not None and second.usage.turn_seq == 2


async def test_cancel_mid_turn_ends_cancelled(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--delay", "20") as driver:
        session = await _session(driver, tmp_path)
        seen, on_update = _started()
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, ["<buzz-turn>"], on_update=on_update)
        )
        await _wait(seen)
        await driver.cancel(session.session_id)
        async with asyncio.timeout(WAIT):
            result = await turn
    assert (result.stop_reason, result.outcome, result.terminal_evidence) == (
        "cancelled",
        "cancelled",
        "cancel_response",
    )
    assert result.native_stop_reason == "cancelled"
    assert result.usage is None  # nothing observed: no metric


async def test_steer_mid_turn_is_injected_and_recorded_in_the_ledger(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--delay", "20") as driver:
        session = await _session(driver, tmp_path)
        compiled = compile_turn(_turn_input(session, "long task"))
        ledger = TurnLedger()
        ledger.set_base(compiled.manifest)
        seen, on_update = _started()
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, compiled.sections, on_update=on_update)
        )
        await _wait(seen)
        steer = compile_steer(_event("mind the tests"), channel_id="general")
        other = compile_steer(_event("a second steer"), channel_id="general")
        # At most one steer in flight per turn: the one sent meanwhile is released.
        outcome, second = await asyncio.gather(
            driver.steer(session.session_id, steer.text),
            driver.steer(session.session_id, other.text),
        )
        if outcome == "injected":  # the caller's rule: only injected steers join the ledger
            ledger.accept_update(steer.manifest)
        async with asyncio.timeout(WAIT):  # the 20 s turn wraps up at once
            result = await turn
    assert (outcome, second) == ("injected", "released")
    assert result.outcome == "success"
    assert result.reply.endswith("instruction: long task\nsteer: mind the tests")
    snapshot = ledger.snapshot()
    assert snapshot is not None and snapshot.hash_matches()
    layers = [layer.layer for layer in snapshot.layers]
    assert "steer_delivery_contract" in layers
    assert layers.count("current_instruction") == 2
    log = (tmp_path / "agent.log").read_text()
    assert log.count("_session/steering") == 1 and "_goose" not in log


async def test_steer_without_a_running_prompt_starts_a_new_turn(tmp_path: Path) -> None:
    async with _driver(tmp_path) as driver:
        session = await _session(driver, tmp_path)
        ledger = TurnLedger()
        steer = compile_steer(_event("are you there"), channel_id="general")
        outcome = await driver.steer(session.session_id, steer.text)
        if outcome == "injected":
            ledger.accept_update(steer.manifest)
    assert outcome == "started_new_turn"
    assert ledger.snapshot() is None


async def test_agent_without_steering_gets_no_native_steer_and_no_probe(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--no-steering", "--delay", "20") as driver:
        session = await _session(driver, tmp_path)
        seen, on_update = _started()
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, ["<buzz-turn>"], on_update=on_update)
        )
        await _wait(seen)
        assert not driver.can_steer(session.session_id)
        assert await driver.steer(session.session_id, "update") == "failed"
        await driver.cancel(session.session_id)  # the caller's fallback: cancel and merge
        result = await turn
    assert result.outcome == "cancelled"
    assert "extension method" not in (tmp_path / "agent.log").read_text()


async def test_agent_crash_fails_the_turn_and_a_restart_works(tmp_path: Path) -> None:
    records: list[tuple[str, str | None, dict[str, Any]]] = []
    async with _driver(
        tmp_path, "--crash-on", "CRASH-NOW", on_diagnostic=lambda *r: records.append(r)
    ) as driver:
        session = await _session(driver, tmp_path)
        result = await driver.run_turn(session.session_id, ["please CRASH-NOW"])
        assert not driver.alive
        assert (result.stop_reason, result.outcome, result.terminal_evidence) == (
            "error",
            "failed",
            "agent_exit",
        )
        assert result.usage is None
        with pytest.raises(AgentError, match="already started"):
            await driver.start()
        await driver.restart()
        assert driver.alive
        fresh = await _session(driver, tmp_path)
        ok = await driver.run_turn(fresh.session_id, ["<buzz-turn>", "</buzz-turn>"])
    assert ok.outcome == "success" and ok.usage is not None and ok.usage.delta_reliable
    kinds = [kind for kind, _, _ in records]
    assert kinds.count("agent_started") == 2
    exited = next(payload for kind, _, payload in records if kind == "agent_exited")
    assert exited["returncode"] == 3


async def test_idle_timeout_with_a_never_answering_agent(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--never-answer", idle_timeout=1.0) as driver:
        session = await _session(driver, tmp_path)
        loop = asyncio.get_running_loop()
        began = loop.time()
        result = await driver.run_turn(session.session_id, ["<buzz-turn>"])
        took = loop.time() - began
    assert (result.stop_reason, result.outcome, result.terminal_evidence) == (
        "error",
        "failed",
        "timeout",
    )
    assert result.error == "idle timeout"
    assert 1.0 <= took < 5.0


async def test_hard_timeout_bounds_a_busy_turn(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--delay", "20", hard_timeout=1.0) as driver:
        session = await _session(driver, tmp_path)
        result = await driver.run_turn(session.session_id, ["<buzz-turn>"])
    assert (result.outcome, result.terminal_evidence, result.error) == (
        "failed",
        "timeout",
        "hard timeout",
    )


async def test_one_prompt_per_session_and_errors_before_start(tmp_path: Path) -> None:
    driver = AgentDriver(sys.executable, ["-m", "nostr_buzz.demo.agent"])
    with pytest.raises(AgentError, match="not started"):
        await driver.run_turn("s", ["x"])
    async with _driver(tmp_path, "--delay", "20") as driver:
        session = await _session(driver, tmp_path)
        seen, on_update = _started()
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, ["<buzz-turn>"], on_update=on_update)
        )
        await _wait(seen)
        with pytest.raises(AgentError, match="already running"):
            await driver.run_turn(session.session_id, ["again"])
        await driver.cancel(session.session_id)
        await turn


async def test_only_the_configured_environment_reaches_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_TEST_NAMED_KEY", "named-value")
    monkeypatch.setenv("BUZZ_TEST_UNNAMED", "must-not-leak")
    out = tmp_path / "env.txt"
    script = f"import os, json; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    driver = AgentDriver(
        sys.executable,
        ["-c", script],
        env_names=["BUZZ_TEST_NAMED_KEY", "BUZZ_TEST_ABSENT"],
        env={"BUZZ_TEST_EXPLICIT": "explicit"},
        request_timeout=WAIT,
    )
    with pytest.raises(AgentError, match="failed to initialize"):
        await driver.start()  # the script exits without speaking ACP
    seen = json.loads(out.read_text())
    assert seen["BUZZ_TEST_NAMED_KEY"] == "named-value"
    assert seen["BUZZ_TEST_EXPLICIT"] == "explicit"
    assert "BUZZ_TEST_UNNAMED" not in seen and "BUZZ_TEST_ABSENT" not in seen
    assert driver.pid is None


async def test_a_missing_command_is_an_agent_error(tmp_path: Path) -> None:
    driver = AgentDriver(str(tmp_path / "no-such-agent"))
    with pytest.raises(AgentError, match="cannot start the agent"):
        await driver.start()


async def test_diagnostics_feed_carries_no_prompt_text(tmp_path: Path) -> None:
    path = tmp_path / "state" / "diagnostics.jsonl"
    feed = DiagnosticsFeed(path, clock=_clock())

    def forward(kind: str, session_id: str | None, payload: dict[str, Any]) -> None:
        feed.emit(kind, session_id=session_id, payload=payload)

    secret_words = "the secret plan of the user"
    async with _driver(tmp_path, on_diagnostic=forward) as driver:
        session = await _session(driver, tmp_path)
        compiled = compile_turn(_turn_input(session, secret_words))
        ids = {"channel_id": "general", "session_id": session.session_id, "turn_id": "t-1"}
        feed.turn_started([compiled.manifest.hash], **ids)
        feed.prompt_context_delivery(
            compiled.sections,
            compiled.manifest,
            standing_context_included=not session.standing_context_sent,
            event_delta_count=0,
            **ids,
        )
        result = await driver.run_turn(session.session_id, compiled.sections)
        feed.turn_completed(result.outcome, result.stop_reason, **ids)
    feed.close()
    text = path.read_text(encoding="utf-8")
    assert secret_words not in text and "Be brief" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    kinds = [r["kind"] for r in records]
    assert kinds == [
        "agent_started",
        "session_started",
        "turn_started",
        "prompt_context_delivery",
        "turn_completed",
        "agent_exited",
    ]
    assert records[1]["payload"] == {"standingStrategy": "claude_meta"}


async def test_close_leaves_no_process_and_no_task(tmp_path: Path) -> None:
    async with _driver(tmp_path, "--delay", "20") as driver:
        session = await _session(driver, tmp_path)
        pid = driver.pid
        assert pid is not None
        seen, on_update = _started()
        turn = asyncio.ensure_future(
            driver.run_turn(session.session_id, ["<buzz-turn>"], on_update=on_update)
        )
        await _wait(seen)
    result = await turn  # closing the agent ends the running turn
    assert result.terminal_evidence == "agent_exit"
    assert not driver.alive and driver.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


# A bare JSON-RPC agent (no acp package): it claims protocol version 2, answers each prompt
# with the stop reason its text names, and logs every frame it receives to a file.
RAW_AGENT = r"""
import json, sys
log = open(sys.argv[1], "a")
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
waiting = {}
sessions = 0
for line in sys.stdin:
    msg = json.loads(line)
    log.write(line)
    log.flush()
    method, mid = msg.get("method"), msg.get("id")
    if method is None:
        send({"jsonrpc": "2.0", "id": waiting.pop(mid), "result": {"stopReason": "end_turn"}})
    elif method == "initialize":
        info = {"name": "raw-v2", "version": "1"}
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 2, "agentInfo": info}})
    elif method == "session/new":
        sessions += 1
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": f"raw-{sessions}"}})
    elif method == "session/prompt":
        text = msg["params"]["prompt"][0]["text"]
        if text == "error":
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "boom"}})
        elif text == "permission":
            options = [
                {"optionId": "no", "name": "No", "kind": "reject_once"},
                {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
            ]
            call = {"toolCallId": "t1", "title": "write a file"}
            params = {"sessionId": msg["params"]["sessionId"], "toolCall": call,
                      "options": options}
            send({"jsonrpc": "2.0", "id": 900, "method": "session/request_permission",
                  "params": params})
            waiting[900] = mid
        elif text == "garbage":
            send({"jsonrpc": "2.0", "id": mid, "result": {"nothing": True}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": text}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
"""


async def test_protocol_v2_system_prompt_and_the_outcome_table(tmp_path: Path) -> None:
    script, frames = tmp_path / "raw_agent.py", tmp_path / "frames.jsonl"
    script.write_text(RAW_AGENT)
    driver = AgentDriver(sys.executable, [str(script), str(frames)], clock=_clock())
    async with driver:
        assert driver.info.protocol_version == 2 and not driver.info.steering_supported
        session = await _session(driver, tmp_path)
        assert session.strategy == "system_prompt"
        results: dict[str, TurnResult] = {}
        retired: list[str] = []
        for text in (
            "end_turn",
            "max_tokens",
            "refusal",
            "max_turn_requests",
            "something_new",
            "cancelled",
            "error",
            "garbage",
            "permission",
        ):
            if not driver.usable(session.session_id):
                retired.append(text)  # after a failed turn its session is never prompted again
                session = await _session(driver, tmp_path)
            results[text] = await driver.run_turn(session.session_id, [text])
        assert await driver.steer(session.session_id, "x") == "failed"  # nothing advertised
    assert retired == ["garbage", "permission"]  # the turns after "error" and "garbage"
    table = {
        text: (r.stop_reason, r.outcome, r.terminal_evidence, r.native_stop_reason)
        for text, r in results.items()
    }
    assert table == {
        "end_turn": ("end_turn", "success", "prompt_response", "end_turn"),
        "max_tokens": ("max_tokens", "success", "prompt_response", "max_tokens"),
        "refusal": ("unknown", "success", "prompt_response", "refusal"),
        "max_turn_requests": ("unknown", "success", "prompt_response", "max_turn_requests"),
        "something_new": ("unknown", "success", "prompt_response", "something_new"),
        "cancelled": ("cancelled", "cancelled", "prompt_response", "cancelled"),
        "error": ("error", "failed", "error", None),
        "garbage": ("error", "failed", "error", None),
        "permission": ("end_turn", "success", "prompt_response", "end_turn"),
    }
    assert all(r.usage is None for r in results.values())  # the agent reported none
    received = [json.loads(line) for line in frames.read_text().splitlines()]
    new = next(f for f in received if f.get("method") == "session/new")
    standing = standing_text(_with_workspace(STANDING, str(tmp_path)))
    assert new["params"]["systemPrompt"] == standing
    assert "_meta" not in new["params"]
    answer = next(f for f in received if f.get("id") == 900 and "method" not in f)
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "yes"}}
    assert not any(f.get("method", "").startswith("_") for f in received)  # never probed


LATE_AGENT = r"""
import json, sys
log = open(sys.argv[1], "a")
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
def update(what, **fields):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": "s1", "update": {"sessionUpdate": what, **fields}}})
def text(what, words):
    update(what, content={"type": "text", "text": words})
for line in sys.stdin:
    msg = json.loads(line)
    log.write(line)
    log.flush()
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        caps = {"sessionCapabilities": {"systemPrompt": {}, "close": {}}}
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": 1, "agentCapabilities": caps, "agentInfo": {"name": "raw-v1"}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        prompt = msg["params"]["prompt"][0]["text"]
        if prompt == "paragraphs":
            text("agent_thought_chunk", "secret thoughts")
            text("agent_message_chunk", "Narration.")
            update("tool_call", toolCallId="t1", title="ls", kind="execute", status="pending")
            update("tool_call_update", toolCallId="t1", status="completed")
            text("agent_message_chunk", "The answer.")
            update("usage_update", used=1234, size=200000)
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif prompt == "late":
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
            options = [
                {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                {"optionId": "no", "name": "No", "kind": "reject_once"},
            ]
            call = {"toolCallId": "t2", "title": "rm -rf build", "kind": "execute"}
            send({"jsonrpc": "2.0", "id": "late-1", "method": "session/request_permission",
                  "params": {"sessionId": "s1", "toolCall": call, "options": options}})
        else:
            error = {"code": -32603, "message": "Internal error",
                     "data": {"message": "model overloaded: try later"}}
            send({"jsonrpc": "2.0", "id": mid, "error": error})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
"""


async def test_standard_system_prompt_paragraphs_late_permission_and_error_text(
    tmp_path: Path,
) -> None:
    script, frames = tmp_path / "late_agent.py", tmp_path / "frames.jsonl"
    script.write_text(LATE_AGENT)
    asked: list[Any] = []
    diagnostics: list[tuple[str, str | None, dict[str, Any]]] = []

    def policy(request: Any) -> bool:
        asked.append(request)
        return True

    def received() -> list[dict[str, Any]]:
        return [json.loads(line) for line in frames.read_text().splitlines()]

    driver = AgentDriver(
        sys.executable,
        [str(script), str(frames)],
        clock=_clock(),
        permission=policy,
        on_diagnostic=lambda *record: diagnostics.append(record),
    )
    async with driver:
        assert driver.info.system_prompt_capability and driver.info.session_close
        standing = standing_text(_with_workspace(STANDING, str(tmp_path)))
        session = await driver.new_session(str(tmp_path), standing)
        assert session.strategy == "system_prompt"
        sid = session.session_id
        paragraphs = await driver.run_turn(sid, ["paragraphs"])
        late = await driver.run_turn(sid, ["late"])
        async with asyncio.timeout(WAIT):
            while not any(f.get("id") == "late-1" for f in received()):
                await asyncio.sleep(0.02)
        failed = await driver.run_turn(sid, ["error"])
    new = next(f for f in received() if f.get("method") == "session/new")
    assert new["params"]["systemPrompt"] == {
        "mode": "append",
        "content": [{"type": "text", "text": standing}],
    }
    assert "_meta" not in new["params"]
    # Text on both sides of a tool call: two paragraphs; the thought never shows.
    assert paragraphs.reply == "Narration.\n\nThe answer."
    assert (paragraphs.context_used, paragraphs.context_size) == (1234, 200_000)
    assert paragraphs.usage is None  # occupancy is not usage
    # A permission request after its turn ended: rejected without asking the policy (a
    # string request id, as codex-acp sends them).
    assert late.outcome == "success" and asked == []
    answer = next(f for f in received() if f.get("id") == "late-1" and "method" not in f)
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "no"}}
    decisions = [p for kind, _, p in diagnostics if kind == "permission_decision"]
    assert decisions == [
        {
            "decision": "rejected",
            "title": "rm -rf build",
            "toolKind": "execute",
            "turnRunning": False,
            "reason": "no_live_turn",
        }
    ]
    # −32603 with the text in data.message
    assert failed.outcome == "failed" and failed.error is not None
    assert "-32603" in failed.error and "model overloaded: try later" in failed.error


# =================================================================================================
# Conformance: the ACP harness checked from docs/bot.md, with tiny scripted JSON-RPC agents
# (tests/support/scripted_agent.py) that log every message they receive.
# =================================================================================================


async def test_start_passes_only_named_env_and_a_stderr_flood_never_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_TEST_API_KEY", "k1")
    monkeypatch.setenv("BUZZ_TEST_OTHER_SECRET", "nope")
    agent = Scripted(tmp_path, {"stderr_bytes": 1_000_000, "name": "flood", "protocol": 1})
    log_path = tmp_path / "agent.log"
    driver = agent.driver(
        env_names=["BUZZ_TEST_API_KEY", "BUZZ_TEST_ABSENT"],
        env={"X_EXPLICIT": "1"},
        log_path=log_path,
        request_timeout=WAIT,
    )
    async with driver:
        info = driver.info
        assert (info.protocol_version, info.name) == (1, "flood")
        assert info.capabilities.get("loadSession") is False
    env = next(m["env"] for m in agent.received() if "env" in m)
    assert "BUZZ_TEST_API_KEY" in env and "X_EXPLICIT" in env
    assert "BUZZ_TEST_OTHER_SECRET" not in env and "BUZZ_TEST_ABSENT" not in env
    # A megabyte on stderr went to the log file (a pipe would have filled and stalled it).
    assert log_path.stat().st_size >= 1_000_000


def expected_standing(cwd: str | None) -> str:
    parts = []
    if cwd is not None:
        body = (
            f"Your working directory is {cwd}. Keep the files you create and the repositories "
            "you clone there."
        )
        body = body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts.append(f"<workspace>\n{body}\n</workspace>")
    parts += ["<base>\nB &amp; b\n</base>", "<system>\nS\n</system>"]
    parts.append("<team-instructions>\nT\n</team-instructions>")
    return "\n\n".join(parts)


HARNESS_STANDING = Standing(base="B & b", persona="S", team_instructions="T")


async def _new_session(agent: Scripted, cwd: str) -> tuple[str, Any]:
    from nostr_buzz.io.acp_driver import standing_text

    driver = agent.driver(request_timeout=WAIT)
    async with driver:
        standing = standing_text(_with_workspace(HARNESS_STANDING, cwd))
        start = await driver.new_session(cwd, standing)
    return start.strategy, agent


@pytest.mark.parametrize(
    ("cwd", "workspace"),
    [("/srv/a&b/../w", "/srv/a&b/../w"), ("rel/dir", None), ("/", None)],
)
async def test_protocol_2_gets_top_level_system_prompt_with_exact_workspace(
    tmp_path: Path, cwd: str, workspace: str | None
) -> None:
    agent = Scripted(tmp_path, {"protocol": 2, "name": "future-agent"})
    strategy, _ = await _new_session(agent, cwd)
    assert strategy == "system_prompt"
    [new] = agent.requests("session/new")
    assert new["params"]["systemPrompt"] == expected_standing(workspace)
    assert new["params"]["cwd"] == cwd
    assert "_meta" not in new["params"] or "systemPrompt" not in new["params"]["_meta"]


async def test_goose_strategy_sets_the_system_prompt_extension(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {"name": "goose", "ok_methods": ["_goose/unstable/session/system-prompt/set"]},
    )
    strategy, _ = await _new_session(agent, "/w")
    assert strategy == "goose"
    [new] = agent.requests("session/new")
    assert "systemPrompt" not in new["params"]
    [sp] = agent.requests("_goose/unstable/session/system-prompt/set")
    assert sp["params"] == {
        "sessionId": "sess-1",
        "mode": "set",
        "key": "buzz",
        "text": expected_standing("/w"),
    }


async def test_goose_without_the_extension_falls_back_to_legacy(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"name": "goose"})  # −32601 for the extension
    strategy, _ = await _new_session(agent, "/w")
    assert strategy == "legacy"
    [new] = agent.requests("session/new")
    assert "systemPrompt" not in new["params"] and "_meta" not in new["params"]


async def test_claude_gets_meta_append(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"name": "@zed-industries/claude-agent-acp"})
    strategy, _ = await _new_session(agent, "/w")
    assert strategy == "claude_meta"
    [new] = agent.requests("session/new")
    assert new["params"]["_meta"]["systemPrompt"] == {"append": expected_standing("/w")}
    assert "systemPrompt" not in new["params"]


async def test_legacy_agent_answering_anything_is_never_probed(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path, {"name": "plain", "unknown": "empty", "meta": {}, "turns": [{"then": "wait"}]}
    )
    driver = agent.driver(request_timeout=WAIT)
    async with driver:
        start = await driver.new_session("/w", standing_text_of("/w"))
        assert start.strategy == "legacy" and not start.standing_context_sent
        turn = asyncio.create_task(driver.run_turn(start.session_id, ["<buzz-turn>", "x"]))
        await wait_for(lambda: agent.requests("session/prompt"), "the prompt")
        assert not driver.can_steer(start.session_id)
        assert await driver.steer(start.session_id, "steer text") == "failed"
        await driver.cancel(start.session_id)
        result = await asyncio.wait_for(turn, WAIT)
    assert result.outcome == "cancelled"
    assert set(agent.methods()) == {"initialize", "session/new", "session/prompt", "session/cancel"}


def standing_text_of(cwd: str) -> str:
    from nostr_buzz.io.acp_driver import standing_text

    return standing_text(_with_workspace(HARNESS_STANDING, cwd))


@pytest.mark.parametrize(
    ("native", "stop", "outcome"),
    [
        ("end_turn", "end_turn", "success"),
        ("max_tokens", "max_tokens", "success"),
        ("refusal", "unknown", "success"),
        ("max_turn_requests", "unknown", "success"),
        ("cancelled", "cancelled", "cancelled"),
    ],
)
async def test_a_turn_sends_sections_as_blocks_and_maps_the_stop_reason(
    tmp_path: Path, native: str, stop: str, outcome: str
) -> None:
    agent = Scripted(
        tmp_path,
        {
            "turns": [
                {
                    "updates": [chunk("hel"), chunk("lo"), usage_update(0.5)],
                    "stopReason": native,
                    "usage": USAGE,
                }
            ]
        },
    )
    async with agent.driver(request_timeout=WAIT) as driver:
        start = await driver.new_session("/w")
        seen: list[str] = []
        result = await driver.run_turn(
            start.session_id, ["<a>", "b\nc", "</a>"], on_update=seen.append
        )
    [prompt] = agent.requests("session/prompt")
    assert prompt["params"]["prompt"] == [
        {"type": "text", "text": "<a>"},
        {"type": "text", "text": "b\nc"},
        {"type": "text", "text": "</a>"},
    ]
    assert result.reply == "hello"
    assert (result.stop_reason, result.outcome, result.terminal_evidence) == (
        stop,
        outcome,
        "prompt_response",
    )
    assert result.native_stop_reason == native
    assert seen == ["agent_message_chunk", "agent_message_chunk", "usage_update"]
    assert result.usage is not None and result.usage.turn.input_tokens == 7
    assert result.usage.turn.cost_usd == 0.5


async def test_hard_deadline_is_renewed_by_an_injected_steer(tmp_path: Path) -> None:
    # The turn stays active (updates every 0.1 s) and answers after 2.6 s; the hard timeout is
    # 2 s.  A steer injected at ~1 s renews the deadline to ~3 s, so the turn succeeds; without
    # the renewal it would end as a timeout at 2 s.
    agent = Scripted(
        tmp_path,
        {
            "meta": {"steering": {"supported": True}},
            "steer_method": "_session/steering",
            "steer_answer": {"result": {"outcome": "injected"}},
            "turns": [{"then": "tick", "answer_after": 2.6, "usage": USAGE}],
        },
    )
    async with agent.driver(request_timeout=WAIT, hard_timeout=2.0, idle_timeout=5) as driver:
        start = await driver.new_session("/w")
        turn = asyncio.create_task(driver.run_turn(start.session_id, ["x"]))
        await wait_for(
            lambda: len(agent.requests("session/update")) or agent.requests("session/prompt"),
            "prompt",
        )
        await asyncio.sleep(1.0)  # the scenario's timing, not synchronisation
        assert await driver.steer(start.session_id, "s") == "injected"
        result = await asyncio.wait_for(turn, WAIT)
    assert (result.outcome, result.terminal_evidence) == ("success", "prompt_response")
    [steer] = agent.requests("_session/steering")
    assert steer["params"] == {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "s"}]}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"error": {"code": -32601, "message": "Method not found"}}, "failed"),
        ({"error": {"code": -32000, "message": "busy"}}, "released"),
        ({"result": {"outcome": "queued"}}, "failed"),
        ({"result": {}}, "failed"),
        ({"result": {"outcome": "startedNewTurn"}}, "started_new_turn"),
        ({"result": {"outcome": "injected"}}, "injected"),
    ],
)
async def test_steer_response_table(tmp_path: Path, answer: dict[str, Any], expected: str) -> None:
    agent = Scripted(
        tmp_path,
        {
            "meta": {"steering": {"supported": True}},
            "steer_method": "_session/steering",
            "steer_answer": answer,
            "turns": [{"then": "wait", "usage": USAGE}],
        },
    )
    async with agent.driver(request_timeout=WAIT, cancel_grace=WAIT) as driver:
        start = await driver.new_session("/w")
        turn = asyncio.create_task(driver.run_turn(start.session_id, ["x"]))
        await wait_for(lambda: agent.requests("session/prompt"), "the prompt")
        assert driver.can_steer(start.session_id)
        assert await driver.steer(start.session_id, "s") == expected
        if expected not in ("injected", "started_new_turn"):
            await driver.cancel(start.session_id)
        await asyncio.wait_for(turn, WAIT)


async def test_goose_steer_carries_the_active_run_id(tmp_path: Path) -> None:
    info = {"sessionUpdate": "session_info_update", "_meta": {"goose": {"activeRunId": "r-9"}}}
    agent = Scripted(
        tmp_path,
        {
            "name": "goose",
            "ok_methods": ["_goose/unstable/session/system-prompt/set"],
            "steer_method": "_goose/unstable/session/steer",
            "steer_answer": {"result": {}},
            "turns": [{"updates": [info], "then": "wait", "usage": USAGE}],
        },
    )
    async with agent.driver(request_timeout=WAIT) as driver:
        start = await driver.new_session("/w")
        turn = asyncio.create_task(driver.run_turn(start.session_id, ["x"]))
        await wait_for(lambda: agent.requests("session/prompt"), "the prompt")
        # the run id arrives with the first update; wait until the driver knows it
        await wait_for(lambda: driver.can_steer(start.session_id), "the goose run id")
        assert await driver.steer(start.session_id, "s") == "injected"
        result = await asyncio.wait_for(turn, WAIT)
    [steer] = agent.requests("_goose/unstable/session/steer")
    assert steer["params"] == {
        "sessionId": "sess-1",
        "expectedRunId": "r-9",
        "prompt": [{"type": "text", "text": "s"}],
    }
    assert result.outcome == "success"


async def test_a_turn_is_a_stream_of_facts_that_starts_on_the_wire_and_ends_with_its_result(
    tmp_path: Path,
) -> None:
    """The bot's turn goes live on ``PromptSent``: by then the prompt is the session's running
    one (a second prompt is refused and a permission request would be decided); the last fact
    is the result, and a prompt already running makes the stream raise."""
    from nostr_buzz.acp.facts import Ended, PromptSent, Text, Update

    async with _driver(tmp_path, "--delay", "0.2") as driver:
        session = await _session(driver, tmp_path)
        sections = compile_turn(_turn_input(session, "hello")).sections
        facts = []
        async for fact in driver.turn(session.session_id, sections):
            if isinstance(fact, PromptSent):
                assert driver.hub.sessions[session.session_id].running
                with pytest.raises(AgentError, match="already running"):
                    await driver.run_turn(session.session_id, sections)
            facts.append(fact)
        assert isinstance(facts[0], PromptSent) and isinstance(facts[-1], Ended)
        assert any(isinstance(f, Update) and f.kind == "agent_message_chunk" for f in facts)
        said = "".join(f.text for f in facts if isinstance(f, Text))
        assert facts[-1].result.outcome == "success" and facts[-1].result.reply == said != ""
        running = asyncio.ensure_future(driver.run_turn(session.session_id, sections))
        await asyncio.sleep(0.05)
        with pytest.raises(AgentError, match="already running"):
            async for _ in driver.turn(session.session_id, sections):
                pass
        assert (await running).outcome == "success"


async def test_a_turns_stream_reports_the_permission_the_agent_asked_and_the_decision(
    tmp_path: Path,
) -> None:
    """A hostile tool request during the turn is in the turn's stream with what was decided,
    and the tool ran only as decided."""
    from nostr_buzz.acp.facts import Ended, PermissionAsked

    agent = Scripted(tmp_path, {"turns": [{"ask": "rm -rf ~"}]})
    driver = agent.driver(permission=lambda request: request.title != "rm -rf ~")
    async with driver:
        start = await driver.new_session(str(tmp_path))
        facts = [fact async for fact in driver.turn(start.session_id, ["x"])]
    asked = [f for f in facts if isinstance(f, PermissionAsked)]
    assert [(a.request.title, a.request.turn_running, a.approved) for a in asked] == [
        ("rm -rf ~", True, False)
    ]
    assert isinstance(facts[-1], Ended) and agent.tools_run() == []
