"""The ACP edge: one agent subprocess driven over the Agent Client Protocol (spec 06).

:class:`AgentDriver` spawns the configured agent command (stdio, JSON-RPC 2.0 through the
``agent-client-protocol`` package's low-level :class:`acp.connection.Connection`), initializes
it, opens sessions with the standing context delivered by the first strategy the agent
supports, runs turns (each compiled section one ``text`` block of ``session/prompt``), cancels
and steers them, and feeds what the agent reports about usage into the pure
:class:`~nostr_buzz.core.usage.UsageTracker`.

The low-level connection is used instead of ``ClientSideConnection`` because the driver must
put fields the v1 schema does not know on the wire (a top-level ``systemPrompt`` for protocol
≥ 2) and read extension notifications (goose's cumulative counters) raw.

Choices where spec 06 is silent (also in the project report):

* the claude strategy is chosen for agents named ``claude…`` *and* for agents whose initialize
  result advertises ``_meta.systemPrompt.append = true`` (as the bundled demo agent does);
* any error of goose's ``system-prompt/set``, not only −32601, falls back to legacy delivery,
  so the standing context is never lost;
* goose's run id is ``session_info_update`` ``_meta.goose.activeRunId``; it is forgotten when
  the turn ends;
* after a cancel, the prompt response decides: ``cancelled`` → outcome cancelled with
  ``cancel_response``, an ordinary stop reason (the turn finished first) → that outcome; an
  error response → cancelled; no response within ``cancel_grace`` → cancelled with ``timeout``;
* ``refusal`` and ``max_turn_requests`` (and any stop reason unknown to the schema) end the
  turn with ``stopReason`` ``unknown`` and outcome ``success`` (the agent answered normally);
* a second steer while one is in flight for the same turn is ``released`` (the queue keeps the
  event); a steer that times out counts as a transport failure (``failed``);
* a ``usage_update`` cost in a currency other than USD is ignored (``costUsd`` is USD);
* permission requests are answered with the first ``allow_once`` (else ``allow_always``)
  option, or cancelled when ``permission="reject"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Final, Literal

import acp
from acp import schema
from acp.connection import Connection
from pydantic import ValidationError

from nostr_buzz.core.compiler import standing_sections
from nostr_buzz.core.escape import escape_text
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.errors import AgentError
from nostr_buzz.io.run_as import launcher_argv

__all__ = [
    "AgentDriver",
    "AgentInfo",
    "DiagnosticCallback",
    "SessionStart",
    "StandingStrategy",
    "SteerOutcome",
    "TurnResult",
    "standing_text",
]

StandingStrategy = Literal["goose", "claude_meta", "system_prompt", "legacy"]
SteerOutcome = Literal["injected", "started_new_turn", "failed", "released"]
StopReason = Literal["end_turn", "max_tokens", "cancelled", "error", "unknown"]
Outcome = Literal["success", "cancelled", "failed"]
TerminalEvidence = Literal["prompt_response", "cancel_response", "agent_exit", "timeout", "error"]
#: ``on_diagnostic(kind, session_id, payload)``: driver-level observer records (no prompt text).
DiagnosticCallback = Callable[[str, str | None, dict[str, Any]], None]

METHOD_NOT_FOUND: Final = -32601
GOOSE_SYSTEM_PROMPT: Final = "_goose/unstable/session/system-prompt/set"
GOOSE_STEER: Final = "_goose/unstable/session/steer"
GOOSE_UPDATE: Final = "_goose/unstable/session/update"
SESSION_STEERING: Final = "_session/steering"
#: Lines from the agent may be large (embedded resources); the package's default is 64 KiB.
STDIO_LIMIT: Final = 50 * 1024 * 1024
WORKSPACE_BODY: Final = (
    "Your working directory is {cwd}. Keep the files you create and the repositories you "
    "clone there."
)
_STOP_REASONS: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "cancelled": "cancelled",
}


def standing_text(standing: Standing, cwd: str | None) -> str:
    """The system-role text of spec 06: ``<workspace>`` (for an absolute cwd other than ``/``,
    written exactly as configured) and the compiler's standing sections, joined by blank
    lines; "" when there is nothing to say."""
    parts: list[str] = []
    if cwd is not None and os.path.isabs(cwd) and cwd != "/":
        parts.append(f"<workspace>\n{escape_text(WORKSPACE_BODY.format(cwd=cwd))}\n</workspace>")
    parts.extend(text for _, text in standing_sections(standing))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class AgentInfo:
    """What ``initialize`` told about the agent."""

    protocol_version: int
    name: str | None
    version: str | None
    capabilities: dict[str, Any]
    steering_supported: bool
    system_prompt_append: bool
    pid: int

    @property
    def is_goose(self) -> bool:
        return (self.name or "").lower() == "goose"

    @property
    def is_claude(self) -> bool:
        return "claude" in (self.name or "").lower()


@dataclass(frozen=True)
class SessionStart:
    """A new ACP session and how its standing context travels.

    ``system_prompt_support`` and ``standing_context_sent`` go into the session's first
    :class:`~nostr_buzz.core.turn_input.TurnInput`; legacy delivery means the compiler prepends
    the standing sections to that first turn.
    """

    session_id: str
    strategy: StandingStrategy

    @property
    def system_prompt_support(self) -> bool:
        return self.strategy != "legacy"

    @property
    def standing_context_sent(self) -> bool:
        return self.strategy != "legacy"


@dataclass(frozen=True)
class TurnResult:
    """How one ``session/prompt`` ended, in NIP-AM terms (spec 06 "Outcome → metric")."""

    reply: str
    final_message: str
    usage: UsageRecord | None
    stop_reason: StopReason
    outcome: Outcome
    terminal_evidence: TerminalEvidence
    native_stop_reason: str | None
    adapter_session_id: str
    run_id: str | None
    started_at: datetime
    ended_at: datetime
    error: str | None = None


@dataclass
class _Turn:
    session_id: str
    started_at: datetime
    last_activity: float
    hard_deadline: float
    on_update: Callable[[str], None] | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    chunks: list[str] = field(default_factory=list)
    message_id: str | None = None
    final: list[str] = field(default_factory=list)
    run_id: str | None = None
    cancel_deadline: float | None = None
    steer_in_flight: bool = False
    prompt: asyncio.Future[Any] | None = None
    #: For a turn the agent may start on its own (a steer answered ``startedNewTurn``):
    #: ``held`` updates that arrived before the answer (replayed where they belong once it is
    #: known), ``active`` once it is, ``heard`` once an update reached it.  ``ended_usage``: the
    #: usage of a prompt turn that such a turn closed early.
    held: list[Any] = field(default_factory=list)
    active: bool = False
    heard: bool = False
    ended_usage: tuple[UsageRecord | None] | None = None

    def touch(self, now: float) -> None:
        self.last_activity = now
        self.wake.set()


@dataclass(frozen=True)
class _Ending:
    stop_reason: StopReason
    outcome: Outcome
    evidence: TerminalEvidence
    native: str | None = None
    error: str | None = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _client_version() -> str:
    try:
        return metadata.version("nostr-buzz")
    except metadata.PackageNotFoundError:
        return "0"


def _flag(meta: object, *path: str) -> bool:
    """``meta[path…] is True``, tolerating any shape."""
    node = meta
    for key in path:
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return node is True


def _goose_run_id(meta: Mapping[str, Any] | None) -> str | None:
    goose = meta.get("goose") if meta else None
    run_id = goose.get("activeRunId") if isinstance(goose, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


class AgentDriver:
    """One ACP agent subprocess; see the module docstring.

    ``env_names`` are copied from this process's environment at start (absent ones skipped);
    ``env`` gives explicit values.  Nothing else of the environment reaches the agent beyond
    the package's trimmed base (HOME, LOGNAME, PATH, SHELL, TERM, USER).  The agent's stderr
    goes to ``log_path`` (appended) or is discarded, never to a pipe that could fill up.
    ``BUZZ_PRIVATE_KEY`` never reaches the agent, whatever is asked.  ``user``: run the agent as
    that OS user (see :mod:`nostr_buzz.io.run_as`), so it cannot read the bot's key or state.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env_names: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        log_path: str | Path | None = None,
        idle_timeout: float = 620.0,
        hard_timeout: float = 7200.0,
        cancel_grace: float = 10.0,
        request_timeout: float = 60.0,
        shutdown_timeout: float = 2.0,
        permission: Literal["allow", "reject"] = "allow",
        usage: UsageTracker | None = None,
        on_diagnostic: DiagnosticCallback | None = None,
        clock: Callable[[], datetime] = _utc_now,
        user: str | None = None,
    ) -> None:
        self.command = command
        self.user = user
        self.args = tuple(args)
        self._env_names = tuple(env_names)
        self._env = dict(env or {})
        self._cwd = cwd
        self._log_path = Path(log_path) if log_path is not None else None
        self.idle_timeout = idle_timeout
        self.hard_timeout = hard_timeout
        self.cancel_grace = cancel_grace
        self.request_timeout = request_timeout
        self._shutdown_timeout = shutdown_timeout
        self._permission = permission
        self.usage = usage if usage is not None else UsageTracker()
        self._on_diagnostic = on_diagnostic
        self._clock = clock
        self._stack: AsyncExitStack | None = None
        self._conn: Connection | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self._info: AgentInfo | None = None
        self._turns: dict[str, _Turn] = {}
        #: Turns the agent may start (or started) on its own after a steer: see follow_turn.
        self._follows: dict[str, _Turn] = {}
        self._run_ids: dict[str, str] = {}
        self._lost = False  # the connection ended (agent exit) before close()
        self._generation = 0  # one per agent process: see _usage_key

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def info(self) -> AgentInfo:
        if self._info is None:
            raise AgentError("the agent is not started: call start() first")
        return self._info

    @property
    def alive(self) -> bool:
        """Started, and the subprocess has not exited."""
        process = self._process
        return process is not None and process.returncode is None and not self._lost

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _child_env(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in self._env_names if name in os.environ}
        env.update(self._env)
        env.pop("BUZZ_PRIVATE_KEY", None)  # the bot's key is never the agent's
        return env

    def _argv(self) -> list[str]:
        if self.user is None:
            return [self.command, *self.args]
        program, launcher_args = launcher_argv(self.user, self.command, self.args)
        return [program, *launcher_args]

    async def start(self) -> AgentInfo:
        """Spawn the agent and ``initialize`` it; raises :class:`AgentError` on failure."""
        if self._stack is not None:
            raise AgentError("the agent is already started: close() or restart() it first")
        stack = AsyncExitStack()
        stderr: int = subprocess.DEVNULL
        if self._log_path is not None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = stack.enter_context(open(self._log_path, "ab"))  # noqa: SIM115
            stderr = self._log.fileno()
        try:
            conn, process = await stack.enter_async_context(
                acp.spawn_stdio_connection(
                    self._handle,
                    *self._argv(),
                    env=self._child_env(),
                    cwd=self._cwd,
                    stderr=stderr,
                    limit=STDIO_LIMIT,
                    shutdown_timeout=self._shutdown_timeout,
                )
            )
        except OSError as exc:
            await stack.aclose()
            self._log = None
            raise AgentError(
                f"cannot start the agent {self.command!r}: {exc.strerror or exc}; "
                "check the agent command and working directory"
            ) from None
        self._stack, self._conn, self._process = stack, conn, process
        self._generation += 1
        try:
            raw = await self._request(
                "initialize",
                {
                    "protocolVersion": acp.PROTOCOL_VERSION,
                    # goose sends its cumulative counters only to clients that opt in.
                    "clientCapabilities": {"_meta": {"goose": {"customNotifications": True}}},
                    "clientInfo": {"name": "nostr-buzz", "version": _client_version()},
                },
            )
            response = schema.InitializeResponse.model_validate(raw)
        except (acp.RequestError, ConnectionError, OSError, TimeoutError, ValidationError) as exc:
            await self.close()
            raise AgentError(
                f"the agent {self.command!r} failed to initialize: {_describe(exc)}"
            ) from None
        meta = response.field_meta or {}
        caps = response.agent_capabilities
        self._info = AgentInfo(
            protocol_version=response.protocol_version,
            name=response.agent_info.name if response.agent_info else None,
            version=response.agent_info.version if response.agent_info else None,
            capabilities=caps.model_dump(mode="json", by_alias=True) if caps else {},
            steering_supported=_flag(meta, "steering", "supported"),
            system_prompt_append=_flag(meta, "systemPrompt", "append"),
            pid=process.pid,
        )
        self._diagnostic(
            "agent_started",
            None,
            {
                "agentName": self._info.name,
                "protocolVersion": self._info.protocol_version,
                "steeringSupported": self._info.steering_supported,
                "pid": process.pid,
            },
        )
        return self._info

    async def close(self) -> None:
        """Stop the agent: close its stdin, then terminate and kill it if it lingers.

        Turns still running end as ``agent_exit``.  Safe to call more than once.
        """
        stack, self._stack = self._stack, None
        self._conn = None
        process, self._process = self._process, None
        self._info = None
        self._run_ids.clear()
        for turn in self._turns.values():
            turn.wake.set()
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()
        self._log = None
        lost, self._lost = self._lost, False
        if process is not None and not lost:
            self._diagnostic("agent_exited", None, {"returncode": process.returncode})

    async def restart(self) -> AgentInfo:
        """close() then start(): after a crash, sessions must be created anew."""
        await self.close()
        return await self.start()

    async def __aenter__(self) -> AgentDriver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, cwd: str, standing: str = "") -> SessionStart:
        """``session/new`` with the standing context (spec 06's strategy order).

        ``standing`` is the system-role text (see :func:`standing_text`).  Raises
        :class:`AgentError` when the agent refuses the session.
        """
        info = self.info
        strategy: StandingStrategy
        extra: dict[str, Any] = {}
        if info.is_goose:
            strategy = "goose"
        elif info.is_claude or info.system_prompt_append:
            strategy = "claude_meta"
            if standing:
                extra["_meta"] = {"systemPrompt": {"append": standing}}
        elif info.protocol_version >= 2:
            strategy = "system_prompt"
            if standing:
                extra["systemPrompt"] = standing
        else:
            strategy = "legacy"
        try:
            raw = await self._request("session/new", {"cwd": cwd, "mcpServers": [], **extra})
            session_id = schema.NewSessionResponse.model_validate(raw).session_id
        except (acp.RequestError, ConnectionError, OSError, TimeoutError, ValidationError) as exc:
            raise AgentError(f"the agent refused a new session: {_describe(exc)}") from None
        if strategy == "goose" and standing:
            try:
                await self._request(
                    GOOSE_SYSTEM_PROMPT,
                    {"sessionId": session_id, "mode": "set", "key": "buzz", "text": standing},
                )
            except (acp.RequestError, ConnectionError, OSError, TimeoutError):
                strategy = "legacy"  # −32601 (or any failure): the first turn carries it
        self.usage.session_started(
            self._usage_key(session_id)
        )  # a session this harness created: zero baseline
        self._diagnostic("session_started", session_id, {"standingStrategy": strategy})
        return SessionStart(session_id=session_id, strategy=strategy)

    # -- turns ----------------------------------------------------------------------------

    def running(self, session_id: str) -> bool:
        return session_id in self._turns

    async def run_turn(
        self,
        session_id: str,
        sections: Sequence[str],
        *,
        on_update: Callable[[str], None] | None = None,
    ) -> TurnResult:
        """Send one prompt (each section its own ``text`` block) and wait for its end.

        ``on_update(kind)`` is called for each ``session/update`` of the turn (its
        ``sessionUpdate`` kind).  Never raises for what the agent does: crashes, timeouts and
        protocol errors are in the result.  Raises :class:`AgentError` only when no agent is
        started or a prompt is already running in the session.
        """
        conn = self._conn
        if conn is None:
            raise AgentError("the agent is not started: call start() first")
        if session_id in self._turns:
            raise AgentError(f"a prompt is already running in session {session_id!r}")
        loop = asyncio.get_running_loop()
        now = loop.time()
        turn = _Turn(
            session_id=session_id,
            started_at=self._clock(),
            last_activity=now,
            hard_deadline=now + self.hard_timeout,
            on_update=on_update,
        )
        self._turns[session_id] = turn
        self.usage.begin_turn(self._usage_key(session_id))
        params = {
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": s} for s in sections],
        }
        prompt = asyncio.ensure_future(conn.send_request("session/prompt", params))
        turn.prompt = prompt
        try:
            ending = await self._await_prompt(turn, prompt)
        finally:
            if not prompt.done():
                prompt.cancel()
            with contextlib.suppress(BaseException):
                await prompt
            self._turns.pop(session_id, None)
            self._run_ids.pop(session_id, None)
        if ending.evidence == "timeout" and ending.outcome == "failed":
            await self._notify("session/cancel", {"sessionId": session_id})
        ended = turn.ended_usage  # set when the agent's own next turn began meanwhile
        usage = ended[0] if ended is not None else self.usage.end_turn(self._usage_key(session_id))
        result = TurnResult(
            reply="".join(turn.chunks),
            final_message="".join(turn.final),
            usage=usage,
            stop_reason=ending.stop_reason,
            outcome=ending.outcome,
            terminal_evidence=ending.evidence,
            native_stop_reason=ending.native,
            adapter_session_id=session_id,
            run_id=turn.run_id,
            started_at=turn.started_at,
            ended_at=self._clock(),
            error=ending.error,
        )
        if ending.evidence == "agent_exit":
            await self._reap()
        return result

    async def _reap(self) -> None:
        """The connection is gone: wait (bounded) for the exit status, then report it."""
        process = self._process
        if process is None or self._lost:
            return
        self._lost = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self._shutdown_timeout)
        self._diagnostic("agent_exited", None, {"returncode": process.returncode})

    async def _await_prompt(self, turn: _Turn, prompt: asyncio.Future[Any]) -> _Ending:
        loop = asyncio.get_running_loop()
        while not prompt.done():
            now = loop.time()
            idle_at = turn.last_activity + self.idle_timeout
            deadline = min(idle_at, turn.hard_deadline)
            if turn.cancel_deadline is not None:
                deadline = min(deadline, turn.cancel_deadline)
            if self._conn is None:
                return _Ending("error", "failed", "agent_exit", error="the agent was closed")
            if now >= deadline:
                if turn.cancel_deadline is not None and now >= turn.cancel_deadline:
                    return _Ending(
                        "cancelled", "cancelled", "timeout", error="no answer to the cancel"
                    )
                what = "idle" if now >= idle_at else "hard"
                return _Ending("error", "failed", "timeout", error=f"{what} timeout")
            turn.wake.clear()
            waiter = asyncio.ensure_future(turn.wake.wait())
            try:
                await asyncio.wait(
                    {prompt, waiter}, timeout=deadline - now, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        return self._ending(turn, prompt)

    def _ending(self, turn: _Turn, prompt: asyncio.Future[Any]) -> _Ending:
        cancelling = turn.cancel_deadline is not None
        try:
            raw = prompt.result()
        except acp.RequestError as exc:
            if cancelling:
                return _Ending("cancelled", "cancelled", "cancel_response", error=_describe(exc))
            return _Ending("error", "failed", "error", error=_describe(exc))
        except (ConnectionError, OSError) as exc:
            return _Ending("error", "failed", "agent_exit", error=_describe(exc))
        native = raw.get("stopReason") if isinstance(raw, dict) else None
        if not isinstance(native, str):
            return _Ending("error", "failed", "error", error="prompt response without stopReason")
        usage = raw.get("usage")
        if usage is not None:
            try:
                parsed = schema.Usage.model_validate(usage)
            except ValidationError:
                parsed = None  # malformed usage is not observed (spec 04: absent)
            if parsed is not None:
                self.usage.observe_turn(
                    self._usage_key(turn.session_id),
                    input_tokens=parsed.input_tokens,
                    output_tokens=parsed.output_tokens,
                    total_tokens=parsed.total_tokens,
                    cached_read_tokens=parsed.cached_read_tokens,
                    cached_write_tokens=parsed.cached_write_tokens,
                )
        stop = _STOP_REASONS.get(native, "unknown")
        if stop == "cancelled":
            evidence: TerminalEvidence = "cancel_response" if cancelling else "prompt_response"
            return _Ending("cancelled", "cancelled", evidence, native=native)
        return _Ending(stop, "success", "prompt_response", native=native)

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``; the running turn then ends on the agent's answer (or after
        ``cancel_grace`` without one)."""
        turn = self._turns.get(session_id)
        if turn is not None and turn.cancel_deadline is None:
            turn.cancel_deadline = asyncio.get_running_loop().time() + self.cancel_grace
            turn.wake.set()
        await self._notify("session/cancel", {"sessionId": session_id})

    # -- steering -------------------------------------------------------------------------

    def _steer_route(self, session_id: str) -> tuple[str, bool] | None:
        """(method, is goose) of the native steer transport, or None (spec 06 transport)."""
        info = self._info
        if info is None:
            return None
        if info.is_goose and session_id in self._run_ids:
            return GOOSE_STEER, True
        if info.steering_supported:
            return SESSION_STEERING, False
        return None

    def can_steer(self, session_id: str) -> bool:
        """Whether a native steer transport exists for the session right now."""
        return self.alive and self._steer_route(session_id) is not None

    async def steer(self, session_id: str, text: str) -> SteerOutcome:
        """Deliver one compiled steer (``CompiledSteer.text``) natively.

        ``injected``: the running turn took it (add its manifest to the turn ledger);
        ``started_new_turn``: the agent started a new turn with it (report, do not add);
        ``failed``: no native steer, −32601, transport failure or another outcome (cancel the
        turn and merge); ``released``: another error, or a steer already in flight (release
        the event).  Unknown methods are never probed.
        """
        route = self._steer_route(session_id)
        if route is None or not self.alive:
            return "failed"
        method, goose = route
        turn = self._turns.get(session_id)
        if turn is not None:
            if turn.steer_in_flight:
                return "released"
            turn.steer_in_flight = True
        prompt = [{"type": "text", "text": text}]
        params: dict[str, Any] = {"sessionId": session_id, "prompt": prompt}
        if goose:
            params["expectedRunId"] = self._run_ids[session_id]
        # Ready before the answer: the agent may start writing a turn of its own at once.
        follow = self._follows.setdefault(session_id, self._new_turn(session_id))
        outcome: SteerOutcome
        try:
            raw = await self._request(method, params)
        except acp.RequestError as exc:
            outcome = "failed" if exc.code == METHOD_NOT_FOUND else "released"
        except (ConnectionError, OSError, TimeoutError):
            outcome = "failed"
        else:
            reported = raw.get("outcome") if isinstance(raw, dict) else None
            if goose or reported == "injected":
                outcome = "injected"
            elif reported == "startedNewTurn":
                outcome = "started_new_turn"
            else:
                outcome = "failed"
        finally:
            if turn is not None:
                turn.steer_in_flight = False
        if not follow.active:
            if outcome == "started_new_turn":
                follow.active = True
            elif self._follows.get(session_id) is follow:
                del self._follows[session_id]
            held, follow.held = follow.held, []
            for handler, update in held:  # now that it is known where they belong
                handler(update)
        if outcome == "injected" and turn is not None and self._turns.get(session_id) is turn:
            now = asyncio.get_running_loop().time()
            turn.hard_deadline = now + self.hard_timeout  # spec 06: renewed on injection
            turn.touch(now)
        self._diagnostic("steer_sent", session_id, {"method": method, "result": outcome})
        return outcome

    def _new_turn(self, session_id: str) -> _Turn:
        now = asyncio.get_running_loop().time()
        return _Turn(session_id, self._clock(), now, now + self.hard_timeout, None)

    async def follow_turn(
        self, session_id: str, *, quiet: float = 1.0, silence: float = 30.0
    ) -> TurnResult | None:
        """The turn the agent started on its own after answering a steer ``startedNewTurn``:
        its text and usage, collected until the agent has been quiet for ``quiet`` seconds
        (``silence`` when nothing came at all; bounded by the idle and hard timeouts: ACP has
        no end signal for a turn without a prompt).  Call it once the running prompt has
        returned; None when no such turn was announced for the session.  Its ``stop_reason``
        is ``unknown`` and its ``terminal_evidence`` ``timeout`` (the harness stopped
        waiting)."""
        follow = self._follows.get(session_id)
        if follow is None or not follow.active or session_id in self._turns:
            return None
        del self._follows[session_id]
        self._turns[session_id] = follow
        key = self._usage_key(session_id)
        self.usage.begin_turn(key)  # a no-op when its first update already began it
        loop = asyncio.get_running_loop()
        try:
            while self._conn is not None:
                limit = quiet if follow.heard else min(self.idle_timeout, silence)
                deadline = min(follow.last_activity + limit, follow.hard_deadline)
                if loop.time() >= deadline:
                    break
                follow.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follow.wake.wait(), deadline - loop.time())
                follow.heard = follow.heard or bool(follow.chunks)
        finally:
            self._turns.pop(session_id, None)
        alive = self._conn is not None
        return TurnResult(
            reply="".join(follow.chunks),
            final_message="".join(follow.final),
            usage=self.usage.end_turn(key),
            stop_reason="unknown" if alive else "error",
            outcome="success" if alive else "failed",
            terminal_evidence="timeout" if alive else "agent_exit",
            native_stop_reason=None,
            adapter_session_id=session_id,
            run_id=follow.run_id,
            started_at=follow.started_at,
            ended_at=self._clock(),
        )

    def _usage_key(self, session_id: str) -> str:
        """The usage tracker's key of a session of the current agent process.

        Agents may reuse session ids across processes (the demo agent numbers them from 1): a
        restarted agent's session must start from a zero baseline and ``turn_seq`` 1, never
        continue the dead process's counters.
        """
        return f"{self._generation}:{session_id}"

    # -- the wire -------------------------------------------------------------------------

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        conn = self._conn
        if conn is None:
            raise ConnectionError("the agent is not running")
        return await asyncio.wait_for(conn.send_request(method, params), self.request_timeout)

    async def _notify(self, method: str, params: dict[str, Any]) -> None:
        conn = self._conn
        if conn is None:
            return
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await conn.send_notification(method, params)

    async def _handle(self, method: str, params: Any, is_notification: bool) -> Any:
        """Everything the agent sends us: notifications and requests."""
        if method == "session/update":
            self._on_session_update(params)
            return None
        if method == GOOSE_UPDATE:
            self._on_goose_update(params)
            return None
        if is_notification:
            return None
        if method == "session/request_permission":
            return self._permission_answer(params)
        raise acp.RequestError.method_not_found(method)

    def _turn_of(self, params: object) -> tuple[str | None, _Turn | None]:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str):
            return None, None
        turn = self._turns.get(session_id)
        follow = self._follows.get(session_id)
        if follow is not None and follow.active and _answered(turn):
            # The prompt has its answer: what comes now is the agent's own next turn.
            if turn is not None and turn.ended_usage is None:
                turn.ended_usage = (self.usage.end_turn(self._usage_key(session_id)),)
            self.usage.begin_turn(self._usage_key(session_id))
            follow.heard = True
            turn = follow
        if turn is not None:
            turn.touch(asyncio.get_running_loop().time())
        return session_id, turn

    def _held(self, handler: Callable[[Any], None], params: Any) -> bool:
        """Keep an update that arrives after the prompt's answer while a steer's answer is
        still awaited: whether it starts the agent's own turn is not known yet."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str):
            return False
        follow = self._follows.get(session_id)
        if follow is None or follow.active or not _answered(self._turns.get(session_id)):
            return False
        follow.held.append((handler, params))
        return True

    def _on_session_update(self, params: Any) -> None:
        if self._held(self._on_session_update, params):
            return
        session_id, turn = self._turn_of(params)
        if session_id is None:
            return
        try:
            note = schema.SessionNotification.model_validate(params)
        except ValidationError:
            return  # an update kind this schema does not know: activity, nothing more
        update = note.update
        if turn is not None and turn.on_update is not None:
            turn.on_update(update.session_update)
        if isinstance(update, schema.AgentMessageChunk):
            if turn is not None and isinstance(update.content, schema.TextContentBlock):
                if update.message_id is not None and update.message_id != turn.message_id:
                    turn.message_id = update.message_id
                    turn.final = []
                turn.chunks.append(update.content.text)
                turn.final.append(update.content.text)
        elif isinstance(update, schema.UsageUpdate):
            cost = update.cost
            if cost is not None and cost.currency.upper() == "USD":
                self.usage.observe_cost(self._usage_key(session_id), cost.amount)
        elif isinstance(update, schema.SessionInfoUpdate):
            run_id = _goose_run_id(update.field_meta)
            if run_id is not None:
                self._run_ids[session_id] = run_id
                if turn is not None:
                    turn.run_id = run_id

    def _on_goose_update(self, params: Any) -> None:
        """goose's cumulative counters (``_goose/unstable/session/update`` usage_update)."""
        if self._held(self._on_goose_update, params):
            return
        session_id, _ = self._turn_of(params)
        update = params.get("update") if isinstance(params, dict) else None
        if session_id is None or not isinstance(update, dict):
            return
        if update.get("sessionUpdate") != "usage_update":
            return
        self.usage.observe_cumulative(
            self._usage_key(session_id),
            input_tokens=update.get("accumulatedInputTokens"),
            output_tokens=update.get("accumulatedOutputTokens"),
            cache_read_tokens=update.get("accumulatedCacheReadTokens"),
            cache_write_tokens=update.get("accumulatedCacheWriteTokens"),
            total_tokens=update.get("accumulatedTotalTokens"),
            cost_usd=update.get("accumulatedCost"),
        )

    def _permission_answer(self, params: Any) -> dict[str, Any]:
        if self._permission == "allow":
            options = params.get("options") if isinstance(params, dict) else None
            for kind in ("allow_once", "allow_always"):
                for option in options if isinstance(options, list) else []:
                    if isinstance(option, dict) and option.get("kind") == kind:
                        return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        return {"outcome": {"outcome": "cancelled"}}

    def _diagnostic(self, kind: str, session_id: str | None, payload: dict[str, Any]) -> None:
        if self._on_diagnostic is not None:
            self._on_diagnostic(kind, session_id, payload)


def _answered(turn: _Turn | None) -> bool:
    """No prompt runs, or the running one has its answer."""
    return turn is None or (turn.prompt is not None and turn.prompt.done())


def _describe(exc: BaseException) -> str:
    """A short reason for an error (never the prompt)."""
    if isinstance(exc, acp.RequestError):
        return f"JSON-RPC error {exc.code}: {exc}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ValidationError):
        return f"malformed response ({exc.error_count()} schema errors)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
