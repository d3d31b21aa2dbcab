"""The ACP edge: one agent subprocess driven over the Agent Client Protocol (docs/bot.md).

:class:`AgentDriver` spawns the configured agent command (stdio, JSON-RPC 2.0 through the
``agent-client-protocol`` package's low-level :class:`acp.connection.Connection`), initializes
it, opens sessions with the standing context delivered by the first strategy the agent
supports, runs turns (each compiled section one ``text`` block of ``session/prompt``), cancels
and steers them, and feeds what the agent reports about usage into the pure
:class:`~nostr_buzz.core.usage.UsageTracker`.

The low-level connection is used instead of ``ClientSideConnection`` because the driver must
put fields the v1 schema does not know on the wire (a top-level ``systemPrompt`` for protocol
≥ 2) and read extension notifications (goose's cumulative counters) raw.

Choices docs/bot.md leaves open:

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
* a ``usage_update`` cost in a currency other than USD is ignored (``costUsd`` is USD); its
  ``used``/``size`` are the context occupancy of the turn's last report;
* permission requests go to a policy (:data:`PermissionPolicy`); a request for a session with
  no running turn is rejected without asking it (real adapters send requests after a turn has
  ended).  Approval picks the ``allow_once`` option (else ``allow_always``), rejection the
  ``reject_once`` option (else the ``cancelled`` outcome).  Every decision is a
  ``permission_decision`` diagnostic with the tool's title and the reason (the policy's
  :class:`~nostr_buzz.core.permission.PermissionDecision` when it gives one);
* one prompt at a time per session, always: an agent's prompt queueing (claude-agent-acp
  advertises ``_meta.claudeCode.promptQueueing``) is never used, because a queued prompt ends
  the running one with ``end_turn`` and the usage then covers two prompts; a message that
  arrives mid-turn is steered natively or cancels and merges;
* agents that do not survive ``session/cancel`` (:attr:`AgentInfo.survives_cancel`: every
  claude agent) have a session retired after a cancelled or failed turn (claude-agent-acp
  answers every later prompt of such a session with the previous one's answer): it is never
  prompted again (:meth:`AgentDriver.usable` is false, ``session/close`` is sent when
  advertised) and the caller opens a fresh one.  Every agent's session is retired after a
  failed turn: codex-acp answers the prompt with the model's error while its own turn is
  still ending, and a prompt sent then joins that turn and is never answered.  For any
  agent, a turn that follows a
  cancelled one in the same session and ends within :data:`HOLLOW_WINDOW` seconds with no
  text, no tool call and no (or zero) usage is failed rather than settled, and its session
  retired too;
* text that a tool call separates from earlier text starts a new paragraph (a blank line);
  thoughts are never part of the reply;
* the agent runs in a process group of its own; closing it ends the whole group (launchers
  such as codex-acp's npm script neither forward SIGTERM nor make their child exit when its
  stdin closes).  Each start gives the agent a fresh token in ``BUZZ_AGENT_TOKEN`` and hands
  the group's id and that token to ``on_spawn`` before ``initialize``, so a bot killed outright
  can end the group on its next start (:mod:`nostr_buzz.io.agent_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Final, Literal

import acp
from acp import schema
from acp.connection import Connection
from acp.transports import default_environment
from pydantic import ValidationError

from nostr_buzz.core.compiler import standing_text
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.errors import AgentError, BuzzError
from nostr_buzz.io.agent_group import TOKEN_ENV, GroupRecord, new_token, wait_group_gone
from nostr_buzz.io.diagnostics import AgentDiagnosticKind
from nostr_buzz.io.filemodes import open_private
from nostr_buzz.io.run_as import launcher_argv
from nostr_buzz.nips.nip_am import StopReason

__all__ = [
    "AgentDriver",
    "AgentInfo",
    "DiagnosticCallback",
    "PermissionPolicy",
    "PermissionRequest",
    "SessionStart",
    "StandingStrategy",
    "SteerOutcome",
    "TurnResult",
    "standing_text",
]

StandingStrategy = Literal["goose", "claude_meta", "system_prompt", "legacy"]
SteerOutcome = Literal["injected", "started_new_turn", "failed", "released"]
Outcome = Literal["success", "cancelled", "failed"]
TerminalEvidence = Literal["prompt_response", "cancel_response", "agent_exit", "timeout", "error"]
#: ``on_diagnostic(kind, session_id, payload)``: driver-level observer records (no prompt text).
DiagnosticCallback = Callable[[AgentDiagnosticKind, str | None, dict[str, Any]], None]

METHOD_NOT_FOUND: Final = -32601
GOOSE_SYSTEM_PROMPT: Final = "_goose/unstable/session/system-prompt/set"
GOOSE_STEER: Final = "_goose/unstable/session/steer"
GOOSE_UPDATE: Final = "_goose/unstable/session/update"
SESSION_STEERING: Final = "_session/steering"
#: Lines from the agent may be large (embedded resources); the package's default is 64 KiB.
STDIO_LIMIT: Final = 50 * 1024 * 1024
#: A turn after a cancel that ends this fast with nothing to show is the agent's broken
#: session answering at once (claude-agent-acp), not an answer.
HOLLOW_WINDOW: Final = 2.0
#: The session modes, by advertised id, in which an adapter asks the client before a tool
#: runs (docs/acp-adapters.md, "Permission modes"): claude-agent-acp's and gemini-cli's
#: ``default``, codex-acp's ``read-only``.  Their defaults (``auto``, ``agent``) let the adapter
#: decide on its own.
ASKING_MODES: Final = ("default", "read-only")
#: How long ``session/close`` of a retired session may take before it is given up.
CLOSE_SESSION_TIMEOUT: Final = 5.0
_STOP_REASONS: Final[dict[str, StopReason]] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "cancelled": "cancelled",
}


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
    #: ``sessionCapabilities.systemPrompt``: the standard ``systemPrompt {mode, content}``.
    system_prompt_capability: bool = False
    #: ``sessionCapabilities.close``: ``session/close`` releases a session.
    session_close: bool = False

    @property
    def is_goose(self) -> bool:
        return (self.name or "").lower() == "goose"

    @property
    def is_claude(self) -> bool:
        return "claude" in (self.name or "").lower()

    @property
    def survives_cancel(self) -> bool:
        """Whether a session stays usable after ``session/cancel``.

        claude-agent-acp (0.23) does not: the next prompt ends at once with ``end_turn``,
        no text and zero usage, and every later answer belongs to the previous question.
        """
        return not self.is_claude


@dataclass(frozen=True)
class PermissionRequest:
    """A ``session/request_permission`` of the agent, as a policy sees it."""

    session_id: str
    title: str
    kind: str | None
    tool_call_id: str | None
    #: A turn of this session is running: its prompt is unanswered and not being cancelled
    #: (the policy is only asked when it is).
    turn_running: bool


#: ``policy(request) -> approve?`` (a decision also says why, for the diagnostic); called only
#: while a turn of the session runs.
PermissionPolicy = Callable[[PermissionRequest], bool | PermissionDecision]


def allow_during_turn(request: PermissionRequest) -> bool:
    """The default policy: approve what the running turn's agent asks."""
    return request.turn_running


def reject_always(request: PermissionRequest) -> bool:
    """Reject every request."""
    return False


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
    """How one ``session/prompt`` ended, in NIP-AM terms (docs/bot.md, "Driving an agent over
    ACP")."""

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
    #: The last ``usage_update`` ``used``/``size`` of the turn: context occupancy (tokens).
    context_used: int | None = None
    context_size: int | None = None
    #: The turn's position in its session (``usage.turn_seq`` when usage was observed; the
    #: next number of the same sequence when it was not).
    turn_seq: int | None = None


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
    tool_calls: int = 0
    paragraph_break: bool = False
    context_used: int | None = None
    context_size: int | None = None
    #: codex-acp 2.6 reported the model call failed (docs/acp-adapters.md, "Errors").
    system_error: bool = False

    def text(self, text: str, message_id: str | None) -> None:
        """One chunk of the agent's message; after a tool call it starts a paragraph."""
        if message_id is not None and message_id != self.message_id:
            self.message_id = message_id
            self.final = []
        if self.paragraph_break and text.strip():
            self.paragraph_break = False
            for part in (self.chunks, self.final):
                if "".join(part).strip():
                    part.append("\n\n")
        self.chunks.append(text)
        self.final.append(text)

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


@contextlib.asynccontextmanager
async def _spawn_group(
    handler: Any,
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None,
    stderr: int,
    shutdown_timeout: float,
) -> AsyncIterator[tuple[Connection, asyncio.subprocess.Process]]:
    """The agent in a new session and process group (its pid is the group id), with a
    JSON-RPC connection on its stdio; on exit the whole group is ended (:func:`_end_group`).

    The environment is the package's trimmed base (HOME, LOGNAME, PATH, SHELL, TERM, USER)
    plus ``env``."""
    merged = default_environment()
    merged.update(env)
    process = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=merged,
        cwd=str(cwd) if cwd is not None else None,
        limit=STDIO_LIMIT,
        start_new_session=True,
    )
    try:
        if process.stdin is None or process.stdout is None:  # pragma: no cover - PIPE given
            raise OSError("the agent's stdio could not be opened")
        conn = Connection(handler, process.stdin, process.stdout)
        try:
            yield conn, process
        finally:
            with contextlib.suppress(Exception):
                await conn.close()
    finally:
        await _end_group(process, shutdown_timeout)


async def _exited(process: asyncio.subprocess.Process, within: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), within)
    return process.returncode is not None


async def _end_group(process: asyncio.subprocess.Process, grace: float) -> None:
    """Close the agent's stdin (the ACP way to ask it to leave), give it ``grace`` seconds,
    then SIGTERM its group, ``grace`` more, then SIGKILL; finally SIGKILL whatever is left of
    the group (children that outlived the leader, or that ignore both EOF and SIGTERM)."""
    stdin = process.stdin
    if stdin is not None:
        with contextlib.suppress(Exception):
            stdin.close()
        with contextlib.suppress(Exception):
            await stdin.wait_closed()
    if not await _exited(process, grace):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, grace):
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()
    _kill_group(process.pid)
    await wait_group_gone(process.pid, grace)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in the agent's group (none: nothing happens)."""
    _signal_group(pgid, signal.SIGKILL)


class AgentDriver:
    """One ACP agent subprocess; see the module docstring.

    ``env_names`` are copied from this process's environment at start (absent ones skipped);
    ``env`` gives explicit values.  Nothing else of the environment reaches the agent beyond
    the package's trimmed base (HOME, LOGNAME, PATH, SHELL, TERM, USER).  The agent's stderr
    goes to ``log_path`` (appended) or is discarded, never to a pipe that could fill up.
    ``BUZZ_PRIVATE_KEY`` never reaches the agent, whatever is asked.  ``user``: run the agent as
    that OS user (see :mod:`nostr_buzz.io.run_as`), so it cannot read the bot's key or state.
    ``on_spawn`` gets each new agent's process group record right after the spawn; a
    :class:`BuzzError` from it stops the agent and fails the start.
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
        permission: Literal["allow", "reject"] | PermissionPolicy = "allow",
        usage: UsageTracker | None = None,
        on_diagnostic: DiagnosticCallback | None = None,
        clock: Callable[[], datetime] = _utc_now,
        user: str | None = None,
        on_spawn: Callable[[GroupRecord], None] | None = None,
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
        self.permission_policy: PermissionPolicy = (
            allow_during_turn
            if permission == "allow"
            else reject_always
            if permission == "reject"
            else permission
        )
        self.usage = usage if usage is not None else UsageTracker()
        self._on_diagnostic = on_diagnostic
        self._clock = clock
        self._on_spawn = on_spawn
        self._stack: AsyncExitStack | None = None
        self._conn: Connection | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self._info: AgentInfo | None = None
        self._turns: dict[str, _Turn] = {}
        #: Turns the agent may start (or started) on its own after a steer: see follow_turn.
        self._follows: dict[str, _Turn] = {}
        self._run_ids: dict[str, str] = {}
        self._cancelled: set[str] = set()  # sessions whose last turn got session/cancel
        self._retired: set[str] = set()  # sessions never to be prompted again
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
        """The spawn's argv; with ``user``, the launcher's: it enters ``cwd`` itself once it has
        dropped to that user, so the spawn happens in ``/`` (see :mod:`nostr_buzz.io.run_as`)."""
        if self.user is None:
            return [self.command, *self.args]
        cwd = str(self._cwd) if self._cwd is not None else None
        program, launcher_args = launcher_argv(self.user, self.command, self.args, cwd)
        return [program, *launcher_args]

    async def start(self) -> AgentInfo:
        """Spawn the agent and ``initialize`` it; raises :class:`AgentError` on failure."""
        if self._stack is not None:
            raise AgentError("the agent is already started: close() or restart() it first")
        program, *arguments = self._argv()  # first: a refused launcher spawns nothing
        stack = AsyncExitStack()
        stderr: int = subprocess.DEVNULL
        if self._log_path is not None:
            self._log = stack.enter_context(open_private(self._log_path))  # 0600, no symlink
            stderr = self._log.fileno()
        token = new_token()
        try:
            conn, process = await stack.enter_async_context(
                _spawn_group(
                    self._handle,
                    program,
                    arguments,
                    env={**self._child_env(), TOKEN_ENV: token},
                    cwd=self._cwd if self.user is None else "/",
                    stderr=stderr,
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
        if self._on_spawn is not None:
            try:
                self._on_spawn(GroupRecord(pgid=process.pid, token=token))
            except BuzzError as exc:
                await self.close()
                raise AgentError(f"the agent was stopped: {exc}") from None
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
        raw_caps = raw.get("agentCapabilities") if isinstance(raw, dict) else None
        session_caps = raw_caps.get("sessionCapabilities") if isinstance(raw_caps, dict) else None
        if not isinstance(session_caps, dict):
            session_caps = {}
        self._info = AgentInfo(
            protocol_version=response.protocol_version,
            name=response.agent_info.name if response.agent_info else None,
            version=response.agent_info.version if response.agent_info else None,
            capabilities=caps.model_dump(mode="json", by_alias=True) if caps else {},
            steering_supported=_flag(meta, "steering", "supported"),
            system_prompt_append=_flag(meta, "systemPrompt", "append"),
            pid=process.pid,
            system_prompt_capability=isinstance(session_caps.get("systemPrompt"), dict),
            session_close=isinstance(session_caps.get("close"), dict),
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
        self._cancelled.clear()
        self._retired.clear()
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
        """``session/new`` with the standing context, by the first strategy the agent supports:
        goose's ``system-prompt/set``; the standard ``systemPrompt {mode: "append", content}``
        when the agent advertises ``sessionCapabilities.systemPrompt``; claude's
        ``_meta.systemPrompt.append``; a top-level ``systemPrompt`` for protocol ≥ 2; else
        legacy (the caller compiles the standing sections, ``<workspace>`` first, into the first
        turn).

        ``standing`` is the system-role text the compiler rendered (see :func:`standing_text`);
        the driver sends it as given.  Raises
        :class:`AgentError` when the agent refuses the session.
        """
        info = self.info
        strategy: StandingStrategy
        extra: dict[str, Any] = {}
        if info.is_goose:
            strategy = "goose"
        elif info.system_prompt_capability:
            strategy = "system_prompt"
            if standing:
                content = [{"type": "text", "text": standing}]
                extra["systemPrompt"] = {"mode": "append", "content": content}
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
        mode = await self._asking_mode(session_id, raw)
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
        started: dict[str, Any] = {"standingStrategy": strategy}
        if mode is not None:  # docs/acp-adapters.md, "Permission modes"
            started["permissionMode"] = mode
        self._diagnostic("session_started", session_id, started)
        return SessionStart(session_id=session_id, strategy=strategy)

    async def _asking_mode(self, session_id: str, raw: object) -> str | None:
        """Put the session in the advertised mode of :data:`ASKING_MODES`, so that every tool
        permission is asked of the client (docs/acp-adapters.md, "Permission modes"); the
        session's mode, None when the agent advertises none.  An agent that advertises modes
        but no asking one, or refuses it, gets no session: its own defaults decide for it."""
        modes = raw.get("modes") if isinstance(raw, dict) else None
        if not isinstance(modes, dict):
            return None
        current = modes.get("currentModeId")
        offered = modes.get("availableModes")
        ids = (
            [m.get("id") for m in offered if isinstance(m, dict)]
            if isinstance(offered, list)
            else []
        )
        wanted = next((m for m in ASKING_MODES if m in ids), None)
        if wanted is None:
            raise AgentError(
                f"the agent offers no mode that asks before running tools (modes {ids}): "
                "the bot's permission policy could not hold"
            )
        if current != wanted:
            try:
                await self._request("session/set_mode", {"sessionId": session_id, "modeId": wanted})
            except (acp.RequestError, ConnectionError, OSError, TimeoutError) as exc:
                raise AgentError(
                    f"the agent refused the session mode {wanted!r}: {_describe(exc)}"
                ) from None
        return wanted

    # -- turns ----------------------------------------------------------------------------

    def usable(self, session_id: str) -> bool:
        """False for a session retired after a cancel (see the module docstring): the
        caller must open a fresh session (with the standing context) for its next turn."""
        return session_id not in self._retired

    async def _retire(self, session_id: str) -> None:
        """Never prompt this session again; ``session/close`` it when the agent can."""
        if session_id in self._retired:
            return
        self._retired.add(session_id)
        self._diagnostic("session_retired", session_id, {})
        info = self._info
        if info is not None and info.session_close and self.alive:
            with contextlib.suppress(acp.RequestError, ConnectionError, OSError, TimeoutError):
                await asyncio.wait_for(
                    self._request("session/close", {"sessionId": session_id}),
                    CLOSE_SESSION_TIMEOUT,
                )

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
        if session_id in self._retired:
            raise AgentError(
                f"session {session_id!r} was retired after a cancelled or failed turn: "
                "open a new session"
            )
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
        blocks = [{"type": "text", "text": s} for s in sections]
        params = {"sessionId": session_id, "prompt": blocks}
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
            turn.cancel_deadline = turn.cancel_deadline or loop.time()
        ended = turn.ended_usage  # set when the agent's own next turn began meanwhile
        usage = ended[0] if ended is not None else self.usage.end_turn(self._usage_key(session_id))
        turn_seq = (
            usage.turn_seq
            if usage is not None
            else self.usage.unknown_turn(self._usage_key(session_id))
        )
        if self._hollow(session_id, turn, ending, usage, loop.time() - now):
            ending = _Ending(
                "error",
                "failed",
                "error",
                native=ending.native,
                error=(
                    "the agent ended the turn at once with no text and no usage after a "
                    "cancel: its session did not survive the cancel"
                ),
            )
            await self._retire(session_id)
        else:
            if turn.cancel_deadline is not None:
                self._cancelled.add(session_id)
            else:
                self._cancelled.discard(session_id)
            info = self._info
            troubled = turn.cancel_deadline is not None or ending.outcome != "success"
            if ending.outcome == "failed" or (
                troubled and info is not None and not info.survives_cancel
            ):
                await self._retire(session_id)
        result = self._result(turn, ending, usage, turn_seq)
        if ending.evidence == "agent_exit":
            await self._reap()
        return result

    def _hollow(
        self,
        session_id: str,
        turn: _Turn,
        ending: _Ending,
        usage: UsageRecord | None,
        seconds: float,
    ) -> bool:
        """A turn after a cancel that the agent ended at once with nothing at all."""
        if session_id not in self._cancelled or turn.cancel_deadline is not None:
            return False
        if ending.outcome != "success" or seconds > HOLLOW_WINDOW:
            return False
        if "".join(turn.chunks).strip() or turn.tool_calls:
            return False
        counts = usage.turn if usage is not None else None
        if counts is None:
            return True
        spent = (counts.input_tokens, counts.output_tokens, counts.total_tokens)
        return not any(spent) and not counts.cost_usd

    async def _reap(self) -> None:
        """The connection is gone: wait (bounded) for the exit status, then report it."""
        process = self._process
        if process is None or self._lost:
            return
        self._lost = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self._shutdown_timeout)
        _kill_group(process.pid)  # what the dead agent left behind in its group
        await wait_group_gone(process.pid, self._shutdown_timeout)
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
        if usage is None:  # gemini-cli (docs/acp-adapters.md, "Usage")
            usage = _gemini_usage(raw.get("_meta"))
        if usage is not None:
            try:
                parsed = schema.Usage.model_validate(usage)
            except ValidationError:
                parsed = None  # malformed usage is not observed (docs/metrics.md: absent)
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
        if turn.system_error and not cancelling:  # the reply is the provider's error body
            error = "".join(turn.final).strip() or "the agent reported a system error"
            return _Ending("error", "failed", "error", native=native, error=error)
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
        """(method, is goose) of the native steer transport, or None (docs/bot.md, "Steering")."""
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
            turn.hard_deadline = now + self.hard_timeout  # docs/bot.md: renewed on injection
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
        usage = self.usage.end_turn(key)
        turn_seq = usage.turn_seq if usage is not None else self.usage.unknown_turn(key)
        if self._conn is not None:  # the harness stopped waiting
            return self._result(follow, _Ending("unknown", "success", "timeout"), usage, turn_seq)
        return self._result(follow, _Ending("error", "failed", "agent_exit"), usage, turn_seq)

    def _result(
        self, turn: _Turn, ending: _Ending, usage: UsageRecord | None, turn_seq: int
    ) -> TurnResult:
        """What a turn leaves: its text, usage and how it ended."""
        return TurnResult(
            reply="".join(turn.chunks),
            final_message="".join(turn.final),
            usage=usage,
            stop_reason=ending.stop_reason,
            outcome=ending.outcome,
            terminal_evidence=ending.evidence,
            native_stop_reason=ending.native,
            adapter_session_id=turn.session_id,
            run_id=turn.run_id,
            started_at=turn.started_at,
            ended_at=self._clock(),
            error=ending.error,
            context_used=turn.context_used,
            context_size=turn.context_size,
            turn_seq=turn_seq,
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
                turn.text(update.content.text, update.message_id)
        elif isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
            if turn is not None:
                turn.tool_calls += 1
                turn.paragraph_break = True
        elif isinstance(update, schema.UsageUpdate):
            cost = update.cost
            if cost is not None and cost.currency.upper() == "USD":
                self.usage.observe_cost(self._usage_key(session_id), cost.amount)
            if turn is not None:
                turn.context_used, turn.context_size = update.used, update.size
        elif isinstance(update, schema.SessionInfoUpdate):
            if turn is not None and _codex_system_error(update.field_meta):
                turn.system_error = True
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
        """Ask the policy (only while a turn of the session runs), answer, and report."""
        params = params if isinstance(params, dict) else {}
        session_id = params.get("sessionId")
        session_id = session_id if isinstance(session_id, str) else ""
        tool = params.get("toolCall")
        tool = tool if isinstance(tool, dict) else {}
        # Running: the prompt is unanswered (the agent may ask after its answer, which the
        # connection has already resolved) and not being cancelled.
        turn = self._turns.get(session_id)
        running = (
            turn is not None
            and turn.prompt is not None
            and not turn.prompt.done()
            and turn.cancel_deadline is None
        )
        title, kind, call_id = tool.get("title"), tool.get("kind"), tool.get("toolCallId")
        request = PermissionRequest(
            session_id=session_id,
            title=title if isinstance(title, str) else "",
            kind=kind if isinstance(kind, str) else None,
            tool_call_id=call_id if isinstance(call_id, str) else None,
            turn_running=running,
        )
        approve, why = False, {"reason": "no_live_turn"}
        if request.turn_running:
            try:
                verdict = self.permission_policy(request)
            except Exception as exc:  # a broken policy rejects, it never approves
                self._diagnostic("permission_policy_failed", session_id, {"error": repr(exc)})
                why = {"reason": "policy_failed"}
            else:
                if isinstance(verdict, PermissionDecision):
                    approve, why = verdict.approve, verdict.payload()
                else:
                    approve, why = verdict is True, {"reason": "policy"}
        options = params.get("options")
        wanted = ("allow_once", "allow_always") if approve else ("reject_once", "reject_always")
        answer: dict[str, Any] = {"outcome": "cancelled"}
        for option_kind in wanted:
            option = next(
                (
                    o
                    for o in (options if isinstance(options, list) else [])
                    if isinstance(o, dict)
                    and o.get("kind") == option_kind
                    and isinstance(o.get("optionId"), str)
                ),
                None,
            )
            if option is not None:
                answer = {"outcome": "selected", "optionId": option["optionId"]}
                break
        decision = "approved" if approve and answer["outcome"] == "selected" else "rejected"
        if approve and decision == "rejected":
            why = {"reason": "no_allow_option"}
        self._diagnostic(
            "permission_decision",
            session_id or None,
            {
                "decision": decision,
                "title": request.title,
                "toolKind": request.kind,
                "turnRunning": request.turn_running,
                **why,
            },
        )
        return {"outcome": answer}

    def _diagnostic(
        self, kind: AgentDiagnosticKind, session_id: str | None, payload: dict[str, Any]
    ) -> None:
        if self._on_diagnostic is not None:
            self._on_diagnostic(kind, session_id, payload)


def _codex_system_error(meta: Mapping[str, Any] | None) -> bool:
    """codex-acp's ``_meta.codex.threadStatus.type == "systemError"``: the model call failed
    and the turn's text is the error, not an answer (docs/acp-adapters.md, "Errors")."""
    codex = meta.get("codex") if meta else None
    status = codex.get("threadStatus") if isinstance(codex, dict) else None
    return isinstance(status, dict) and status.get("type") == "systemError"


def _gemini_usage(meta: object) -> dict[str, int] | None:
    """gemini-cli's ``_meta.quota.token_count`` as ACP ``usage`` (docs/acp-adapters.md,
    "Usage"): its input is the prompt's whole token count, cache included."""
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    tokens = [count.get("input_tokens"), count.get("output_tokens")]
    numbers = [n for n in tokens if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if len(numbers) != 2:
        return None
    return {"inputTokens": numbers[0], "outputTokens": numbers[1], "totalTokens": sum(numbers)}


def _answered(turn: _Turn | None) -> bool:
    """No prompt runs, or the running one has its answer."""
    return turn is None or (turn.prompt is not None and turn.prompt.done())


def _describe(exc: BaseException) -> str:
    """A short reason for an error (never the prompt)."""
    if isinstance(exc, acp.RequestError):
        # Real agents put the useful text in ``data.message`` (or ``data`` itself) of a
        # −32603 whose ``message`` is only "Internal error".
        data = exc.data
        detail = data.get("message") if isinstance(data, dict) else data
        if not isinstance(detail, str) and isinstance(data, dict):
            detail = data.get("details")
        text = str(exc)
        if isinstance(detail, str) and detail.strip() and detail.strip() not in text:
            text = f"{text}: {detail.strip()}" if text else detail.strip()
        return f"JSON-RPC error {exc.code}: {text}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ValidationError):
        return f"malformed response ({exc.error_count()} schema errors)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
