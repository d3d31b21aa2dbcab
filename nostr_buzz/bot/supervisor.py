"""Agent supervision: one ACP agent process, its sessions (one per queue key: a channel, or a
thread under ``[sessions] scope = "thread"``), at most ``max_live`` of them open (:mod:`.live`),
and restarts.

The driver of the agent (an ACP process or an in-process agent) and the record of its process
group are made in :mod:`.agent_drivers`; a key's session is opened (or continued from its
receipt) by :mod:`.channel_sessions`; the supervisor keeps the open sessions, restarts the agent
and closes what the bot lets go.

A turn that ends with the agent gone makes the supervisor restart it with exponential backoff
(0.5 s doubling to 30 s) while other channels keep being served; the sessions died with the
process, so each channel opens a new one (with the standing context) on its next turn.  So
does a channel whose session the driver retired (an agent that does not survive a cancel).

The supervisor holds processes and sessions only: the agent's permission requests go to the
running turns it is given (:class:`TurnLookup`, :class:`.turn.RunningTurns`: they decide;
without them every request is rejected), which also locate the driver's diagnostics.  Each
session records the actors whose words entered it (:attr:`ChannelSession.actors`); a replaced
session starts with none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from nostr_buzz.acp.profiles import reopen_method
from nostr_buzz.acp.types import PermissionRequest, TurnResult
from nostr_buzz.agent import AgentFunction, AgentTool, InProcessAgent
from nostr_buzz.core.backoff import backoff_base
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.errors import BuzzError
from nostr_buzz.io.diagnostics import AgentDiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.inprocess import InProcessDriver, load_agent
from nostr_buzz.nips import nip10

from .agent_drivers import AGENT_LOG, AgentGroup, acp_driver, harness_name, inprocess_driver
from .channel_sessions import ChannelSession, SessionOpener
from .config import PluginConfig
from .live import LiveSessions, touch
from .privacy import AGENT_TEXT_KINDS, private_driver_payload
from .receipts import SessionReceipts

if TYPE_CHECKING:  # the acp extra: imported only for an ACP agent (.agent_drivers)
    from nostr_buzz.io.agent_driver import AgentDriver

__all__ = [
    "AGENT_LOG",
    "AgentSupervisor",
    "ChannelSession",
    "harness_name",
    "restart_accounting",
    "restart_delay",
    "secret_values",
]

_RESTART_BASE: Final = 0.5
_RESTART_CAP: Final = 30.0


def secret_values(config: PluginConfig) -> list[str]:
    """Values no diagnostic may repeat: the agent's key, what the agent's environment carries
    (``[agent] env`` values, the variables passed through by name) and the telemetry headers."""
    secret = config.agent_secret  # None when a signer holds the key elsewhere
    values = [secret.hex, secret.bech32] if secret is not None else []
    values += config.agent_env.values()
    values += [os.environ[name] for name in config.agent_pass_env if name in os.environ]
    values += config.telemetry.secrets if config.telemetry is not None else []
    return [v for v in values if v]


def restart_delay(failures: int) -> float:
    """Seconds to wait before the next restart after ``failures`` failed ones (0 for none)."""
    return backoff_base(failures, base=_RESTART_BASE, cap=_RESTART_CAP)


class TurnLookup(Protocol):
    """The running turns, as the agent's requests and diagnostics need them."""

    def permission(
        self, request: PermissionRequest
    ) -> PermissionDecision | Awaitable[PermissionDecision]: ...

    def locate(self, adapter_session_id: str) -> dict[str, str | None] | None: ...

    def __contains__(self, queue_channel: object) -> bool: ...  # a turn runs there


class ToolOffer(Protocol):
    """The bot's tool server, as sessions are offered it (:mod:`.tools`): the ACP
    ``mcpServers`` of a new session of a queue key and its grant, bound to the session once
    open, revoked when the bot lets it go."""

    def offer(self, queue_channel: str, driver: object) -> tuple[list[dict[str, Any]], Any]: ...

    def bind(self, grant: Any, session: ChannelSession) -> None: ...

    def revoke(self, grant: Any) -> None: ...

    def agent_tools(self, grant: Any) -> tuple[AgentTool, ...]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class AgentSupervisor:
    """The agent process of a bot: start, sessions, restart with backoff, close."""

    def __init__(
        self,
        config: PluginConfig,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
        stopping: asyncio.Event,
        standing_for: Callable[[str | None], Awaitable[Standing]] | None = None,
        turns: TurnLookup | None = None,
        agent: InProcessAgent | AgentFunction | None = None,
    ) -> None:
        self.config = config
        self._diagnostics = diagnostics
        self._stopping = stopping
        #: The record of the agent's process group in the state directory.
        self.group = AgentGroup(config.state_dir, diagnostics)
        if agent is None and config.agent_module is not None:
            agent = load_agent(config.agent_module)
        self.driver: AgentDriver | InProcessDriver
        if agent is not None:  # a Python object instead of the ACP subprocess
            self.driver = inprocess_driver(
                agent,
                config,
                clock,
                on_diagnostic=self._on_driver_diagnostic,
                channel_of=self._channel_of,
                tools_of=self._tools_of,
            )
        else:
            self.driver = acp_driver(
                config,
                clock,
                on_diagnostic=self._on_driver_diagnostic,
                permission=turns.permission if turns is not None else None,
                on_spawn=self.group.remember,
            )
        self.opener = SessionOpener(config, self.driver, diagnostics, clock, standing_for)
        #: By queue key, least recently used first (:func:`.live.touch`).
        self.sessions: dict[str, ChannelSession] = {}
        self.live = LiveSessions(config.max_live_sessions)
        self._turns = turns
        #: What runs before an idle session is closed to keep ``max_live`` (a summary turn,
        #: ``.thread_checkpoints.SummaryTurns``); None: nothing.
        self.before_close: Callable[[str, ChannelSession], Awaitable[None]] | None = None
        #: Sessions let go but perhaps still open at the agent (:meth:`_close_abandoned`).
        self._abandoned: list[str] = []
        #: ``(channel_id, session_id, turn_id)`` of the turn running in an adapter session,
        #: for the driver's diagnostics.
        self._locate = turns.locate if turns is not None else lambda _: None
        self.harness = harness_name(config.agent_command, config.agent_args, None)
        self._lock = asyncio.Lock()
        self._failures = 0
        self._closed = False
        #: The bot's tool server, offered to each session (None: no tools).
        self.tools: ToolOffer | None = None

    def _on_driver_diagnostic(
        self, kind: AgentDiagnosticKind, session_id: str | None, payload: dict[str, Any]
    ) -> None:
        ids = self._locate(session_id) if session_id is not None else None
        if kind in AGENT_TEXT_KINDS and not self.is_public_session(session_id):
            # A private conversation's session, or one the bot never opened.
            payload = private_driver_payload(kind, payload)
            if not self.is_known_session(session_id):
                session_id = None  # the agent's own words, not an id of ours
        payload = {**payload, "adapterSessionId": session_id}
        self._diagnostics.emit(kind, payload=payload, **(ids or {}))

    def _channel_of(self, session_id: str) -> str | None:
        keys = (k for k, s in self.sessions.items() if s.start.session_id == session_id)
        key = next(keys, None)
        return channel_of(key) if key is not None else None

    def is_known_session(self, session_id: str | None) -> bool:
        return any(s.start.session_id == session_id for s in self.sessions.values())

    def is_public_session(self, session_id: str | None) -> bool:
        """Whether an adapter session is one of a public channel's only (no private
        conversation's session has that id): its records may carry the agent's text."""
        channels = [c for c, s in self.sessions.items() if s.start.session_id == session_id]
        return bool(channels) and not any(nip10.is_private_channel(c) for c in channels)

    async def start(self) -> None:
        await self.group.end_orphans()
        if self.tools is not None and not isinstance(self.driver, InProcessDriver):
            await self.tools.start()  # before any session is offered it
        info = await self.driver.start()
        self.harness = harness_name(self.config.agent_command, self.config.agent_args, info.name)

    async def close(self) -> None:
        self._closed = True
        await self.driver.close()
        if self.tools is not None:
            await self.tools.close()
        self.group.closed()  # the group was ended with the agent

    async def ensure_agent(self) -> None:
        """Restart the agent until it runs (backoff between failures) or the bot closes."""
        async with self._lock:
            while not self.driver.alive and not self._closed:
                if self._failures:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(restart_delay(self._failures)):
                            await self._stopping.wait()
                    if self._closed:
                        return
                self._lost_all()  # sessions died with the process
                try:
                    info = await self.driver.restart()
                except BuzzError as exc:
                    self._failures += 1
                    self._diagnostics.emit("agent_restart_failed", payload={"error": str(exc)})
                    continue
                self.harness = harness_name(
                    self.config.agent_command, self.config.agent_args, info.name
                )
                self._diagnostics.emit("agent_restarted", payload={"pid": info.pid})

    async def session_for(
        self,
        queue_channel: str,
        channel_id: str | None = None,
        receipts: SessionReceipts | None = None,
    ) -> ChannelSession:
        """The queue channel's live session, else the session its receipt names continued
        (docs/bot.md, "Sessions that survive a restart"), else a new one with the standing
        context of channel ``channel_id`` frozen for it (None: no channel — a private
        conversation or an author's direct channel, which get the configured files only)."""
        if not self.driver.alive:
            await self.ensure_agent()
        session = touch(self.sessions, queue_channel)
        if session is not None and not self.driver.usable(session.start.session_id):
            # Retired after a failed turn, or a cancel it did not survive: never prompted again.
            self._diagnostics.emit(
                "session_replaced", payload={"adapterSessionId": session.start.session_id}
            )
            self.forget(queue_channel, session, receipts)
            session = None
        if session is None:
            await self._close_abandoned()
            await self.live.closed(queue_channel)
            async with self.live.slot(self.sessions, self._busy, self._close_idle):
                session = await self._open(queue_channel, channel_id, receipts)
                self.sessions[queue_channel] = session
        return session

    async def _open(
        self, queue_channel: str, channel_id: str | None, receipts: SessionReceipts | None
    ) -> ChannelSession:
        """The key's session opened (:class:`.channel_sessions.SessionOpener`), offered the
        bot's tools."""
        servers, grant = self._offer(queue_channel)
        try:
            session = await self.opener.open(queue_channel, channel_id, receipts, servers)
        except BaseException:
            self._revoke(grant)
            raise
        if self.tools is not None and grant is not None:
            session.tool_grant = grant
            self.tools.bind(grant, session)
        return session

    def _offer(self, queue_channel: str) -> tuple[list[dict[str, Any]], Any]:
        if self.tools is None:
            return [], None
        return self.tools.offer(queue_channel, self.driver)

    def _tools_of(self, session_id: str) -> tuple[AgentTool, ...]:
        """An in-process agent's session's tools (:class:`~nostr_buzz.agent.AgentTool`)."""
        found = (s for s in self.sessions.values() if s.start.session_id == session_id)
        session = next(found, None)
        if self.tools is None or session is None or session.tool_grant is None:
            return ()
        return self.tools.agent_tools(session.tool_grant)

    def _revoke(self, grant: Any) -> None:
        if self.tools is not None and grant is not None:
            self.tools.revoke(grant)

    async def _close_abandoned(self) -> None:
        """Sessions the bot let go (after a cancel, a retirement, the owner's ``!new``) are
        closed at the agent and forgotten by the driver once no turn runs in them, so they
        neither stay open at the agent nor in the bot's memory."""
        for session_id in list(self._abandoned):
            if session_id not in self._abandoned or self._locate(session_id) is not None:
                continue  # closed meanwhile by another opener, or its turn is still ending
            self._abandoned.remove(session_id)
            if not self.is_known_session(session_id):  # an agent may reuse an id
                await self.driver.close_session(session_id)

    def _busy(self, queue_channel: str) -> bool:
        """A turn runs in the key's session: it is not closed to make room."""
        return self._turns is not None and queue_channel in self._turns

    async def _close_idle(self, queue_channel: str, session: ChannelSession) -> None:
        """Close an idle session to keep ``max_live`` (docs/bot.md, "Live sessions"); its
        receipt stays, so its next turn continues it where the agent can."""
        session_id = session.start.session_id
        if self.before_close is not None:
            await self.before_close(queue_channel, session)
        self._revoke(session.tool_grant)
        sent = await self.driver.close_session(session_id)
        payload = {"adapterSessionId": session_id, "reason": "max_live", "sessionClose": sent}
        self._diagnostics.emit(
            "session_closed", channel_id=channel_of(queue_channel), payload=payload
        )

    @property
    def agent_has_cli(self) -> bool:
        """Whether the agent may run ``buzz``: a subprocess run as the bot's own user (an
        in-process agent has no shell; an agent under ``[agent] user`` has not the bot's
        configuration)."""
        return not isinstance(self.driver, InProcessDriver) and self.config.agent_user is None

    @property
    def continues_sessions(self) -> bool:
        """Whether the running agent can continue a session after a restart: then each
        channel's session has a receipt in the state database (:mod:`.receipts`)."""
        driver = self.driver
        if isinstance(driver, InProcessDriver) or not driver.alive:
            return False
        return reopen_method(driver.profile, driver.info) is not None

    def end_session(self, queue_channel: str, receipts: SessionReceipts | None = None) -> None:
        """The owner's ``!new``: the key's session is never prompted or continued again."""
        session = self.sessions.get(queue_channel)
        if session is not None:
            self.forget(queue_channel, session, receipts)
        elif receipts is not None:
            receipts.drop(queue_channel)

    def end_channel(self, channel: str, receipts: SessionReceipts | None = None) -> None:
        """The owner's ``!new`` at a channel's top level under ``thread`` scope: every
        thread's session of ``channel`` ends (docs/bot.md, "Session scope")."""
        for key in [k for k in self.sessions if channel_of(k) == channel]:
            self.end_session(key, receipts)
        if receipts is not None:
            receipts.drop_channel(channel)

    def forget(
        self,
        queue_channel: str,
        session: ChannelSession,
        receipts: SessionReceipts | None = None,
    ) -> None:
        """Never prompt ``session`` again (it was cancelled: some agents cannot take another
        prompt after a cancel, or retired); the channel's next turn opens a new one, and its
        receipt goes (inside the caller's transaction)."""
        if self.sessions.get(queue_channel) is session:
            del self.sessions[queue_channel]
            self._revoke(session.tool_grant)
            self._abandoned.append(session.start.session_id)
            self.live.notify()
            if receipts is not None:
                receipts.drop(queue_channel)

    def needs_restart(self, result: TurnResult | None) -> bool:
        """Account a turn's end; True when the agent must be restarted (it is gone)."""
        restart, self._failures = restart_accounting(result, self.driver.alive, self._failures)
        if restart:
            self._lost_all()
        return restart

    def _lost_all(self) -> None:
        for session in self.sessions.values():
            self._revoke(session.tool_grant)
        self.sessions.clear()
        self._abandoned.clear()  # they died with the process
        self.live.notify()


def restart_accounting(result: TurnResult | None, alive: bool, failures: int) -> tuple[bool, int]:
    """After a turn (``result`` None: it failed before the agent answered): whether the agent
    must be restarted (it exited, or it is gone), and the count of failures in a row that the
    restart backoff follows (a success resets it)."""
    if (result is not None and result.terminal_evidence == "agent_exit") or not alive:
        return True, failures + 1
    if result is not None and result.outcome == "success":
        return False, 0
    return False, failures
