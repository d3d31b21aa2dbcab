"""Agent supervision: one ACP agent process, its sessions (one per queue key: a channel, or a
thread under ``[sessions] scope = "thread"``), at most ``max_live`` of them open (:mod:`.live`),
and restarts.

On start, a process group that a previous run left behind when it was killed outright is
ended first (:mod:`nostr_buzz.io.agent_group`); each agent start records its group, and a
graceful close removes the record.

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
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from nostr_buzz.acp.profiles import reopen_method
from nostr_buzz.acp.types import PermissionRequest, SessionStart, TurnResult
from nostr_buzz.agent import AgentFunction, InProcessAgent
from nostr_buzz.core.backoff import backoff_base
from nostr_buzz.core.compiler import standing_text
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.errors import AgentError, BuzzError, ConfigError
from nostr_buzz.io.agent_group import (
    GroupRecord,
    clear_record,
    end_orphan_group,
    read_record,
    write_record,
)
from nostr_buzz.io.diagnostics import AgentDiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.inprocess import InProcessDriver, load_agent
from nostr_buzz.nips import nip10

from .config import PluginConfig

if TYPE_CHECKING:  # the acp extra: imported only for an ACP agent (_acp_driver)
    from nostr_buzz.io.agent_driver import AgentDriver
from .live import LiveSessions, touch
from .privacy import AGENT_TEXT_KINDS, agent_error_class, private_driver_payload
from .receipts import SessionReceipt, SessionReceipts, resume_refusal

__all__ = [
    "AGENT_LOG",
    "AgentSupervisor",
    "ChannelSession",
    "harness_name",
    "restart_accounting",
    "restart_delay",
    "secret_values",
]

AGENT_LOG: Final = "agent.log"
_RESTART_BASE: Final = 0.5
_RESTART_CAP: Final = 30.0
_KNOWN_HARNESSES: Final = ("goose", "codex", "claude")


def harness_name(command: str | None, args: Sequence[str], agent_name: str | None) -> str:
    """The metric's ``harness``: goose/codex/claude when the command, its arguments or the
    agent's name say so, else the agent's reported name, else the command's file name."""
    command = command or ""
    words = " ".join([command, *args, agent_name or ""]).lower()
    for known in _KNOWN_HARNESSES:
        if known in words:
            return known
    if agent_name:
        return agent_name
    return Path(command).name or command


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


@dataclass
class ChannelSession:
    """One live ACP session (one per queue channel) and what it has been given.

    Two session ids: ``start.session_id`` is the agent's own (ACP, the metric's
    ``adapterSessionId``); ``metric_session_id`` is the metric's ``sessionId``.
    """

    start: SessionStart
    #: Made here, so a restart starts a new one (nips/NIP-AM.md: a publisher that loses its
    #: turn counter starts a new ``sessionId``), even for a continued agent session.
    metric_session_id: str
    standing: Standing = field(default_factory=Standing)  # frozen when the session opened
    delivered: set[str] = field(default_factory=set)
    turns: int = 0
    #: Every actor (hex pubkey) whose words entered this session (batches, cancelled events,
    #: steers): ``permissions = "owner"`` approves only while it holds the owner alone.  A
    #: continued session keeps its earlier actors (:mod:`.receipts`).
    actors: set[str] = field(default_factory=set)
    #: The agent that opened it, and when (a Unix time): what its receipt records.
    agent: tuple[str | None, str | None] = (None, None)
    started_at: float = 0.0
    #: The agent's count of this session's compactions when its standing sections last went
    #: into an answered prompt (docs/envelope.md, "Compaction").
    standing_compactions: int = 0
    #: Continued from its receipt (it holds its conversation): it starts from no checkpoint.
    continued: bool = False
    #: Its key's thread checkpoint was looked for (the first prompt's, once).
    checkpoint_read: bool = False
    #: The newest event the session is known to hold (its last completed turn's, or what its
    #: checkpoint covered): what a checkpoint made of its compaction covers.
    covered: str | None = None

    def receipt(self) -> SessionReceipt:
        """What the state database keeps of this session (:mod:`.receipts`)."""
        return SessionReceipt(
            session_id=self.start.session_id,
            agent=self.agent[0],
            agent_version=self.agent[1],
            strategy=self.start.strategy,
            standing=self.standing,
            started_at=self.started_at,
            actors=tuple(sorted(self.actors)),
            delivered=tuple(self.delivered),
        )


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
        self._clock = clock
        self._standing_for = standing_for
        self._diagnostics = diagnostics
        self._stopping = stopping
        if agent is None and config.agent_module is not None:
            agent = load_agent(config.agent_module)
        self.driver: AgentDriver | InProcessDriver
        if agent is not None:  # a Python object instead of the ACP subprocess
            self.driver = InProcessDriver(
                agent,
                idle_timeout=config.idle_timeout,
                hard_timeout=config.hard_timeout,
                on_diagnostic=self._on_driver_diagnostic,
                clock=lambda: datetime.fromtimestamp(clock(), UTC),
                channel_of=self._channel_of,
                max_reply_bytes=config.max_reply_bytes,
            )
        else:
            self.driver = self._acp_driver(config, clock, turns)
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
        self._recorded = False  # an agent group of this run is recorded in the state directory

    def _acp_driver(
        self, config: PluginConfig, clock: Callable[[], float], turns: TurnLookup | None
    ) -> AgentDriver:
        """The ACP agent's driver; the ``acp`` extra is imported only here."""
        if config.agent_command is None:
            raise ConfigError(
                "no agent: give PluginConfig agent_command (an ACP agent) or agent_module, or "
                "an in-process agent as BuzzPlugin(config, agent=…)"
            )
        try:
            from nostr_buzz.io.agent_driver import AgentDriver, reject_always
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"an ACP agent needs the acp extra (pip install 'nostr-buzz[acp]'): {exc}"
            ) from None
        return AgentDriver(
            config.agent_command,
            config.agent_args,
            env_names=config.agent_pass_env,
            env=config.agent_env,
            cwd=config.agent_cwd,
            user=config.agent_user,
            log_path=config.state_dir / AGENT_LOG,
            idle_timeout=config.idle_timeout,
            hard_timeout=config.hard_timeout,
            on_diagnostic=self._on_driver_diagnostic,
            permission=turns.permission if turns is not None else reject_always,
            on_spawn=self._remember_group,
            max_reply_bytes=config.max_reply_bytes,
            # One clock for the metric's startedAt (taken by the bot) and timestamp (driver's).
            clock=lambda: datetime.fromtimestamp(clock(), UTC),
        )

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

    def _remember_group(self, record: GroupRecord) -> None:
        write_record(self.config.state_dir, record)
        self._recorded = True

    async def _end_orphans(self) -> None:
        """End the agent group a previous run of this bot left behind (it was killed outright),
        if its processes still carry that run's token; say what was done."""
        record = read_record(self.config.state_dir)
        if record is None:
            return
        sweep = await end_orphan_group(record)
        if sweep.outcome == "killed":
            self._diagnostics.emit("agent_group_ended", payload=sweep.payload())
        elif sweep.outcome != "none":
            self._diagnostics.emit("agent_group_spared", payload=sweep.payload())
        clear_record(self.config.state_dir)

    async def start(self) -> None:
        await self._end_orphans()
        info = await self.driver.start()
        self.harness = harness_name(self.config.agent_command, self.config.agent_args, info.name)

    async def close(self) -> None:
        self._closed = True
        await self.driver.close()
        if self._recorded:  # the group was ended with the agent
            clear_record(self.config.state_dir)

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
        """The session of the key's receipt continued, else a new one."""
        session = None
        if receipts is not None:
            session = await self._continued(queue_channel, receipts)
        if session is None:
            standing = self.config.standing
            if self._standing_for is not None:
                standing = await self._standing_for(channel_id)
            start = await self.driver.new_session(self._cwd, standing_text(standing))
            session = self._session(start, standing)
        return session

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
        sent = await self.driver.close_session(session_id)
        payload = {"adapterSessionId": session_id, "reason": "max_live", "sessionClose": sent}
        self._diagnostics.emit(
            "session_closed", channel_id=channel_of(queue_channel), payload=payload
        )

    @property
    def continues_sessions(self) -> bool:
        """Whether the running agent can continue a session after a restart: then each
        channel's session has a receipt in the state database (:mod:`.receipts`)."""
        driver = self.driver
        if isinstance(driver, InProcessDriver) or not driver.alive:
            return False
        return reopen_method(driver.profile, driver.info) is not None

    @property
    def _cwd(self) -> str:
        return self.config.agent_cwd or str(Path.cwd())

    def _session(self, start: SessionStart, standing: Standing) -> ChannelSession:
        driver = self.driver
        info = driver.info if not isinstance(driver, InProcessDriver) else None
        return ChannelSession(
            start=start,
            metric_session_id=uuid.uuid4().hex,
            standing=standing,
            agent=(info.name, info.version) if info is not None else (None, None),
            started_at=self._clock(),
        )

    async def _continued(
        self, queue_channel: str, receipts: SessionReceipts
    ) -> ChannelSession | None:
        """The session of the channel's receipt, continued by the running agent; None (with a
        ``session_not_resumed`` diagnostic, and the receipt dropped) when it may not or could
        not be: the channel then opens a new session, never silently."""
        found = receipts.get(queue_channel)
        driver = self.driver
        if found is None or isinstance(driver, InProcessDriver):
            return None
        receipt, in_turn = found
        info = driver.info
        method = reopen_method(driver.profile, info)
        why = resume_refusal(receipt, in_turn, info.name, info.version, method)
        error: str | None = None
        if why is None:
            try:
                start = await driver.reopen_session(
                    receipt.session_id, receipt.strategy, self._cwd, standing_text(receipt.standing)
                )
            except AgentError as exc:
                why, error = "refused", str(exc)
                if nip10.is_private_channel(queue_channel):  # the class only: no agent text
                    error = agent_error_class(error)
        if why is not None:
            receipts.drop(queue_channel)
            payload = {"adapterSessionId": receipt.session_id, "reason": why}
            self._diagnostics.emit(
                "session_not_resumed",
                channel_id=channel_of(queue_channel),
                payload={**payload, **({"error": error} if error else {})},
            )
            return None
        session = self._session(start, receipt.standing)
        session.continued = True
        session.actors.update(receipt.actors)
        session.delivered.update(receipt.delivered)
        session.started_at = receipt.started_at
        return session

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
