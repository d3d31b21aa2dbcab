"""An in-process agent (:mod:`nostr_buzz.agent`) behind the driver's interface.

:class:`InProcessDriver` is what the bot's supervisor and turns use instead of an
:class:`~nostr_buzz.io.agent_driver.AgentDriver` when the agent is a Python object: it opens
sessions (ids of its own; the standing text travels as :attr:`AgentTurn.system`, so the
compiler never prepends it), and gives each turn as the same stream of facts an ACP agent's
turn is (:mod:`nostr_buzz.acp.facts`): ``PromptSent`` once ``prompt`` runs, ``Text`` with the
reply, ``Ended`` with the :class:`~nostr_buzz.acp.types.TurnResult`, last.  Everything after
that — reply, metric, settlement, the outbox, crash safety — is the bot's usual path.

How a turn ends:

* ``prompt`` returned an :class:`AgentReply` → success (``end_turn``, ``prompt_response``);
  its usage is the turn's counters, its model the metric's model;
* ``prompt`` raised (or returned something else) → failed (``error``); the error is the
  exception's class and message, and the class alone is what a private conversation's
  ``turn_failed`` shows;
* no return within the idle timeout (an in-process prompt reports no activity until it
  returns; the hard timeout bounds it too) → failed (``timeout``), its task cancelled;
* a cancel asked while it runs → the agent's ``cancel(turn)`` when it has one, else the task
  is cancelled; whatever ``prompt`` then does within the cancel grace, the turn ends cancelled
  (``cancel_response``), its answer unused; past the grace its task is cancelled and the
  turn ends cancelled (``timeout``).

:func:`load_agent` turns a ``MODULE:ATTR`` spec into the agent object.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from nostr_buzz.acp.facts import Ended, Fact, PromptSent, Text
from nostr_buzz.acp.types import (
    AgentInfo,
    Ending,
    SessionStart,
    SteerOutcome,
    TerminalEvidence,
    TurnResult,
)
from nostr_buzz.agent import (
    AgentFunction,
    AgentModuleError,
    AgentReply,
    AgentTool,
    AgentTurn,
    InProcessAgent,
    parse_spec,
)
from nostr_buzz.core.usage import UsageRecord, checked_counts
from nostr_buzz.errors import AgentError
from nostr_buzz.io.diagnostics import DiagnosticCallback
from nostr_buzz.nips import nip10
from nostr_buzz.text.unicode import utf8_head, utf8_size

__all__ = ["FunctionAgent", "InProcessDriver", "checked_agent", "load_agent"]

log = logging.getLogger(__name__)

#: ``AgentInfo.protocol_version`` of an in-process agent: no ACP is spoken.
NO_PROTOCOL: Final = 0


def _utc_now() -> datetime:
    return datetime.now(UTC)


def load_agent(spec: str) -> InProcessAgent:
    """The in-process agent ``MODULE:ATTR`` names: the attribute itself, or what it returns
    when it is a class or a factory (called with no argument).  The working directory is
    searched last, after every other import path (so ``buzz run`` finds a module next to its
    ``buzz.toml`` without shadowing an installed one), and only while the module is imported:
    left there, a file dropped into that directory later would be imported in place of any
    module the process imports afterwards and cannot find elsewhere (docs/bot.md, "In-process
    agents").  Raises :class:`AgentModuleError`."""
    module_name, attribute = parse_spec(spec)
    target: Any = _import_from_cwd(module_name)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AgentModuleError(
                f"the agent module {module_name!r} has no attribute {attribute!r}"
            )
        target = getattr(target, part)
    factory = not hasattr(target, "prompt") and callable(target)
    if isinstance(target, type) or (factory and not _is_async_callable(target)):
        try:
            target = target()
        except Exception as exc:
            raise AgentModuleError(
                f"the agent factory {spec!r} failed: {type(exc).__name__}: {exc} "
                "(it is called with no argument)"
            ) from None
    return checked_agent(target, spec)


def _import_from_cwd(module_name: str) -> Any:
    """``module_name`` imported with the working directory searched last; ``sys.path`` is
    as it was afterwards (the module's own imports at import time find its neighbours)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise AgentModuleError(
            f"agent module {module_name!r} not found ({exc}): check its name and that its "
            "directory is on PYTHONPATH or is the working directory"
        ) from None
    except Exception as exc:  # the author's import-time code: say what broke
        raise AgentModuleError(
            f"importing the agent module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if added:
            with contextlib.suppress(ValueError):  # the module may have removed it itself
                sys.path.remove(cwd)


def checked_agent(agent: object, where: str) -> InProcessAgent:
    """``agent`` when it has ``async def prompt``; a plain async callable (``async def
    answer(turn)``) as an agent whose ``prompt`` it is; else :class:`AgentModuleError`, saying
    what was given (a class where its instance is needed, a sync function...)."""
    if isinstance(agent, type):
        raise AgentModuleError(
            f"{where}: got the class {agent.__qualname__} itself, not an agent: give an "
            f"instance ({agent.__qualname__}()), or an async function of an AgentTurn"
        )
    if inspect.iscoroutinefunction(getattr(agent, "prompt", None)):
        assert isinstance(agent, InProcessAgent)
        return agent
    if not hasattr(agent, "prompt") and _is_async_callable(agent):
        return FunctionAgent(agent)  # type: ignore[arg-type]  # an async callable, checked above
    raise AgentModuleError(
        f"{where}: {type(agent).__name__} is not an in-process agent: it needs "
        "`async def prompt(self, turn: AgentTurn) -> AgentReply`, or is itself "
        "`async def agent(turn: AgentTurn) -> AgentReply | str`"
    )


def _is_async_callable(value: object) -> bool:
    return inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(
        getattr(value, "__call__", None)  # noqa: B004 (an object whose __call__ is async)
    )


class FunctionAgent:
    """An async function of an :class:`AgentTurn` as an in-process agent: its ``prompt``."""

    def __init__(self, function: AgentFunction) -> None:
        self.function = function
        self.name = getattr(function, "__name__", None) or type(function).__name__

    async def prompt(self, turn: AgentTurn) -> AgentReply | str:
        return await self.function(turn)


@dataclass
class _Running:
    """A prompt in flight: its task, the turn it was given, whether a cancel was asked."""

    task: asyncio.Future[Any]
    turn: AgentTurn
    cancel: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Session:
    standing: str | None  # given as ``system`` until a prompt of the session returns
    turns: int = 0


@dataclass(frozen=True)
class _Outcome:
    ending: Ending
    reply: AgentReply | None = None
    error_class: str | None = None  # the exception's class, when the prompt raised


class InProcessDriver:
    """An in-process agent behind the driver's interface; see the module docstring.

    ``channel_of(session_id)`` names the queue channel a session serves (the supervisor
    knows); ``on_diagnostic`` gets ``agent_started``, ``session_started`` and ``steer_sent``
    like an ACP driver's observer.
    """

    def __init__(
        self,
        agent: InProcessAgent | AgentFunction,
        *,
        idle_timeout: float = 620.0,
        hard_timeout: float = 7200.0,
        cancel_grace: float = 10.0,
        request_timeout: float = 60.0,
        on_diagnostic: DiagnosticCallback | None = None,
        clock: Callable[[], datetime] = _utc_now,
        channel_of: Callable[[str], str | None] = lambda _: None,
        max_reply_bytes: int | None = None,
        tools_of: Callable[[str], tuple[AgentTool, ...]] = lambda _: (),
    ) -> None:
        self.agent = checked_agent(agent, "BuzzPlugin(agent=…)")
        #: UTF-8 bytes of a reply kept (None: all): the rest is dropped, and counted.
        self.max_reply_bytes = max_reply_bytes
        self.name = str(getattr(self.agent, "name", None) or type(self.agent).__name__)
        self.prompt_timeout = min(idle_timeout, hard_timeout)
        self.cancel_grace = cancel_grace
        self.request_timeout = request_timeout
        self._on_diagnostic = on_diagnostic
        self._clock = clock
        self._channel_of = channel_of
        self._tools_of = tools_of  # the bot's Nostr tools of a session
        self._info: AgentInfo | None = None
        self._sessions: dict[str, _Session] = {}
        self._running: dict[str, _Running] = {}

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Started, and not closed since."""
        return self._info is not None

    async def start(self) -> AgentInfo:
        if self._info is not None:
            raise AgentError("the agent is already started: close() or restart() it first")
        steers = callable(getattr(self.agent, "steer", None))
        self._info = AgentInfo(
            protocol_version=NO_PROTOCOL,
            name=self.name,
            version=None,
            capabilities={},
            steering_supported=steers,
            system_prompt_append=False,
            pid=os.getpid(),
        )
        self._diagnostic(
            "agent_started",
            None,
            {
                "agentName": self.name,
                "protocolVersion": NO_PROTOCOL,
                "steeringSupported": steers,
                "pid": self._info.pid,
            },
        )
        return self._info

    async def close(self) -> None:
        """Forget the sessions; a prompt still running is cancelled by its turn's stream."""
        self._info = None
        self._sessions.clear()

    async def restart(self) -> AgentInfo:
        await self.close()
        return await self.start()

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, cwd: str, standing: str = "") -> SessionStart:
        """A session of the bot's own (``cwd`` is not used: the agent is this process)."""
        if self._info is None:
            raise AgentError("the agent is not started: call start() first")
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = _Session(standing)
        self._diagnostic("session_started", session_id, {"standingStrategy": "system_prompt"})
        return SessionStart(session_id=session_id, strategy="system_prompt")

    def usable(self, session_id: str) -> bool:
        return True

    def compactions(self, session_id: str) -> int:
        """An in-process agent keeps no conversation of its own to compact."""
        return 0

    async def close_session(self, session_id: str) -> bool:
        """Forget an idle session (docs/bot.md, "Live sessions"); nothing continues it: its
        channel's next turn opens a new one.  No ``session/close`` was sent (False)."""
        self._sessions.pop(session_id, None)
        return False

    # -- turns ----------------------------------------------------------------------------

    async def turn(self, session_id: str, sections: Sequence[str]) -> AsyncIterator[Fact]:
        """One prompt as a stream of facts (see the module docstring); leaving the stream
        early cancels the prompt's task.  Raises :class:`AgentError` when the agent is not
        started or a prompt already runs in the session."""
        session = self._sessions.get(session_id)
        if self._info is None or session is None:
            raise AgentError(f"no session {session_id!r}: start the agent and open one")
        if session_id in self._running:
            raise AgentError(f"a prompt is already running in session {session_id!r}")
        started_at = self._clock()
        channel = self._channel_of(session_id) or ""
        tools = self._tools_of(session_id)
        turn = AgentTurn(tuple(sections), session.standing, session_id, channel, tools)
        running = _Running(asyncio.ensure_future(self.agent.prompt(turn)), turn)
        self._running[session_id] = running
        try:
            yield PromptSent()
            outcome = await self._end(running)
            _report(outcome, self.name, channel)
            session.turns += 1
            text, dropped = self._capped(outcome.reply.text if outcome.reply is not None else "")
            if outcome.reply is not None:
                session.standing = None  # the session has it now
                if text:
                    yield Text(text)
            result = self._result(outcome, session, session_id, started_at)
            yield Ended(
                msgspec.structs.replace(
                    result, reply=text, final_message=text, reply_dropped_bytes=dropped
                )
            )
        finally:
            del self._running[session_id]
            await _abandon(running.task, self.cancel_grace)

    async def _end(self, running: _Running) -> _Outcome:
        """How the prompt ended, and its reply when it answered (see the module)."""
        task = running.task
        asked = asyncio.ensure_future(running.cancel.wait())
        try:
            await asyncio.wait(
                {task, asked}, timeout=self.prompt_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            asked.cancel()
        if task.done():
            return _answered(task)
        if not running.cancel.is_set():
            task.cancel()
            error = f"the agent's prompt did not return within {self.prompt_timeout:g} s"
            return _Outcome(Ending("error", "failed", "timeout", error=error))
        stop = getattr(self.agent, "cancel", None)
        if callable(stop):
            try:
                await asyncio.wait_for(stop(running.turn), self.request_timeout)
            except Exception as exc:  # its own trouble: the task is cancelled below
                log.warning("the in-process agent's cancel failed: %s", type(exc).__name__)
                task.cancel()
        else:
            task.cancel()
        await asyncio.wait({task}, timeout=self.cancel_grace)
        evidence: TerminalEvidence = "cancel_response" if task.done() else "timeout"
        return _Outcome(Ending("cancelled", "cancelled", evidence))

    def _capped(self, text: str) -> tuple[str, int]:
        """``text`` cut to the reply cap, and the UTF-8 bytes cut off."""
        cap = self.max_reply_bytes
        if cap is None or len(text) <= cap // 4:  # surely within the cap
            return text, 0
        kept = utf8_head(text, cap)
        return kept, utf8_size(text) - utf8_size(kept)

    def _result(
        self,
        outcome: _Outcome,
        session: _Session,
        session_id: str,
        started_at: datetime,
    ) -> TurnResult:
        ending, reply = outcome.ending, outcome.reply
        text = reply.text if reply is not None else ""
        usage = None
        if reply is not None and reply.usage is not None:
            counts = checked_counts(reply.usage)
            usage = UsageRecord(
                turn=counts, cumulative=None, delta_reliable=True, turn_seq=session.turns
            )
        model = reply.model if reply is not None else None
        return TurnResult.of(
            ending,
            reply=text,
            usage=usage,
            session_id=session_id,
            started_at=started_at,
            ended_at=self._clock(),
            turn_seq=session.turns,
            model=model,
            error_class=outcome.error_class,
        )

    async def cancel(self, session_id: str) -> None:
        """Ask the running prompt of the session to stop; its turn ends as it says."""
        running = self._running.get(session_id)
        if running is not None:
            running.cancel.set()

    # -- steering -------------------------------------------------------------------------

    def can_steer(self, session_id: str) -> bool:
        return callable(getattr(self.agent, "steer", None)) and session_id in self._running

    async def steer(self, session_id: str, text: str) -> SteerOutcome:
        """The agent's ``steer(turn)``: True → ``injected``; False, an exception, no answer
        within the request timeout, no ``steer`` or no running prompt → ``failed`` (the bot
        cancels the turn and runs both messages in a new one)."""
        running = self._running.get(session_id)
        method = getattr(self.agent, "steer", None)
        if running is None or not callable(method):
            return "failed"
        turn = AgentTurn((text,), None, session_id, running.turn.channel, running.turn.tools)
        outcome: SteerOutcome = "failed"
        try:
            if await asyncio.wait_for(method(turn), self.request_timeout) is True:
                outcome = "injected"
        except Exception as exc:
            log.warning("the in-process agent's steer failed: %s", type(exc).__name__)
        self._diagnostic("steer_sent", session_id, {"method": "steer", "result": outcome})
        return outcome

    async def follow_turn(
        self, session_id: str, *, quiet: float = 1.0, silence: float = 30.0
    ) -> TurnResult | None:
        """None: an in-process agent never starts a turn of its own."""
        return None

    def _diagnostic(self, kind: Any, session_id: str | None, payload: dict[str, Any]) -> None:
        if self._on_diagnostic is not None:
            self._on_diagnostic(kind, session_id, payload)


def _answered(task: asyncio.Future[Any]) -> _Outcome:
    """How a prompt that returned or raised ended."""
    if task.cancelled():  # it cancelled itself
        return _Outcome(Ending("cancelled", "cancelled", "cancel_response"))
    exc = task.exception()
    if exc is not None:
        name = type(exc).__name__
        return _Outcome(Ending("error", "failed", "error", error=f"{name}: {exc}"), None, name)
    reply = task.result()
    if isinstance(reply, str):  # the text alone: no usage, the configured model
        reply = AgentReply(reply)
    if not isinstance(reply, AgentReply):
        error = f"TypeError: prompt returned {type(reply).__name__}, not an AgentReply or a str"
        return _Outcome(Ending("error", "failed", "error", error=error), None, "TypeError")
    return _Outcome(Ending("end_turn", "success", "prompt_response"), reply)


def _report(outcome: _Outcome, name: str, channel: str) -> None:
    """A failed prompt on the ``nostr_buzz`` logger (stderr when logging is not configured),
    besides its ``turn_failed`` diagnostic: a private conversation's with its class only."""
    ending = outcome.ending
    if ending.outcome != "failed":
        return
    why = ending.error or ending.evidence
    if nip10.is_private_channel(channel):
        why = outcome.error_class or ending.evidence
    log.warning("the in-process agent %s failed a turn: %s", name, why)


async def _abandon(task: asyncio.Future[Any], grace: float) -> None:
    """Cancel ``task`` if it still runs and wait for it at most ``grace`` seconds: a prompt that
    ignores its cancellation is left behind, never waited for."""
    if task.done():
        return
    task.cancel()
    task.add_done_callback(_retrieve)
    with contextlib.suppress(BaseException):
        await asyncio.wait({task}, timeout=grace)
    if not task.done():
        log.warning("the in-process agent's prompt ignored its cancellation; left running")


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Take an abandoned prompt's exception, so that asyncio does not report it."""
    if not task.cancelled():
        task.exception()
