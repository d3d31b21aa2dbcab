"""The ACP edge's I/O: one agent subprocess driven over the Agent Client Protocol (docs/bot.md).

:class:`AgentDriver` spawns the configured agent command in a process group of its own
(:class:`nostr_buzz.io.agent_process.AgentProcess`; JSON-RPC 2.0 through the
``agent-client-protocol`` package's low-level :class:`acp.connection.Connection`), initializes
it, opens sessions with the standing context delivered by the first strategy the agent
supports, runs turns (each compiled section one ``text`` block of ``session/prompt``), cancels
and steers them, and feeds what the agent reports about usage into the pure
:class:`~nostr_buzz.core.usage.UsageTracker`.

The driver owns the agent's lifecycle (start, close, restart) and is made of parts that share
the wire to the agent (:class:`~nostr_buzz.io.agent_link.AgentLink`): sessions opened, continued
and released (:class:`~nostr_buzz.io.agent_open.SessionOpener`), the prompt exchange
(:class:`~nostr_buzz.io.agent_prompts.PromptExchange`) and native steering
(:class:`~nostr_buzz.io.agent_steering.NativeSteering`); its methods of the same names hand
each call to its part.

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
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Concatenate, Final, Generic, Literal, ParamSpec, TypeVar, overload

from acp.exceptions import RequestError
from pydantic import ValidationError

from nostr_buzz.acp import wire
from nostr_buzz.acp.permission import PermissionPolicy
from nostr_buzz.acp.profiles import AdapterProfile, profile_for
from nostr_buzz.acp.state import Timeouts
from nostr_buzz.acp.types import AgentInfo, PermissionRequest
from nostr_buzz.core.choices import check_choice
from nostr_buzz.core.usage import UsageTracker
from nostr_buzz.errors import AgentError
from nostr_buzz.io.agent_group import GroupRecord
from nostr_buzz.io.agent_link import AgentLink
from nostr_buzz.io.agent_open import SessionOpener
from nostr_buzz.io.agent_process import AgentCommand, AgentProcess
from nostr_buzz.io.agent_prompts import PromptExchange
from nostr_buzz.io.agent_sessions import DiagnosticCallback, SessionHub
from nostr_buzz.io.agent_steering import NativeSteering

__all__ = [
    "AgentDriver",
    "DiagnosticCallback",
    "PermissionPolicy",
    "allow_during_turn",
    "reject_always",
]

_WIRE_ERRORS: Final = (RequestError, ConnectionError, OSError, TimeoutError, ValidationError)
_P = ParamSpec("_P")
_R = TypeVar("_R")


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


def _policy(permission: Literal["allow", "reject"] | PermissionPolicy) -> PermissionPolicy:
    """The policy a driver's ``permission`` names: its own, or one of the two plain ones."""
    if isinstance(permission, str):  # any other word would be called as a policy
        check_choice(permission, ("allow", "reject"), "AgentDriver permission")
    if permission == "allow":
        return allow_during_turn
    return reject_always if permission == "reject" else permission


class _ByPart(Generic[_P, _R]):
    """A method of the driver that one of its parts answers: ``part`` names the driver's
    attribute that holds the part, ``method`` is the part's own (its signature and docstring
    are the driver's method's)."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self.part, self.method = part, method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, driver: None, owner: type) -> Callable[Concatenate[Any, _P], _R]: ...

    @overload
    def __get__(self, driver: AgentDriver, owner: type) -> Callable[_P, _R]: ...

    def __get__(self, driver: AgentDriver | None, owner: type) -> Callable[..., _R]:
        if driver is None:
            return self.method
        bound: Callable[_P, _R] = getattr(getattr(driver, self.part), self.method.__name__)
        return bound


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
        log = Path(log_path) if log_path is not None else None
        spec = AgentCommand(command, tuple(args), tuple(env_names), dict(env or {}), cwd, log, user)
        self.agent = AgentProcess(spec, shutdown_timeout=shutdown_timeout, on_spawn=on_spawn)
        self.command = command
        self.timeouts = Timeouts(idle_timeout, hard_timeout, cancel_grace)
        self.usage = usage if usage is not None else UsageTracker()
        self.hub = SessionHub(
            self.usage,
            self.timeouts,
            _policy(permission),
            on_diagnostic,
            lambda: self.agent.generation,
            max_reply_bytes,
        )
        self.request_timeout = request_timeout
        self.link = AgentLink(self.agent, self.hub, self._request, clock)
        self.sessions = SessionOpener(self.link)
        self.prompts = PromptExchange(self.link, self.sessions)
        self.steering = NativeSteering(self.link)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def info(self) -> AgentInfo:
        return self.link.info

    @property
    def alive(self) -> bool:
        """Started, and the subprocess has not exited."""
        return self.agent.alive

    @property
    def pid(self) -> int | None:
        process = self.agent.process
        return process.pid if process is not None else None

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
        self.link.known, self.profile = info, profile_for(info.name)
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
        self.link.known = None
        self.hub.lost("the agent was closed")
        self.link.exited(*await self.agent.close())

    async def restart(self) -> AgentInfo:
        """close() then start(): after a crash, sessions must be created anew."""
        await self.close()
        return await self.start()

    async def __aenter__(self) -> AgentDriver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        """One request, its answer within ``request_timeout``; :class:`ConnectionError` when
        no agent runs."""
        conn = self.agent.conn
        if conn is None:
            raise ConnectionError("the agent is not running")
        return await asyncio.wait_for(conn.send_request(method, params), self.request_timeout)

    # -- what the parts answer --------------------------------------------------------------

    new_session = _ByPart("sessions", SessionOpener.new_session)
    reopen_session = _ByPart("sessions", SessionOpener.reopen_session)
    usable = _ByPart("sessions", SessionOpener.usable)
    compactions = _ByPart("sessions", SessionOpener.compactions)
    close_session = _ByPart("sessions", SessionOpener.close_session)
    run_turn = _ByPart("prompts", PromptExchange.run_turn)
    turn = _ByPart("prompts", PromptExchange.turn)
    cancel = _ByPart("prompts", PromptExchange.cancel)
    can_steer = _ByPart("steering", NativeSteering.can_steer)
    steer = _ByPart("steering", NativeSteering.steer)
    follow_turn = _ByPart("steering", NativeSteering.follow_turn)
