"""The bundled demo agent, driven by the acp package's own client over real stdio."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import acp
import pytest
from acp import schema

from nostr_buzz.core.compiler import compile_steer
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.demo.agent import DemoAgent, DemoOptions
from tests.support.demo_turns import demo_sections, general_event

AGENT = (sys.executable, "-m", "nostr_buzz.demo.agent")
WAIT = 10.0


class _Client:
    """A minimal ACP client: records every session update and extension notification."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.ext: list[tuple[str, dict[str, Any]]] = []
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.changed.set()

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.ext.append((method, params))
        self.changed.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def kinds(self) -> list[str]:
        return [u.session_update for _, u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for _, u in self.updates if u.session_update == kind)

    async def until(self, predicate: Any) -> None:
        async with asyncio.timeout(WAIT):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def _agent(*flags: str) -> AsyncIterator[tuple[Any, _Client]]:
    client = _Client()
    async with acp.spawn_agent_process(
        cast(acp.Client, client),
        *AGENT,
        *flags,
        transport_kwargs={"stderr": subprocess.DEVNULL},
    ) as (conn, process):
        yield conn, client
    assert process.returncode is not None


async def _session(conn: Any, **meta: Any) -> tuple[schema.InitializeResponse, str]:
    init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    session = await conn.new_session(cwd="/tmp", **meta)
    return init, session.session_id


def _blocks(sections: list[str]) -> list[schema.TextContentBlock]:
    return [acp.text_block(s) for s in sections]


async def test_initialize_advertises_steering_and_system_prompt_append() -> None:
    async with _agent() as (conn, _):
        init, _sid = await _session(conn)
    assert init.protocol_version == 1
    assert init.agent_info is not None and init.agent_info.name == "buzz-demo-agent"
    assert init.field_meta == {"steering": {"supported": True}, "systemPrompt": {"append": True}}


async def test_legacy_and_no_steering_flags_advertise_nothing() -> None:
    async with _agent("--legacy", "--no-steering") as (conn, _):
        init, _sid = await _session(conn)
        with pytest.raises(acp.RequestError) as info:
            await conn.ext_method("session/steering", {"sessionId": _sid, "prompt": "x"})
    assert init.field_meta is None
    assert info.value.code == -32601


async def test_a_turn_replies_deterministically_and_reports_usage_both_ways() -> None:
    sections, ids = demo_sections("first line\nsecond line", "newest message\nmore")
    async with _agent() as (conn, client):
        _, sid = await _session(conn, systemPrompt={"append": "<base>\nbe kind\n</base>"})
        response = await conn.prompt(session_id=sid, prompt=_blocks(sections))
        again = await conn.prompt(session_id=sid, prompt=_blocks(sections))
    assert response.stop_reason == "end_turn"
    reply = client.text().split("demo-agent turn 2")[0]
    size = sum(len(s.encode()) for s in sections)
    assert reply == (
        f"demo-agent turn 1: {len(sections)} blocks, {size} bytes\n"
        "standing context: yes\n"
        f"events: {ids[0]}, {ids[1]}\n"
        "instruction: newest message"
    )
    assert client.kinds()[0] == "agent_thought_chunk"
    usage = response.usage
    assert usage is not None and usage.input_tokens == (size + 3) // 4
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    costs = [u.cost for _, u in client.updates if u.session_update == "usage_update"]
    assert [c.currency for c in costs] == ["USD", "USD"]
    assert 0 < costs[0].amount < costs[1].amount  # cumulative
    assert again.usage == usage  # same prompt, same numbers: deterministic


async def test_legacy_agent_ignores_meta_system_prompt_but_sees_prepended_standing() -> None:
    legacy_sections, _ = demo_sections("hi", standing=Standing(base="be kind"))
    plain, _ = demo_sections("hi")
    async with _agent("--legacy") as (conn, client):
        _, sid = await _session(conn, systemPrompt={"append": "<base>\nbe kind\n</base>"})
        await conn.prompt(session_id=sid, prompt=_blocks(plain))
        await conn.prompt(session_id=sid, prompt=_blocks(legacy_sections))
    turns = client.text().split("demo-agent turn ")
    assert "standing context: no" in turns[1]
    assert "standing context: yes" in turns[2]


async def test_steer_mid_turn_is_injected_and_the_reply_reflects_it() -> None:
    sections, _ = demo_sections("do the long thing")
    steer = compile_steer(general_event("also check the tests"), channel_id="general")
    async with _agent("--delay", "20") as (conn, client):
        _, sid = await _session(conn)
        prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=_blocks(sections)))
        await client.until(lambda: "agent_thought_chunk" in client.kinds())
        answer = await conn.ext_method(
            "session/steering", {"sessionId": sid, "prompt": [{"type": "text", "text": steer.text}]}
        )
        async with asyncio.timeout(WAIT):  # the steer wraps the 20 s turn up at once
            response = await prompt
    assert answer == {"outcome": "injected"}
    assert response.stop_reason == "end_turn"
    assert client.text().endswith("instruction: do the long thing\nsteer: also check the tests")


async def test_steer_without_a_running_prompt_starts_a_new_turn() -> None:
    async with _agent() as (conn, client):
        _, sid = await _session(conn)
        answer = await conn.ext_method("session/steering", {"sessionId": sid, "prompt": "hello"})
        await client.until(lambda: "usage_update" in client.kinds())
    assert answer == {"outcome": "startedNewTurn"}
    assert "started by a steer" in client.text()


class _SteerWhileAnswering:
    """An in-process client that steers at the exact instant the reply is being written."""

    def __init__(self, agent: DemoAgent, steer: str) -> None:
        self.agent = agent
        self.steer = steer
        self.outcomes: list[dict[str, Any]] = []
        self.texts: list[str] = []
        self.usage_updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if update.session_update == "agent_message_chunk":
            self.texts.append(update.content.text)
            if not self.outcomes:
                self.outcomes.append(
                    await self.agent.ext_method(
                        "session/steering", {"sessionId": session_id, "prompt": self.steer}
                    )
                )
        elif update.session_update == "usage_update":
            self.usage_updates += 1


async def test_a_steer_arriving_while_the_reply_is_written_starts_a_new_turn() -> None:
    sections, _ = demo_sections("answer this")
    steer = compile_steer(general_event("too late for the reply"), channel_id="general")
    agent = DemoAgent(DemoOptions())
    client = _SteerWhileAnswering(agent, steer.text)
    agent.on_connect(client)
    await agent.initialize(protocol_version=acp.PROTOCOL_VERSION)
    sid = (await agent.new_session(cwd="/tmp")).session_id
    response = await agent.prompt(_blocks(sections), sid)
    # The reply was already composed: the steer is honestly not "injected" into it ...
    assert client.outcomes == [{"outcome": "startedNewTurn"}]
    assert response.stop_reason == "end_turn"
    assert "too late" not in client.texts[0]
    assert client.texts[0].endswith("instruction: answer this")
    # ... and it is answered by a turn of its own, with its own usage, once the prompt returned.
    async with asyncio.timeout(WAIT):
        while client.usage_updates < 2:
            await asyncio.sleep(0.01)
    assert client.texts[1].startswith("demo-agent turn 2 (started by a steer)")
    assert client.texts[1].endswith("steer: too late for the reply")


async def test_a_steer_after_the_prompt_response_is_answered_in_its_own_turn() -> None:
    sections, _ = demo_sections("quick one")
    async with _agent() as (conn, client):
        _, sid = await _session(conn)
        await conn.prompt(session_id=sid, prompt=_blocks(sections))
        answered = len(client.updates)
        steer = compile_steer(general_event("afterthought"), channel_id="general")
        answer = await conn.ext_method("session/steering", {"sessionId": sid, "prompt": steer.text})
        await client.until(lambda: client.kinds()[answered:].count("usage_update") == 1)
    assert answer == {"outcome": "startedNewTurn"}
    first, second = client.text().split("demo-agent turn 2")
    assert "afterthought" not in first
    assert second.endswith("steer: afterthought")


async def test_a_steer_during_the_answer_time_starts_its_own_turn_after_the_prompt() -> None:
    sections, _ = demo_sections("write a long answer")
    steer = compile_steer(general_event("too late, but answer me"), channel_id="general")
    async with _agent("--answer-time", "1") as (conn, client):
        _, sid = await _session(conn)
        prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=_blocks(sections)))
        await client.until(lambda: "writing the answer" in client.text("agent_thought_chunk"))
        answer = await conn.ext_method("session/steering", {"sessionId": sid, "prompt": steer.text})
        async with asyncio.timeout(WAIT):
            response = await prompt
        await client.until(lambda: client.kinds().count("usage_update") == 2)
    assert answer == {"outcome": "startedNewTurn"}
    assert response.stop_reason == "end_turn"
    first, own = client.text().split("demo-agent turn 2")
    assert first.endswith("instruction: write a long answer")  # the steer is not in it
    assert own == " (started by a steer)\nsteer: too late, but answer me"


async def test_goose_steer_once_the_reply_is_written_is_refused() -> None:
    sections, _ = demo_sections("goose answer")
    agent = DemoAgent(DemoOptions(goose=True))
    outcomes: list[str] = []

    class _Late:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if update.session_update == "session_info_update":
                self.run_id = update.field_meta["goose"]["activeRunId"]
            if update.session_update == "agent_message_chunk":
                with pytest.raises(acp.RequestError) as info:
                    await agent.ext_method(
                        "goose/unstable/session/steer",
                        {"sessionId": session_id, "expectedRunId": self.run_id, "prompt": "x"},
                    )
                outcomes.append(str(info.value))

        async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
            return None

    agent.on_connect(_Late())
    sid = (await agent.new_session(cwd="/tmp")).session_id
    await agent.prompt(_blocks(sections), sid)
    assert len(outcomes) == 1 and "no active run" in outcomes[0]


async def test_cancel_ends_the_turn_as_cancelled() -> None:
    sections, _ = demo_sections("long work")
    async with _agent("--delay", "20") as (conn, client):
        _, sid = await _session(conn)
        prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=_blocks(sections)))
        await client.until(lambda: "agent_thought_chunk" in client.kinds())
        await conn.cancel(session_id=sid)
        async with asyncio.timeout(WAIT):
            response = await prompt
    assert response.stop_reason == "cancelled"
    assert response.usage is None


async def test_goose_mode_run_ids_steer_system_prompt_and_cumulative_counters() -> None:
    sections, _ = demo_sections("goose work")
    steer = compile_steer(general_event("goose steer"), channel_id="general")
    async with _agent("--goose", "--delay", "20") as (conn, client):
        init, sid = await _session(conn)
        assert init.agent_info is not None and init.agent_info.name == "goose"
        assert (
            await conn.ext_method(
                "goose/unstable/session/system-prompt/set",
                {"sessionId": sid, "mode": "set", "key": "buzz", "text": "<base>\nx\n</base>"},
            )
            == {}
        )
        prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=_blocks(sections)))
        await client.until(lambda: "agent_thought_chunk" in client.kinds())
        info = next(u for _, u in client.updates if u.session_update == "session_info_update")
        run_id = info.field_meta["goose"]["activeRunId"]
        with pytest.raises(acp.RequestError):
            await conn.ext_method(
                "goose/unstable/session/steer",
                {"sessionId": sid, "expectedRunId": "run-other", "prompt": steer.text},
            )
        assert (
            await conn.ext_method(
                "goose/unstable/session/steer",
                {"sessionId": sid, "expectedRunId": run_id, "prompt": steer.text},
            )
            == {}
        )
        async with asyncio.timeout(WAIT):
            await prompt
        await client.until(lambda: bool(client.ext))
    assert "standing context: yes" in client.text() and "steer: goose steer" in client.text()
    method, params = client.ext[0]
    assert method == "goose/unstable/session/update"
    update = params["update"]
    assert update["sessionUpdate"] == "usage_update"
    assert update["accumulatedTotalTokens"] == (
        update["accumulatedInputTokens"] + update["accumulatedOutputTokens"]
    )


async def test_crash_on_exits_abruptly() -> None:
    sections, _ = demo_sections("please CRASH-NOW")
    async with _agent("--crash-on", "CRASH-NOW") as (conn, _):
        _, sid = await _session(conn)
        with pytest.raises(ConnectionError):
            async with asyncio.timeout(WAIT):
                await conn.prompt(session_id=sid, prompt=_blocks(sections))


def test_entry_point_help() -> None:
    done = subprocess.run(
        [*AGENT, "--help"], capture_output=True, text=True, timeout=WAIT, check=False
    )
    assert done.returncode == 0
    assert "--never-answer" in done.stdout and "BUZZ_DEMO_AGENT_" in done.stdout
    assert "--answer-time" in done.stdout
