"""The ACP edge's I/O: one agent subprocess driven over the Agent Client Protocol (docs/bot.md).

:class:`AgentDriver` spawns the configured agent command in a process group of its own
(:func:`nostr_buzz.io.agent_group.spawn_group`; JSON-RPC 2.0 through the
``agent-client-protocol`` package's low-level :class:`acp.connection.Connection`), initializes
it, opens sessions with the standing context delivered by the first strategy the agent
supports, runs turns (each compiled section one ``text`` block of ``session/prompt``), cancels
and steers them, and feeds what the agent reports about usage into the pure
:class:`~nostr_buzz.core.usage.UsageTracker`.

What the driver decides lives in the sans-I/O package :mod:`nostr_buzz.acp`: the frames
(:mod:`~nostr_buzz.acp.wire`), the adapters' differences (:mod:`~nostr_buzz.acp.profiles`,
docs/acp-adapters.md) and each session's state machine (:mod:`~nostr_buzz.acp.state`: how a
turn ends, the hollow-turn rule, retirement, steers and turns the agent starts on its own).
This module only moves bytes, keeps time and calls back.

Choices docs/bot.md leaves open:

* the claude strategy is chosen for agents named ``claude…`` *and* for agents whose initialize
  result advertises ``_meta.systemPrompt.append = true`` (as the bundled demo agent does);
* any error of goose's ``system-prompt/set``, not only −32601, falls back to legacy delivery,
  so the standing context is never lost;
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
  ended).  Every decision is a ``permission_decision`` diagnostic with the tool's title and
  the reason (the policy's :class:`~nostr_buzz.core.permission.PermissionDecision` when it
  gives one);
* one prompt at a time per session, always: an agent's prompt queueing is never used
  (docs/acp-adapters.md, "Prompt queueing is not used");
* the agent runs in a process group of its own; closing it ends the whole group.  Each start
  gives the agent a fresh token in ``BUZZ_AGENT_TOKEN`` and hands the group's id and that
  token to ``on_spawn`` before ``initialize``, so a bot killed outright can end the group on
  its next start (:mod:`nostr_buzz.io.agent_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Final, Literal

from acp.connection import Connection
from acp.exceptions import RequestError
from pydantic import ValidationError

from nostr_buzz.acp import wire
from nostr_buzz.acp.facts import (
    AgentFact,
    AgentGone,
    CancelAsked,
    Cost,
    CumulativeUsage,
    Fact,
    PromptFailed,
    PromptSent,
    SteerAnswered,
    SteerSent,
    Tick,
)
from nostr_buzz.acp.profiles import (
    GENERIC,
    GOOSE_SYSTEM_PROMPT,
    GOOSE_UPDATE,
    SESSION_STEERING,
    AdapterProfile,
    choose_strategy,
    profile_for,
)
from nostr_buzz.acp.state import (
    Action,
    Count,
    Phase,
    Progress,
    Retire,
    SendCancel,
    Session,
    SplitUsage,
    Timeouts,
)
from nostr_buzz.acp.types import (
    AgentInfo,
    Ending,
    PermissionRequest,
    SessionStart,
    SteerOutcome,
    TurnResult,
)
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.errors import AgentError, BuzzError
from nostr_buzz.io.acp_driver import workspace_section
from nostr_buzz.io.agent_group import (
    TOKEN_ENV,
    GroupRecord,
    kill_group,
    new_token,
    spawn_group,
    wait_group_gone,
)
from nostr_buzz.io.diagnostics import AgentDiagnosticKind
from nostr_buzz.io.filemodes import open_private
from nostr_buzz.io.run_as import launcher_argv

__all__ = [
    "AgentDriver",
    "DiagnosticCallback",
    "PermissionPolicy",
    "allow_during_turn",
    "reject_always",
]

#: ``on_diagnostic(kind, session_id, payload)``: driver-level observer records (no prompt text).
DiagnosticCallback = Callable[[AgentDiagnosticKind, str | None, dict[str, Any]], None]
#: ``policy(request) -> approve?`` (a decision also says why, for the diagnostic); called only
#: while a turn of the session runs.
PermissionPolicy = Callable[[PermissionRequest], bool | PermissionDecision]
#: How long ``session/close`` of a retired session may take before it is given up.
CLOSE_SESSION_TIMEOUT: Final = 5.0
_WIRE_ERRORS: Final = (RequestError, ConnectionError, OSError, TimeoutError, ValidationError)


def allow_during_turn(request: PermissionRequest) -> bool:
    """The default policy: approve what the running turn's agent asks."""
    return request.turn_running


def reject_always(request: PermissionRequest) -> bool:
    """Reject every request."""
    return False


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _client_version() -> str:
    try:
        return metadata.version("nostr-buzz")
    except metadata.PackageNotFoundError:
        return "0"


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
        self.timeouts = Timeouts(idle_timeout, hard_timeout, cancel_grace)
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
        self.profile: AdapterProfile = GENERIC
        self._sessions: dict[str, Session] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self._prompts: dict[str, asyncio.Future[Any]] = {}
        self._on_update: dict[str, Callable[[str], None]] = {}
        self._split: dict[str, UsageRecord | None] = {}  # a prompt's usage its own turn ended
        self._own_started: dict[str, datetime] = {}
        self._legacy_first: dict[str, str] = {}  # legacy sessions: <workspace> for turn 1
        self._lost = False  # the connection ended (agent exit) before close()
        self._generation = 0  # one per agent process: see _usage_key

    @property
    def idle_timeout(self) -> float:
        return self.timeouts.idle

    @property
    def hard_timeout(self) -> float:
        return self.timeouts.hard

    @property
    def cancel_grace(self) -> float:
        return self.timeouts.cancel_grace

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

    async def _spawn(self) -> None:
        program, *arguments = self._argv()  # first: a refused launcher spawns nothing
        stack = AsyncExitStack()
        stderr: int = subprocess.DEVNULL
        if self._log_path is not None:
            self._log = stack.enter_context(open_private(self._log_path))  # 0600, no symlink
            stderr = self._log.fileno()
        token = new_token()
        try:
            conn, process = await stack.enter_async_context(
                spawn_group(
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

    async def start(self) -> AgentInfo:
        """Spawn the agent and ``initialize`` it; raises :class:`AgentError` on failure."""
        if self._stack is not None:
            raise AgentError("the agent is already started: close() or restart() it first")
        await self._spawn()
        assert self._process is not None
        try:
            raw = await self._request("initialize", wire.initialize_params(_client_version()))
            info = wire.agent_info(raw, self._process.pid)
        except _WIRE_ERRORS as exc:
            await self.close()
            raise AgentError(
                f"the agent {self.command!r} failed to initialize: {wire.describe(exc)}"
            ) from None
        self._info, self.profile = info, profile_for(info.name)
        self._diagnostic(
            "agent_started",
            None,
            {
                "agentName": info.name,
                "protocolVersion": info.protocol_version,
                "steeringSupported": info.steering_supported,
                "pid": info.pid,
            },
        )
        return info

    async def close(self) -> None:
        """Stop the agent: close its stdin, then terminate and kill it if it lingers.

        Turns still running end as ``agent_exit``.  Safe to call more than once.
        """
        stack, self._stack = self._stack, None
        self._conn = None
        process, self._process = self._process, None
        self._info = None
        for session_id, session in self._sessions.items():
            self._feed(session_id, session, AgentGone("the agent was closed"))
        self._sessions.clear()
        self._legacy_first.clear()
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

    async def _reap(self) -> None:
        """The connection is gone: wait (bounded) for the exit status, then report it."""
        process = self._process
        if process is None or self._lost:
            return
        self._lost = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self._shutdown_timeout)
        kill_group(process.pid)  # what the dead agent left behind in its group
        await wait_group_gone(process.pid, self._shutdown_timeout)
        self._diagnostic("agent_exited", None, {"returncode": process.returncode})

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, cwd: str, standing: str = "") -> SessionStart:
        """``session/new`` with the standing context, by the first strategy the agent supports
        (:func:`~nostr_buzz.acp.profiles.choose_strategy`); legacy delivery leaves it to the
        caller, which compiles the standing sections into the first turn (the driver puts
        ``<workspace>`` before them).

        ``standing`` is the system-role text (see :func:`standing_text`).  Raises
        :class:`AgentError` when the agent refuses the session.
        """
        info = self.info
        strategy = choose_strategy(self.profile, info)
        try:
            params = wire.new_session_params(cwd, standing, strategy, info)
            session_id = wire.session_id_of(await self._request("session/new", params))
        except _WIRE_ERRORS as exc:
            raise AgentError(f"the agent refused a new session: {wire.describe(exc)}") from None
        if strategy == "goose" and standing:
            try:
                params = wire.goose_system_prompt_params(session_id, standing)
                await self._request(GOOSE_SYSTEM_PROMPT, params)
            except (RequestError, ConnectionError, OSError, TimeoutError):
                strategy = "legacy"  # −32601 (or any failure): the first turn carries it
        workspace = workspace_section(self._cwd)
        if strategy == "legacy" and workspace is not None:
            self._legacy_first[session_id] = workspace
        self._session(session_id)
        self.usage.session_started(self._usage_key(session_id))  # ours: zero baseline
        self._diagnostic("session_started", session_id, {"standingStrategy": strategy})
        return SessionStart(session_id=session_id, strategy=strategy)

    def _session(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = Session(self.profile, self.timeouts)
            self._wakes[session_id] = asyncio.Event()
        return session

    def usable(self, session_id: str) -> bool:
        """False for a session retired after a cancel (see the module docstring): the
        caller must open a fresh session (with the standing context) for its next turn."""
        session = self._sessions.get(session_id)
        return session is None or session.usable

    async def _retire(self, session_id: str) -> None:
        """Never prompt this session again; ``session/close`` it when the agent can."""
        self._diagnostic("session_retired", session_id, {})
        info = self._info
        if info is not None and info.session_close and self.alive:
            with contextlib.suppress(RequestError, ConnectionError, OSError, TimeoutError):
                await asyncio.wait_for(
                    self._request("session/close", {"sessionId": session_id}),
                    CLOSE_SESSION_TIMEOUT,
                )

    def _usage_key(self, session_id: str) -> str:
        """The usage tracker's key of a session of the current agent process.

        Agents may reuse session ids across processes (the demo agent numbers them from 1): a
        restarted agent's session must start from a zero baseline and ``turn_seq`` 1, never
        continue the dead process's counters.
        """
        return f"{self._generation}:{session_id}"

    # -- feeding the state machine --------------------------------------------------------

    def _feed(self, session_id: str, session: Session, fact: Fact) -> list[Action]:
        """Give ``fact`` to the session, do what can be done at once, return the rest."""
        now = asyncio.get_running_loop().time()
        later: list[Action] = []
        for action in session.receive(fact, now):
            if isinstance(action, Count):
                self._count(session_id, action.fact)
            elif isinstance(action, Progress):
                callback = self._on_update.get(session_id)
                if callback is not None:
                    callback(action.kind)
            elif isinstance(action, SplitUsage):
                key = self._usage_key(session_id)
                if action.close_prompt:
                    self._split[session_id] = self.usage.end_turn(key)
                self.usage.begin_turn(key)
            else:
                later.append(action)
        wake = self._wakes.get(session_id)
        if wake is not None:
            wake.set()
        return later

    async def _perform(self, session_id: str, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, SendCancel):
                await self._notify("session/cancel", {"sessionId": session_id})
            elif isinstance(action, Retire):
                await self._retire(session_id)

    def _count(self, session_id: str, fact: Any) -> None:
        key = self._usage_key(session_id)
        if isinstance(fact, Cost):
            self.usage.observe_cost(key, fact.usd)
        elif isinstance(fact, CumulativeUsage):
            self.usage.observe_cumulative(
                key,
                input_tokens=fact.input_tokens,
                output_tokens=fact.output_tokens,
                cache_read_tokens=fact.cache_read_tokens,
                cache_write_tokens=fact.cache_write_tokens,
                total_tokens=fact.total_tokens,
                cost_usd=fact.cost_usd,
            )
        else:
            self.usage.observe_turn(
                key,
                input_tokens=fact.input_tokens,
                output_tokens=fact.output_tokens,
                total_tokens=fact.total_tokens,
                cached_read_tokens=fact.cached_read_tokens,
                cached_write_tokens=fact.cached_write_tokens,
            )

    # -- turns ----------------------------------------------------------------------------

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
        session = self._session(session_id)
        if session.phase == Phase.RETIRED:
            raise AgentError(
                f"session {session_id!r} was retired after a cancelled or failed turn: "
                "open a new session"
            )
        if session.phase != Phase.IDLE or session.own_phase == "running":
            raise AgentError(f"a prompt is already running in session {session_id!r}")
        started_at = self._clock()
        self._feed(session_id, session, PromptSent())
        record = session.turn
        assert record is not None
        key = self._usage_key(session_id)
        self.usage.begin_turn(key)
        workspace = self._legacy_first.pop(session_id, None)
        params = wire.prompt_params(session_id, [*([workspace] if workspace else []), *sections])
        if on_update is not None:
            self._on_update[session_id] = on_update
        prompt = asyncio.ensure_future(conn.send_request("session/prompt", params))
        self._prompts[session_id] = prompt
        prompt.add_done_callback(lambda done: self._answered(session_id, session, done))
        try:
            await self._wait(session_id, session)
        finally:
            if not prompt.done():
                prompt.cancel()
            with contextlib.suppress(BaseException):
                await prompt
            self._prompts.pop(session_id, None)
            self._on_update.pop(session_id, None)
        split = self._split.pop(session_id, ...)
        usage = self.usage.end_turn(key) if split is ... else split
        turn_seq = usage.turn_seq if usage is not None else self.usage.unknown_turn(key)
        ending, actions = session.settle(usage, asyncio.get_running_loop().time())
        await self._perform(session_id, actions)
        result = record.result(
            ending,
            usage,
            turn_seq,
            session_id=session_id,
            started_at=started_at,
            ended_at=self._clock(),
        )
        if ending.evidence == "agent_exit":
            await self._reap()
        return result

    def _answered(self, session_id: str, session: Session, prompt: asyncio.Future[Any]) -> None:
        """The prompt's answer, read as soon as it arrives (before any later update)."""
        if prompt.cancelled():
            return
        exc = prompt.exception()
        if exc is None:
            answered, usage = wire.prompt_response(prompt.result())
            if usage is not None:
                self._feed(session_id, session, usage)
            self._feed(session_id, session, answered)
        elif isinstance(exc, ConnectionError | OSError):
            self._feed(session_id, session, AgentGone(wire.describe(exc)))
        else:
            self._feed(session_id, session, PromptFailed(wire.describe(exc)))

    async def _wait(self, session_id: str, session: Session) -> None:
        """Until the prompt has ended: its answer, a timeout, or the agent's exit."""
        loop = asyncio.get_running_loop()
        wake = self._wakes[session_id]
        while session.phase in (Phase.PROMPTING, Phase.CANCELLING):
            if self._conn is None:
                self._feed(session_id, session, AgentGone("the agent was closed"))
                return
            await self._perform(session_id, self._feed(session_id, session, Tick()))
            at = session.deadline()
            if at is None:
                return
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.0, at - loop.time()))

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``; the running turn then ends on the agent's answer (or after
        ``cancel_grace`` without one)."""
        session = self._sessions.get(session_id)
        if session is None:
            await self._notify("session/cancel", {"sessionId": session_id})
            return
        await self._perform(session_id, self._feed(session_id, session, CancelAsked()))

    # -- steering -------------------------------------------------------------------------

    def _steer_route(self, session_id: str) -> tuple[str, str | None] | None:
        """(method, run id) of the native steer transport, or None (docs/bot.md, "Steering")."""
        if self._info is None:
            return None
        session = self._sessions.get(session_id)
        run_id = session.run_id if session is not None else None
        if self.profile.run_id_steer is not None and run_id is not None:
            return self.profile.run_id_steer, run_id
        if self._info.steering_supported:
            return SESSION_STEERING, None
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
        method, run_id = route
        session = self._session(session_id)
        if session.steering and session.turn is not None:
            return "released"
        started = self._clock()
        # Sent before the answer: the agent may start writing a turn of its own at once.
        self._feed(session_id, session, SteerSent())
        self._own_started.setdefault(session_id, started)
        outcome: SteerOutcome
        try:
            raw = await self._request(method, wire.steer_params(session_id, text, run_id))
        except RequestError as exc:
            outcome = wire.steer_error(exc.code)
        except (ConnectionError, OSError, TimeoutError):
            outcome = "failed"
        else:
            outcome = wire.steer_answer(raw, any_success=run_id is not None)
        self._feed(session_id, session, SteerAnswered(outcome))
        if session.own is None:
            self._own_started.pop(session_id, None)
        self._diagnostic("steer_sent", session_id, {"method": method, "result": outcome})
        return outcome

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
        session = self._sessions.get(session_id)
        record = session.begin_own() if session is not None else None
        if session is None or record is None:
            return None
        started_at = self._own_started.pop(session_id, None) or self._clock()
        key = self._usage_key(session_id)
        self.usage.begin_turn(key)  # a no-op when its first update already began it
        loop, wake = asyncio.get_running_loop(), self._wakes[session_id]
        try:
            while self._conn is not None:
                limit = quiet if record.heard else min(self.timeouts.idle, silence)
                deadline = min(record.last_activity + limit, record.hard_deadline)
                if loop.time() >= deadline:
                    break
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), deadline - loop.time())
                record.heard = record.heard or bool(record.chunks)
        finally:
            session.end_own()
        usage = self.usage.end_turn(key)
        turn_seq = usage.turn_seq if usage is not None else self.usage.unknown_turn(key)
        if self._conn is not None:  # the harness stopped waiting
            ending = Ending("unknown", "success", "timeout")
        else:
            ending = Ending("error", "failed", "agent_exit")
        return record.result(
            ending,
            usage,
            turn_seq,
            session_id=session_id,
            started_at=started_at,
            ended_at=self._clock(),
        )

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
            self._agent_facts(params, wire.session_update_facts(params))
            return None
        if method == GOOSE_UPDATE:
            self._agent_facts(params, wire.goose_update_facts(params))
            return None
        if is_notification:
            return None
        if method == "session/request_permission":
            return self._permission_answer(params)
        raise RequestError.method_not_found(method)

    def _agent_facts(self, params: Any, facts: Sequence[AgentFact]) -> None:
        session_id = wire.session_of(params)
        if session_id is None:
            return
        session = self._sessions.get(session_id)
        if session is None:  # not a session of ours: its usage is still counted
            for fact in facts:
                if isinstance(fact, Cost | CumulativeUsage):
                    self._count(session_id, fact)
            return
        for fact in facts:
            self._feed(session_id, session, fact)

    def _permission_answer(self, params: Any) -> dict[str, Any]:
        """Ask the policy (only while a turn of the session runs), answer, and report."""
        session_id = wire.session_of(params) or ""
        session = self._sessions.get(session_id)
        prompt = self._prompts.get(session_id)
        # Running: the prompt is unanswered (the agent may ask after its answer, which the
        # connection has already resolved) and not being cancelled.
        running = session is not None and session.running and prompt is not None
        request = wire.permission_request(
            params, turn_running=running and prompt is not None and not prompt.done()
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
        answer, approved = wire.permission_answer(params, approve)
        if approve and not approved:
            why = {"reason": "no_allow_option"}
        self._diagnostic(
            "permission_decision",
            session_id or None,
            {
                "decision": "approved" if approved else "rejected",
                "title": request.title,
                "toolKind": request.kind,
                "turnRunning": request.turn_running,
                **why,
            },
        )
        return answer

    def _diagnostic(
        self, kind: AgentDiagnosticKind, session_id: str | None, payload: dict[str, Any]
    ) -> None:
        if self._on_diagnostic is not None:
            self._on_diagnostic(kind, session_id, payload)
