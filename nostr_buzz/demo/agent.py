"""A small deterministic ACP agent for the demo and the tests (docs/bot.md).

Run it as ``python -m nostr_buzz.demo.agent [flags]``; it speaks ACP (protocol version 1)
over stdio through the ``agent-client-protocol`` package's agent side.

Each turn it replies with a summary derived only from the prompt (how many blocks and bytes,
the event ids it saw, the first line of the current instruction, whether the standing context
reached it, and one line per steer injected into the turn), and reports usage both ways: the
standard per-turn ``PromptResponse.usage`` and a cumulative ``usage_update`` with a cost.

Standing context: the demo honours ``_meta.systemPrompt = {"append": text}`` in
``session/new`` (the claude-agent-acp convention) and says so in its initialize result with
``_meta.systemPrompt.append = true``, so the driver can pick that strategy without probing.
``--legacy`` turns both off: the driver then prepends the standing sections to the first turn.

Steering: the initialize result advertises ``_meta.steering.supported``; ``_session/steering``
``{sessionId, prompt}`` answers ``{"outcome": "injected"}`` only while the running prompt's
answer is still being produced: the turn then wraps up at once and its reply has one line per
injected steer, so a steer answered ``injected`` always shows in the reply.  Once the answer is
being written (or no prompt runs) the turn has ended for steering purposes: the steer answers
``{"outcome": "startedNewTurn"}`` and a short turn of its own runs in the background, after the
running prompt has returned its response, with its own reply text and usage.  In goose mode
such a steer is refused with "no active run".

Test behaviours (flags, or the environment variables named in ``--help``): ``--delay`` (each
turn waits up to that many seconds, ended early by a steer or a cancel; 0, the default, is an
instant agent with no artificial wait, for load tests), ``--answer-time`` (after that wait, the
turn spends this many seconds writing its answer, announced by an ``agent_thought_chunk``
"writing the answer": a steer arriving then starts a turn of its own), ``--crash-on TEXT``
(exit abruptly when a prompt contains TEXT), ``--turn-cost USD`` (each turn adds USD to the
reported cost, for budgets), ``--never-answer`` (never respond to a prompt,
even when cancelled), ``--decreasing`` (cumulative counters go down after the first turn),
``--legacy`` (no system-prompt support), ``--no-steering`` (advertise no steering) and
``--record PATH`` (append one JSON line per new session ``{"session", "systemPrompt"}`` and
per prompt ``{"session", "prompt": [texts]}``, so a test can see exactly what reached the agent)
and ``--goose`` (identify as ``goose``: ``_goose/unstable/session/system-prompt/set``, a run id in
``session_info_update`` ``_meta.goose.activeRunId``, ``_goose/unstable/session/steer`` and
goose-style cumulative counters on ``_goose/unstable/session/update``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import acp
from acp import schema

__all__ = ["DemoAgent", "DemoOptions", "main", "summarize_prompt"]

AGENT_NAME: Final = "buzz-demo-agent"
AGENT_VERSION: Final = "1.0"
_EVENT_ID: Final = re.compile(r'<event [^>]*\bevent_id="([0-9a-f]{64})"')
_ENV_PREFIX: Final = "BUZZ_DEMO_AGENT_"


@dataclass(frozen=True)
class DemoOptions:
    delay: float = 0.0
    answer_time: float = 0.0
    crash_on: str | None = None
    never_answer: bool = False
    decreasing: bool = False
    legacy: bool = False
    steering: bool = True
    goose: bool = False
    record: str | None = None
    turn_cost: float = 0.0  # USD added to the reported cost by every turn


@dataclass
class _PromptRun:
    """The prompt currently running in a session."""

    run_id: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False
    steers: list[str] = field(default_factory=list)
    answering: bool = False  # the reply is being written: no steer can reach it any more
    finished: asyncio.Event = field(default_factory=asyncio.Event)  # the prompt has returned


@dataclass
class _SessionState:
    """What the demo agent keeps per ACP session: its standing text, token totals and the
    prompt running in it."""

    standing: str | None = None
    turns: int = 0
    input_total: int = 0
    output_total: int = 0
    running: _PromptRun | None = None


def _tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: one token per started 4 bytes."""
    return (len(text.encode("utf-8")) + 3) // 4


def _instruction_line(texts: Sequence[str]) -> str:
    """The first content line of the newest event block (``<event …>``), or ""."""
    for text in reversed(texts):
        start = text.rfind("<event ")
        if start < 0:
            continue
        for line in text[start:].split("\n"):
            if line.startswith("Content: "):
                return line[len("Content: ") :]
        return ""
    return ""


def summarize_prompt(texts: Sequence[str]) -> tuple[list[str], str]:
    """(event ids in order of appearance, first line of the current instruction)."""
    ids: list[str] = []
    for text in texts:
        for match in _EVENT_ID.finditer(text):
            if match.group(1) not in ids:
                ids.append(match.group(1))
    return ids, _instruction_line(texts)


def _texts(blocks: Sequence[Any]) -> list[str]:
    return [b.text for b in blocks if isinstance(b, schema.TextContentBlock)]


def _steer_texts(prompt: object) -> list[str]:
    """A steer's prompt: a string or a list of ACP text content blocks."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        return [
            b["text"]
            for b in prompt
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
    return []


class DemoAgent:
    """The agent side (an ``acp.Agent``); see the module docstring."""

    def __init__(self, options: DemoOptions) -> None:
        self._options = options
        self._client: Any = None
        self._sessions: dict[str, _SessionState] = {}
        self._next_session = 0
        self._next_run = 0
        self._background: set[asyncio.Task[None]] = set()

    def on_connect(self, conn: Any) -> None:
        self._client = conn

    def _record(self, entry: dict[str, Any]) -> None:
        if self._options.record is not None:
            with open(self._options.record, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")

    # -- lifecycle ------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: Any,
    ) -> schema.InitializeResponse:
        meta: dict[str, Any] = {}
        if self._options.steering and not self._options.goose:
            meta["steering"] = {"supported": True}
        if not self._options.legacy and not self._options.goose:
            meta["systemPrompt"] = {"append": True}
        name = "goose" if self._options.goose else AGENT_NAME
        return schema.InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_info=schema.Implementation(name=name, version=AGENT_VERSION),
            field_meta=meta or None,
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> schema.NewSessionResponse:
        self._next_session += 1
        session_id = f"demo-session-{self._next_session}"
        state = self._sessions[session_id] = _SessionState()
        prompt = kwargs.get("systemPrompt")
        if not self._options.legacy and isinstance(prompt, dict):
            append = prompt.get("append")
            if isinstance(append, str) and append:
                state.standing = append
        self._record({"session": session_id, "systemPrompt": state.standing})
        return schema.NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        state = self._sessions.get(session_id)
        if state is not None and state.running is not None:
            state.running.cancelled = True
            state.running.wake.set()

    # -- prompts --------------------------------------------------------------------------

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> schema.PromptResponse:
        state = self._sessions.get(session_id)
        if state is None:
            raise acp.RequestError.invalid_params({"sessionId": session_id})
        if state.running is not None:
            raise acp.RequestError.invalid_request({"details": "a prompt is already running"})
        texts = _texts(prompt)
        self._record({"session": session_id, "prompt": texts})
        if self._options.crash_on is not None and any(self._options.crash_on in t for t in texts):
            os._exit(3)  # an abrupt crash mid-turn, on purpose
        self._next_run += 1
        running = state.running = _PromptRun(run_id=f"run-{self._next_run}")
        try:
            # Progress first: a client can tell the turn is running (and learn goose's run id).
            if self._options.goose:
                await self._client.session_update(
                    session_id,
                    schema.SessionInfoUpdate(
                        session_update="session_info_update",
                        field_meta={"goose": {"activeRunId": running.run_id}},
                    ),
                )
            await self._client.session_update(
                session_id, acp.update_agent_thought_text("working on it")
            )
            if self._options.never_answer:
                await asyncio.Event().wait()  # never answers, not even a cancel
            if self._options.delay > 0 and not running.steers:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(running.wake.wait(), self._options.delay)
            # From here on no steer is injected: the reply is composed from what arrived so
            # far (set before the next await, so no steer can slip in between).
            running.answering = True
            if self._options.answer_time > 0 and not running.cancelled:
                await self._client.session_update(
                    session_id, acp.update_agent_thought_text("writing the answer")
                )
                await asyncio.sleep(self._options.answer_time)  # like streaming a long answer
            if running.cancelled:
                return schema.PromptResponse(stop_reason="cancelled")
            return await self._finish_turn(session_id, state, texts, list(running.steers))
        finally:
            state.running = None
            running.finished.set()

    async def _finish_turn(
        self, session_id: str, state: _SessionState, texts: list[str], steers: list[str]
    ) -> schema.PromptResponse:
        state.turns += 1
        ids, instruction = summarize_prompt(texts)
        standing_seen = state.standing is not None or any(t.startswith("<base>") for t in texts)
        lines = [
            f"demo-agent turn {state.turns}: {len(texts)} blocks,"
            f" {sum(len(t.encode('utf-8')) for t in texts)} bytes",
            f"standing context: {'yes' if standing_seen else 'no'}",
            f"events: {', '.join(ids) if ids else 'none'}",
            f"instruction: {instruction}",
        ]
        for steer in steers:
            _, steer_line = summarize_prompt([steer])
            lines.append(f"steer: {steer_line}")
        reply = "\n".join(lines)
        await self._client.session_update(session_id, acp.update_agent_message_text(reply))
        usage = await self._report_usage(
            session_id, state, _tokens("".join(texts) + "".join(steers)), _tokens(reply)
        )
        return schema.PromptResponse(stop_reason="end_turn", usage=usage)

    async def _report_usage(
        self, session_id: str, state: _SessionState, input_tokens: int, output_tokens: int
    ) -> schema.Usage:
        state.input_total += input_tokens
        state.output_total += output_tokens
        reported_in, reported_out = state.input_total, state.output_total
        if self._options.decreasing and state.turns > 1:
            reported_in, reported_out = input_tokens, output_tokens  # a counter that went down
        cost = (reported_in * 3 + reported_out * 15) / 1_000_000
        cost = round(cost + state.turns * self._options.turn_cost, 9)
        await self._client.session_update(
            session_id,
            schema.UsageUpdate(
                session_update="usage_update",
                used=reported_in + reported_out,
                size=200_000,
                cost=schema.Cost(amount=cost, currency="USD"),
            ),
        )
        if self._options.goose:
            await self._client.ext_notification(
                "goose/unstable/session/update",
                {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "usage_update",
                        "accumulatedInputTokens": reported_in,
                        "accumulatedOutputTokens": reported_out,
                        "accumulatedTotalTokens": reported_in + reported_out,
                        "accumulatedCost": cost,
                    },
                },
            )
        return schema.Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
        )

    # -- extensions -----------------------------------------------------------------------

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # On stderr (the driver's agent log): tests check that no method is ever probed.
        print(f"demo-agent: extension method _{method}", file=sys.stderr, flush=True)
        if method == "session/steering" and self._options.steering and not self._options.goose:
            return self._steer(params.get("sessionId"), params.get("prompt"), None)
        if self._options.goose and method == "goose/unstable/session/steer":
            return self._steer(
                params.get("sessionId"), params.get("prompt"), params.get("expectedRunId")
            )
        goose_prompt = method == "goose/unstable/session/system-prompt/set"
        if goose_prompt and self._options.goose and not self._options.legacy:
            state = self._sessions.get(str(params.get("sessionId")))
            text = params.get("text")
            if state is None or not isinstance(text, str):
                raise acp.RequestError.invalid_params({"details": "sessionId and text"})
            state.standing = text
            self._record({"session": str(params.get("sessionId")), "systemPrompt": text})
            return {}
        raise acp.RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def _steer(self, session_id: object, prompt: object, run_id: object) -> dict[str, Any]:
        state = self._sessions.get(session_id) if isinstance(session_id, str) else None
        texts = _steer_texts(prompt)
        if state is None or not texts:
            raise acp.RequestError.invalid_params({"details": "sessionId and prompt"})
        running = state.running
        open_turn = running is not None and not running.cancelled and not running.answering
        if self._options.goose:
            if running is None or not open_turn or running.run_id != run_id:
                raise acp.RequestError(-32603, "no active run", "no active run for the session")
            running.steers.append("\n".join(texts))
            running.wake.set()
            return {}
        if running is not None and open_turn:
            running.steers.append("\n".join(texts))
            running.wake.set()  # wrap the turn up now, taking the steer into account
            return {"outcome": "injected"}
        ending = running.finished if running is not None else None
        task = asyncio.create_task(self._steer_turn(session_id, state, texts, ending))  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return {"outcome": "startedNewTurn"}

    async def _steer_turn(
        self,
        session_id: str,
        state: _SessionState,
        texts: list[str],
        ending: asyncio.Event | None,
    ) -> None:
        """The new turn a steer started when no prompt could take it.  It waits for a prompt
        that is still finishing, so its text never mixes into that prompt's reply."""
        if ending is not None:
            await ending.wait()
        state.turns += 1
        _, line = summarize_prompt(texts)
        reply = f"demo-agent turn {state.turns} (started by a steer)\nsteer: {line}"
        await self._client.session_update(session_id, acp.update_agent_message_text(reply))
        await self._report_usage(session_id, state, _tokens("".join(texts)), _tokens(reply))


def _env_flag(name: str) -> bool:
    return os.environ.get(_ENV_PREFIX + name, "").lower() in ("1", "true", "yes", "on")


def _parse(argv: Sequence[str] | None) -> DemoOptions:
    parser = argparse.ArgumentParser(
        prog="python -m nostr_buzz.demo.agent",
        description="A deterministic ACP agent for the nostr-buzz demo and tests. Every flag "
        f"can also be set with an environment variable {_ENV_PREFIX}<FLAG> "
        "(e.g. BUZZ_DEMO_AGENT_DELAY=2).",
    )
    for flag, env, text in (
        (
            "--delay",
            "DELAY",
            "seconds each turn waits before replying (a steer or cancel ends it early); "
            "0, the default, answers at once",
        ),
        (
            "--answer-time",
            "ANSWER_TIME",
            "seconds each turn spends writing its answer once composed (steers arriving "
            "then start a turn of their own); default 0",
        ),
        ("--turn-cost", "TURN_COST", "USD each turn adds to the reported cost; default 0"),
    ):
        seconds = float(os.environ.get(_ENV_PREFIX + env, "0") or 0)
        parser.add_argument(flag, type=float, default=seconds, help=text)
    parser.add_argument(
        "--crash-on",
        default=os.environ.get(_ENV_PREFIX + "CRASH_ON") or None,
        help="exit abruptly when a prompt contains this text",
    )
    parser.add_argument(
        "--record",
        default=os.environ.get(_ENV_PREFIX + "RECORD") or None,
        help="append what reaches the agent (system prompts, prompts) to this JSON Lines file",
    )
    for flag, env, text in (
        ("--never-answer", "NEVER_ANSWER", "never respond to a prompt"),
        ("--decreasing", "DECREASING", "cumulative counters go down after the first turn"),
        ("--legacy", "LEGACY", "no system-prompt support"),
        ("--no-steering", "NO_STEERING", "advertise no native steering"),
        ("--goose", "GOOSE", "identify as goose and use goose's extension methods"),
    ):
        parser.add_argument(flag, action="store_true", default=_env_flag(env), help=text)
    args = parser.parse_args(argv)
    if args.delay < 0 or args.answer_time < 0 or args.turn_cost < 0:
        parser.error("--delay, --answer-time and --turn-cost must not be negative")
    return DemoOptions(
        delay=args.delay,
        answer_time=args.answer_time,
        crash_on=args.crash_on,
        never_answer=args.never_answer,
        decreasing=args.decreasing,
        legacy=args.legacy,
        steering=not args.no_steering,
        goose=args.goose,
        record=args.record,
        turn_cost=args.turn_cost,
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = _parse(argv)
    try:
        # The package's router looks methods up by name and answers -32601 for the ones a demo
        # agent leaves out (load, fork, modes…), so the full Protocol need not be implemented.
        agent = cast("acp.Agent", DemoAgent(options))
        asyncio.run(acp.run_agent(agent))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
