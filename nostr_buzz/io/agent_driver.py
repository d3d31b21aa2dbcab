"""The ACP edge's I/O: one agent subprocess driven over the Agent Client Protocol (docs/bot.md).

:class:`AgentDriver` spawns the configured agent command in a process group of its own
(:class:`nostr_buzz.io.agent_process.AgentProcess`; JSON-RPC 2.0 through the
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
  its next start (:mod:`nostr_buzz.io.agent_process`, :mod:`nostr_buzz.io.agent_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Final, Literal

from acp.connection import Connection
from acp.exceptions import RequestError
from pydantic import ValidationError

from nostr_buzz.acp import wire
from nostr_buzz.acp.facts import (
    AgentGone,
    CancelAsked,
    Ended,
    Fact,
    PromptSent,
    SteerAnswered,
    SteerSent,
    Tick,
    Update,
)
from nostr_buzz.acp.permission import PermissionPolicy
from nostr_buzz.acp.profiles import (
    AdapterProfile,
    choose_strategy,
    profile_for,
    reopen_method,
    steer_route,
)
from nostr_buzz.acp.state import (
    Action,
    Phase,
    Retire,
    SendCancel,
    Session,
    Timeouts,
)
from nostr_buzz.acp.types import (
    AgentInfo,
    Ending,
    PermissionRequest,
    SessionStart,
    StandingStrategy,
    SteerOutcome,
    TurnResult,
)
from nostr_buzz.core.choices import check_choice
from nostr_buzz.core.usage import UsageTracker
from nostr_buzz.errors import AgentError
from nostr_buzz.io import agent_open
from nostr_buzz.io.agent_group import GroupRecord
from nostr_buzz.io.agent_process import AgentProcess
from nostr_buzz.io.agent_sessions import DiagnosticCallback, SessionHub

__all__ = [
    "AgentDriver",
    "DiagnosticCallback",
    "PermissionPolicy",
    "allow_during_turn",
    "reject_always",
]

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


def _reporter(
    on_update: Callable[[str], None] | None, on_fact: Callable[[Fact], None] | None
) -> Callable[[Fact], None]:
    def report(fact: Fact) -> None:
        if on_update is not None and isinstance(fact, Update) and fact.kind is not None:
            on_update(fact.kind)
        if on_fact is not None:
            on_fact(fact)

    return report


def _policy(permission: Literal["allow", "reject"] | PermissionPolicy) -> PermissionPolicy:
    """The policy a driver's ``permission`` names: its own, or one of the two plain ones."""
    if isinstance(permission, str):  # any other word would be called as a policy
        check_choice(permission, ("allow", "reject"), "AgentDriver permission")
    if permission == "allow":
        return allow_during_turn
    return reject_always if permission == "reject" else permission


class AgentDriver:
    """One ACP agent subprocess; see the module docstring.

    ``env_names`` are copied from this process's environment at start (absent ones skipped);
    ``env`` gives explicit values.  Nothing else of the environment reaches the agent beyond
    the package's trimmed base (HOME, LOGNAME, PATH, SHELL, TERM, USER).  The agent's stderr
    goes to ``log_path`` (appended) or is discarded, never to a pipe that could fill up.
    ``BUZZ_PRIVATE_KEY`` never reaches the agent, whatever is asked.  ``user``: run the agent as
    that OS user (see :mod:`nostr_buzz.io.run_as`), so it cannot read the bot's key or state.
    ``on_spawn`` gets each new agent's process group record right after the spawn; a
    :class:`BuzzError` from it stops the agent and fails the start.  ``max_reply_bytes``: see
    :class:`~nostr_buzz.acp.state.TurnRecord` (``max_text``: the rest is dropped, counted).
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
        max_reply_bytes: int | None = None,
    ) -> None:
        self.agent = AgentProcess(
            command,
            args,
            env_names=env_names,
            env=env,
            cwd=cwd,
            log_path=log_path,
            user=user,
            shutdown_timeout=shutdown_timeout,
            on_spawn=on_spawn,
        )
        self.command = command
        self._cwd = cwd
        self.timeouts = Timeouts(idle_timeout, hard_timeout, cancel_grace)
        self.request_timeout = request_timeout
        self.usage = usage if usage is not None else UsageTracker()
        self.hub = SessionHub(
            self.usage,
            self.timeouts,
            _policy(permission),
            on_diagnostic,
            lambda: self.agent.generation,
            max_reply_bytes,
        )
        self._clock = clock
        self._info: AgentInfo | None = None
        self._own_started: dict[str, datetime] = {}

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def info(self) -> AgentInfo:
        if self._info is None:
            raise AgentError("the agent is not started: call start() first")
        return self._info

    @property
    def alive(self) -> bool:
        """Started, and the subprocess has not exited."""
        return self.agent.alive

    @property
    def pid(self) -> int | None:
        process = self.agent.process
        return process.pid if process is not None else None

    @property
    def _conn(self) -> Connection | None:
        return self.agent.conn

    @property
    def profile(self) -> AdapterProfile:
        """What this agent's adapter does differently (:mod:`nostr_buzz.acp.profiles`)."""
        return self.hub.profile

    @profile.setter
    def profile(self, profile: AdapterProfile) -> None:
        self.hub.profile = profile

    @property
    def permission_policy(self) -> PermissionPolicy:
        return self.hub.policy

    async def start(self) -> AgentInfo:
        """Spawn the agent and ``initialize`` it; raises :class:`AgentError` on failure."""
        if self.agent.started:
            raise AgentError("the agent is already started: close() or restart() it first")
        await self.agent.spawn(self.hub.handle)
        try:
            raw = await self._request("initialize", wire.initialize_params(_client_version()))
            info = wire.agent_info(raw, self.pid or 0)
        except _WIRE_ERRORS as exc:
            await self.close()
            raise AgentError(
                f"the agent {self.command!r} failed to initialize: {wire.describe(exc)}"
            ) from None
        self._info, self.profile = info, profile_for(info.name)
        self.hub.diagnostic(
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
        self._info = None
        self.hub.lost("the agent was closed")
        report, returncode = await self.agent.close()
        if report:
            self.hub.diagnostic("agent_exited", None, {"returncode": returncode})

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
        report, returncode = await self.agent.reap()
        if report:
            self.hub.diagnostic("agent_exited", None, {"returncode": returncode})

    # -- sessions -------------------------------------------------------------------------

    async def new_session(
        self, cwd: str, standing: str = "", mcp_servers: Sequence[Mapping[str, Any]] = ()
    ) -> SessionStart:
        """``session/new`` with the standing context, by the first strategy the agent supports
        (:func:`~nostr_buzz.acp.profiles.choose_strategy`); legacy delivery leaves it to the
        caller, which compiles the standing sections, ``<workspace>`` first, into the first
        turn.

        ``standing`` is the system-role text the compiler rendered
        (:func:`nostr_buzz.core.compiler.standing_text`); the driver sends it as given.  Raises
        :class:`AgentError` when the agent refuses the session.  ``mcp_servers``: ACP
        ``McpServer`` entries offered to the session (the bot's tool server).
        """
        strategy = choose_strategy(self.profile, self.info)
        opened = await agent_open.open_new(
            self._request, self.info, strategy, cwd, standing, mcp_servers
        )
        self.usage.session_started(self.hub.key(opened[0]))  # ours: zero baseline
        return agent_open.started(self.hub, opened, None)

    async def reopen_session(
        self,
        session_id: str,
        strategy: StandingStrategy,
        cwd: str,
        standing: str = "",
        mcp_servers: Sequence[Mapping[str, Any]] = (),
    ) -> SessionStart:
        """Continue ``session_id``, opened by an earlier agent process with ``strategy`` and
        ``standing`` (the same text again), by :func:`~nostr_buzz.acp.profiles.reopen_method`:
        what ``session/load`` replays is dropped, never a turn's text or usage.  Its usage
        baselines are unknown until the agent reports again.  Raises :class:`AgentError` when
        the agent refuses it or cannot continue sessions."""
        method = reopen_method(self.profile, self.info)
        if method is None:
            raise AgentError("the agent continues no session of an earlier process")
        # Until its first prompt, what the agent sends for the session is history it replays
        # (a replayed update may still be on its way when the answer to the load is read).
        self.hub.replaying.add(session_id)
        try:
            opened = await agent_open.reopen(
                self._request, self.info, method, session_id, strategy, cwd, standing, mcp_servers
            )
        except BaseException:
            self.hub.replaying.discard(session_id)
            raise
        return agent_open.started(self.hub, opened, method)

    def usable(self, session_id: str) -> bool:
        """False for a session retired after a cancel (see the module docstring): the
        caller must open a fresh session (with the standing context) for its next turn."""
        session = self.hub.sessions.get(session_id)
        return session is None or session.usable

    def compactions(self, session_id: str) -> int:
        """How many times the agent compacted this session's context (docs/envelope.md,
        "Compaction"): 0 for a session it never reported one of."""
        session = self.hub.sessions.get(session_id)
        return session.compactions if session is not None else 0

    async def _retire(self, session_id: str) -> None:
        """Never prompt this session again; ``session/close`` it when the agent can."""
        self.hub.diagnostic("session_retired", session_id, {})
        await agent_open.close(self._request, self._info if self.alive else None, session_id)

    async def close_session(self, session_id: str) -> bool:
        """Release an idle session (docs/bot.md, "Live sessions"): ``session/close`` where
        advertised (whether it was sent), and all the driver kept of it forgotten; a later
        :meth:`reopen_session` continues it where the agent can."""
        wire = self.alive and self.usable(session_id)  # a retired one was closed already
        sent = await agent_open.close(self._request, self._info if wire else None, session_id)
        self.hub.forget(session_id)
        return sent

    # -- what the state machine asks for --------------------------------------------------

    async def _perform(self, session_id: str, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, SendCancel):
                await self._notify("session/cancel", {"sessionId": session_id})
            elif isinstance(action, Retire):
                await self._retire(session_id)

    # -- turns ----------------------------------------------------------------------------

    async def run_turn(
        self,
        session_id: str,
        sections: Sequence[str],
        *,
        on_update: Callable[[str], None] | None = None,
        on_fact: Callable[[Fact], None] | None = None,
    ) -> TurnResult:
        """Send one prompt (each section its own ``text`` block) and wait for its end.

        ``on_fact(fact)`` gets the turn's facts: ``PromptSent`` once the prompt is on the wire
        (before anything else can happen in the session), then what the agent reports in it
        (:mod:`nostr_buzz.acp.facts`); ``on_update(kind)`` is called for each
        ``session/update`` of the turn (its ``sessionUpdate`` kind).  Never raises for what the
        agent does: crashes, timeouts and protocol errors are in the result.  Raises
        :class:`AgentError` only when no agent is started or a prompt is already running in
        the session.
        """
        conn = self._conn
        if conn is None:
            raise AgentError("the agent is not started: call start() first")
        session = self.hub.session(session_id)
        if session.phase == Phase.RETIRED:
            raise AgentError(
                f"session {session_id!r} was retired after a cancelled or failed turn: "
                "open a new session"
            )
        if session.phase != Phase.IDLE or session.own_phase == "running":
            raise AgentError(f"a prompt is already running in session {session_id!r}")
        started_at = self._clock()
        self.hub.replaying.discard(session_id)  # what follows is this turn's
        self.hub.feed(session_id, session, PromptSent())
        record = session.turn
        assert record is not None
        key = self.hub.key(session_id)
        self.usage.begin_turn(key)
        params = wire.prompt_params(session_id, sections)
        self.hub.on_fact[session_id] = _reporter(on_update, on_fact)
        prompt = asyncio.ensure_future(conn.send_request("session/prompt", params))
        self.hub.watch(session_id, session, prompt)
        self.hub.report(session_id, PromptSent())
        try:
            await self._wait(session_id, session)
        finally:
            if not prompt.done():
                prompt.cancel()
            with contextlib.suppress(BaseException):
                await prompt
            self.hub.prompts.pop(session_id, None)
            self.hub.on_fact.pop(session_id, None)
        split = self.hub.split.pop(session_id, ...)
        usage = self.usage.end_turn(key) if split is ... else split
        turn_seq = usage.turn_seq if usage is not None else self.usage.unknown_turn(key)
        ending, actions = session.settle(usage, asyncio.get_running_loop().time())
        await self._perform(session_id, actions)
        result = record.result(ending, usage, turn_seq, session_id, started_at, self._clock())
        if ending.evidence == "agent_exit":
            await self._reap()
        return result

    async def turn(self, session_id: str, sections: Sequence[str]) -> AsyncIterator[Fact]:
        """One prompt as a stream of facts: ``PromptSent`` once it is on the wire, what the
        agent reports in the turn (updates, text, tool calls, usage, permission asked, steer
        answered, its own turn begun), and ``Ended`` with its result, last.  Raises what
        :meth:`run_turn` raises; leaving the stream early abandons the prompt."""
        facts: asyncio.Queue[Fact | None] = asyncio.Queue()
        running = asyncio.ensure_future(
            self.run_turn(
                session_id,
                sections,
                on_fact=facts.put_nowait,
            )
        )
        running.add_done_callback(lambda _: facts.put_nowait(None))
        try:
            while (fact := await facts.get()) is not None:
                yield fact
            yield Ended(await running)
        finally:
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    async def _wait(self, session_id: str, session: Session) -> None:
        """Until the prompt has ended: its answer, a timeout, or the agent's exit."""
        loop = asyncio.get_running_loop()
        wake = self.hub.wakes[session_id]
        while session.phase in (Phase.PROMPTING, Phase.CANCELLING):
            if self._conn is None:
                self.hub.feed(session_id, session, AgentGone("the agent was closed"))
                return
            await self._perform(session_id, self.hub.feed(session_id, session, Tick()))
            at = session.deadline()
            if at is None:
                return
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.0, at - loop.time()))

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``; the running turn then ends on the agent's answer (or after
        ``cancel_grace`` without one)."""
        session = self.hub.sessions.get(session_id)
        if session is None:
            await self._notify("session/cancel", {"sessionId": session_id})
            return
        await self._perform(session_id, self.hub.feed(session_id, session, CancelAsked()))

    # -- steering -------------------------------------------------------------------------

    def _steer_route(self, session_id: str) -> tuple[str, str | None] | None:
        session = self.hub.sessions.get(session_id)
        return steer_route(self.profile, self._info, session.run_id if session else None)

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
        session = self.hub.session(session_id)
        if not session.may_steer():
            return "released"
        started = self._clock()
        # Sent before the answer: the agent may start writing a turn of its own at once.
        self.hub.feed(session_id, session, SteerSent())
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
        self.hub.feed(session_id, session, SteerAnswered(outcome))
        if session.own is None:
            self._own_started.pop(session_id, None)
        self.hub.diagnostic("steer_sent", session_id, {"method": method, "result": outcome})
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
        session = self.hub.sessions.get(session_id)
        record = session.begin_own() if session is not None else None
        if session is None or record is None:
            return None
        started_at = self._own_started.pop(session_id, None) or self._clock()
        key = self.hub.key(session_id)
        self.usage.begin_turn(key)  # a no-op when its first update already began it
        loop, wake = asyncio.get_running_loop(), self.hub.wakes[session_id]
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
        return record.result(ending, usage, turn_seq, session_id, started_at, self._clock())

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
