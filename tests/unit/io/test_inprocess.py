"""The in-process driver: an agent object's prompt as the facts of a turn, and the loader of
``MODULE:ATTR`` specs."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz import AgentModuleError, AgentReply, AgentTurn, TokenCounts
from nostr_buzz.acp.facts import Ended, Fact, PromptSent, Text
from nostr_buzz.acp.types import TurnResult
from nostr_buzz.errors import AgentError
from nostr_buzz.io.inprocess import InProcessDriver, load_agent

USAGE = TokenCounts(input_tokens=10, output_tokens=4, total_tokens=14, cost_usd=0.25)


class Echo:
    """Answers with what it was given; records every call."""

    def __init__(self) -> None:
        self.turns: list[AgentTurn] = []

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        self.turns.append(turn)
        return AgentReply(f"echo {turn.text}", usage=USAGE, model="echo-1")


class Boom:
    async def prompt(self, turn: AgentTurn) -> AgentReply:
        raise ConnectionResetError("the model went away, key sk-do-not-show")


class Slow:
    """Runs until cancelled, or until ``done`` is set."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.cancelled = 0

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        try:
            await self.done.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return AgentReply("finished after all")


class Stoppable(Slow):
    """Has ``cancel`` and ``steer``: a steer is taken when it says "yes"."""

    def __init__(self) -> None:
        super().__init__()
        self.cancel_calls: list[AgentTurn] = []
        self.steers: list[AgentTurn] = []

    async def cancel(self, turn: AgentTurn) -> None:
        self.cancel_calls.append(turn)
        self.done.set()  # the prompt returns (its answer is not used)

    async def steer(self, turn: AgentTurn) -> bool:
        self.steers.append(turn)
        return "yes" in turn.text


async def run(driver: InProcessDriver, session: str, *sections: str) -> list[Fact]:
    return [fact async for fact in driver.turn(session, sections)]


async def cancelled(driver: InProcessDriver, session: str) -> list[Fact]:
    """A turn's facts, its cancel asked as soon as its prompt runs."""
    facts: list[Fact] = []
    async for fact in driver.turn(session, ["x"]):
        facts.append(fact)
        if isinstance(fact, PromptSent):
            await driver.cancel(session)
    return facts


def ended(facts: list[Fact]) -> TurnResult:
    last = facts[-1]
    assert isinstance(last, Ended)
    return last.result


async def started(agent: Any, **kwargs: Any) -> tuple[InProcessDriver, str]:
    records: list[tuple[str, str | None, dict[str, Any]]] = kwargs.pop("records", [])
    driver = InProcessDriver(
        agent,
        channel_of=lambda _: "eng",
        on_diagnostic=lambda *r: records.append(r),
        **kwargs,
    )
    await driver.start()
    start = await driver.new_session("/", "the standing text")
    assert start.standing_context_sent  # the compiler must not prepend it
    return driver, start.session_id


async def test_a_reply_is_the_turns_text_usage_and_model() -> None:
    agent, records = Echo(), []
    driver, session = await started(agent, records=records)
    facts = await run(driver, session, "<a>1</a>", "<b>2</b>")
    assert isinstance(facts[0], PromptSent) and facts[1] == Text("echo <a>1</a>\n\n<b>2</b>")
    result = ended(facts)
    assert (result.outcome, result.stop_reason, result.terminal_evidence) == (
        "success",
        "end_turn",
        "prompt_response",
    )
    assert result.reply == result.final_message == "echo <a>1</a>\n\n<b>2</b>"
    assert result.usage is not None and result.usage.turn == USAGE
    assert result.usage.turn_seq == result.turn_seq == 1
    assert result.model == "echo-1" and result.adapter_session_id == session
    second = ended(await run(driver, session, "again"))
    assert second.turn_seq == 2
    # The standing text comes with the session's first turn only.
    assert [(t.system, t.session_id, t.channel) for t in agent.turns] == [
        ("the standing text", session, "eng"),
        (None, session, "eng"),
    ]
    assert [r[0] for r in records] == ["agent_started", "session_started"]
    assert records[0][2]["agentName"] == "Echo"


async def test_a_reply_past_the_cap_is_cut_and_the_cut_counted() -> None:
    driver, session = await started(Echo(), max_reply_bytes=8)
    facts = await run(driver, session, "ünïcode")  # "echo ünïcode": 14 bytes
    assert facts[1] == Text("echo ün")  # 8 bytes, never half of "ï"
    result = ended(facts)
    assert result.reply == result.final_message == "echo ün"
    assert result.reply_dropped_bytes == 6


async def test_an_exception_fails_the_turn_with_its_class_and_the_retry_gets_the_standing() -> None:
    class Flaky(Echo):
        async def prompt(self, turn: AgentTurn) -> AgentReply:
            if not self.turns:
                self.turns.append(turn)
                raise TimeoutError("model slow")
            return await super().prompt(turn)

    agent = Flaky()
    driver, session = await started(agent)
    result = ended(await run(driver, session, "x"))
    assert (result.outcome, result.stop_reason, result.terminal_evidence) == (
        "failed",
        "error",
        "error",
    )
    assert result.error == "TimeoutError: model slow" and result.error_class == "TimeoutError"
    assert result.usage is None and result.reply == ""
    ended(await run(driver, session, "x"))
    # The first turn never returned: the retry is still told the standing text.
    assert [t.system for t in agent.turns] == ["the standing text", "the standing text"]
    boom_driver, boom_session = await started(Boom())
    assert ended(await run(boom_driver, boom_session, "x")).error_class == "ConnectionResetError"


async def test_a_prompt_returning_something_else_fails_the_turn_and_says_so_on_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Wrong:
        async def prompt(self, turn: AgentTurn) -> Any:
            return None

    driver, session = await started(Wrong())
    with caplog.at_level(logging.WARNING, logger="nostr_buzz"):
        result = ended(await run(driver, session, "x"))
    assert result.outcome == "failed" and result.error_class == "TypeError"
    assert "prompt returned NoneType, not an AgentReply or a str" in (result.error or "")
    [logged] = caplog.records
    assert logged.name == "nostr_buzz.io.inprocess" and logged.levelno == logging.WARNING
    assert "Wrong failed a turn: TypeError: prompt returned NoneType" in logged.getMessage()


async def test_a_raising_agent_is_on_the_log_a_private_ones_with_its_class_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for channel, shown in (
        ("eng", "ConnectionResetError: the model went away"),
        ("dm-private-x", ""),
    ):
        driver = InProcessDriver(Boom(), channel_of=lambda _, c=channel: c)  # type: ignore[misc]
        await driver.start()
        session = (await driver.new_session("/", "")).session_id
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="nostr_buzz"):
            assert ended(await run(driver, session, "x")).outcome == "failed"
        [logged] = caplog.records
        message = logged.getMessage()
        assert message.startswith("the in-process agent Boom failed a turn: ConnectionResetError")
        assert (shown in message) if shown else ("went away" not in message), message


async def test_a_plain_async_function_is_an_agent_and_its_text_the_reply() -> None:
    seen: list[AgentTurn] = []

    async def answer(turn: AgentTurn) -> str:
        seen.append(turn)
        return f"text for {turn.channel}"

    class Callable_:
        async def __call__(self, turn: AgentTurn) -> AgentReply:
            return AgentReply("called", usage=USAGE)

    driver, session = await started(answer)
    assert driver.name == "answer"
    result = ended(await run(driver, session, "hello"))
    assert (result.outcome, result.reply, result.usage) == ("success", "text for eng", None)
    assert [t.sections for t in seen] == [("hello",)]
    driver, session = await started(Callable_())
    result = ended(await run(driver, session, "hello"))
    assert result.reply == "called" and result.usage is not None


def test_a_class_or_a_sync_function_is_refused_when_the_driver_is_built() -> None:
    with pytest.raises(AgentModuleError, match=r"got the class .*Echo itself.*give an instance"):
        InProcessDriver(Echo)  # type: ignore[arg-type]

    def sync(turn: AgentTurn) -> str:
        return "no"

    for wrong in (sync, "Echo", None):
        with pytest.raises(AgentModuleError, match="is not an in-process agent"):
            InProcessDriver(wrong)  # type: ignore[arg-type]


async def test_without_cancel_the_task_running_prompt_is_cancelled() -> None:
    agent = Slow()
    driver, session = await started(agent)
    facts = await asyncio.wait_for(cancelled(driver, session), 5)
    result = ended(facts)
    assert (result.outcome, result.stop_reason, result.terminal_evidence) == (
        "cancelled",
        "cancelled",
        "cancel_response",
    )
    assert agent.cancelled == 1 and result.reply == ""


async def test_with_cancel_the_agent_is_asked_and_its_late_answer_is_not_used() -> None:
    agent = Stoppable()
    driver, session = await started(agent)
    facts = await asyncio.wait_for(cancelled(driver, session), 5)
    result = ended(facts)
    assert result.outcome == "cancelled" and result.terminal_evidence == "cancel_response"
    assert agent.cancelled == 0 and [t.session_id for t in agent.cancel_calls] == [session]
    assert not any(isinstance(f, Text) for f in facts)


async def test_a_prompt_past_its_timeout_fails_and_is_cancelled() -> None:
    agent = Slow()
    driver, session = await started(agent, idle_timeout=0.05)
    result = ended(await asyncio.wait_for(run(driver, session, "x"), 5))
    assert (result.outcome, result.terminal_evidence) == ("failed", "timeout")
    assert agent.cancelled == 1


async def test_a_steer_is_injected_only_when_the_agent_takes_it() -> None:
    agent, records = Stoppable(), []
    driver, session = await started(agent, records=records)
    assert await driver.steer(session, "yes please") == "failed"  # no prompt runs
    outcomes = []
    async for fact in driver.turn(session, ["x"]):
        if isinstance(fact, PromptSent):
            assert driver.can_steer(session)
            outcomes.append(await driver.steer(session, "yes, and this"))
            outcomes.append(await driver.steer(session, "no"))
            agent.done.set()
    assert outcomes == ["injected", "failed"]
    assert [(t.sections, t.system, t.channel) for t in agent.steers] == [
        (("yes, and this",), None, "eng"),
        (("no",), None, "eng"),
    ]
    assert [r[2]["result"] for r in records if r[0] == "steer_sent"] == ["injected", "failed"]


async def test_without_steer_every_steer_fails_so_the_bot_cancels_and_merges() -> None:
    agent = Slow()
    driver, session = await started(agent)
    async for fact in driver.turn(session, ["x"]):
        if isinstance(fact, PromptSent):
            assert not driver.can_steer(session)
            assert await driver.steer(session, "more") == "failed"
            agent.done.set()
    assert await driver.follow_turn(session) is None


async def test_misuse_is_an_agent_error() -> None:
    driver = InProcessDriver(Echo())
    with pytest.raises(AgentError, match="not started"):
        await driver.new_session("/", "")
    info = await driver.start()
    assert info.name == "Echo" and driver.alive
    with pytest.raises(AgentError, match="already started"):
        await driver.start()
    with pytest.raises(AgentError, match="no session"):
        await run(driver, "nope", "x")
    session = (await driver.new_session("/", "")).session_id
    agent_turn = driver.turn(session, ["x"])
    assert isinstance(await anext(agent_turn), PromptSent)
    with pytest.raises(AgentError, match="already running"):
        await run(driver, session, "y")
    await agent_turn.aclose()
    await driver.close()
    assert not driver.alive
    with pytest.raises(AgentModuleError, match="needs `async def prompt"):
        InProcessDriver(object())  # type: ignore[arg-type]


# -- the loader --------------------------------------------------------------------------------


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the import path to write agent modules into."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")


def test_the_attribute_is_the_agent_or_a_factory_or_a_class(modules: Path) -> None:
    write(
        modules,
        "agents_ok",
        """
        from nostr_buzz import AgentReply

        class Agent:
            async def prompt(self, turn):
                return AgentReply("hi")

        agent = Agent()

        def make():
            return Agent()

        async def answer(turn):
            return "as a function"

        class Holder:
            inner = agent
        """,
    )
    instance = load_agent("agents_ok:agent")
    assert instance is load_agent("agents_ok:Holder.inner")
    assert type(load_agent("agents_ok:make")).__name__ == "Agent"
    function = load_agent("agents_ok:answer")  # an agent as it is, never called as a factory
    assert type(function).__name__ == "FunctionAgent" and function.name == "answer"
    made = load_agent("agents_ok:Agent")
    assert type(made).__name__ == "Agent" and made is not instance


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("agents_bad", "expected MODULE:ATTRIBUTE"),
        ("no_such_agent_module:agent", "agent module 'no_such_agent_module' not found"),
        ("agents_bad:missing", "has no attribute 'missing'"),
        ("agents_bad:nothing", "int is not an in-process agent"),
        ("agents_bad:Sync", "Sync is not an in-process agent: it needs `async def prompt"),
        ("agents_bad:broken", "the agent factory 'agents_bad:broken' failed: ValueError: no key"),
        ("agents_broken:agent", "importing the agent module 'agents_broken' failed: KeyError"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(modules: Path, spec: str, message: str) -> None:
    write(
        modules,
        "agents_bad",
        """
        nothing = 3

        class Sync:
            def prompt(self, turn):
                return None

        def broken():
            raise ValueError("no key")
        """,
    )
    write(modules, "agents_broken", "raise KeyError('at import time')\n")
    with pytest.raises(AgentModuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_agent(spec)


async def test_a_prompt_that_ignores_its_cancellation_is_left_behind_not_waited_for() -> None:
    release = asyncio.Event()

    class Stubborn:
        async def prompt(self, turn: AgentTurn) -> AgentReply:
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    continue  # a hostile or buggy agent: swallows every cancellation
            return AgentReply("too late")

    driver, session = await started(Stubborn(), cancel_grace=0.05)
    # The turn ends although the prompt never does.
    facts = await asyncio.wait_for(cancelled(driver, session), 5)
    result = ended(facts)
    assert (result.outcome, result.terminal_evidence) == ("cancelled", "timeout")
    assert not any(isinstance(f, Text) for f in facts)
    release.set()  # let it finish, so the test leaves no task behind
    await asyncio.sleep(0.05)


def test_the_working_directory_is_on_the_import_path_only_while_the_agent_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file dropped next to the agent's module later (``planted.py``) is never imported in
    place of a module the bot imports afterwards: ``sys.path`` is as it was."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "helper_next_to_it", "WORD = 'hi'\n")
    write(
        tmp_path,
        "agent_in_cwd",
        """
        from helper_next_to_it import WORD  # its neighbours, at import time
        from nostr_buzz import AgentReply

        class Agent:
            async def prompt(self, turn):
                return AgentReply(WORD)

        agent = Agent()
        """,
    )
    before = list(sys.path)
    assert type(load_agent("agent_in_cwd:agent")).__name__ == "Agent"
    assert sys.path == before
    write(tmp_path, "planted", "raise SystemExit('imported from the working directory')\n")
    assert importlib.util.find_spec("planted") is None
    # and when the module cannot be imported, too
    with pytest.raises(AgentModuleError):
        load_agent("no_such_module_here:agent")
    assert sys.path == before
