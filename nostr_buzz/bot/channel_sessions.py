"""One queue key's agent session (:class:`ChannelSession`; a key is a channel, or a thread of
one under ``[sessions] scope = "thread"``) and how it is opened at the agent
(:class:`SessionOpener`): the session its receipt names, continued when the running agent may
and can (docs/bot.md, "Sessions that survive a restart"), else a new one with the standing
context frozen for it.  A receipt that is not continued is dropped, with a
``session_not_resumed`` diagnostic that says why: the key then opens a new session, never
silently.  :class:`~.supervisor.AgentSupervisor` keeps the sessions once open."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nostr_buzz.acp.profiles import reopen_method
from nostr_buzz.acp.types import SessionStart
from nostr_buzz.core.compiler import standing_text
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.errors import AgentError
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.inprocess import InProcessDriver
from nostr_buzz.nips import nip10

from .config import PluginConfig
from .privacy import agent_error_class
from .receipts import SessionReceipt, SessionReceipts, resume_refusal

if TYPE_CHECKING:  # the acp extra: imported only for an ACP agent
    from nostr_buzz.io.agent_driver import AgentDriver

__all__ = ["ChannelSession", "SessionOpener"]


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
    #: The session's grant of the bot's tool server (None: not offered).
    tool_grant: Any = None

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


class SessionOpener:
    """Opens sessions through ``driver`` (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        driver: AgentDriver | InProcessDriver,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
        standing_for: Callable[[str | None], Awaitable[Standing]] | None,
    ) -> None:
        self.config = config
        self.driver = driver
        self._diagnostics = diagnostics
        self._clock = clock  # when a session started (its receipt keeps it)
        #: A channel's standing context, frozen for its new session (None: the configured one).
        self._standing_for = standing_for

    @property
    def cwd(self) -> str:
        return self.config.agent_cwd or str(Path.cwd())

    async def open(
        self,
        queue_channel: str,
        channel_id: str | None,
        receipts: SessionReceipts | None,
        servers: list[dict[str, Any]],
    ) -> ChannelSession:
        """The session of the key's receipt continued, else a new one with the standing
        context of channel ``channel_id`` (None: no channel — a private conversation or an
        author's direct channel, which get the configured files only); ``servers``: the MCP
        servers it is offered."""
        if receipts is not None:
            session = await self._continued(queue_channel, receipts, servers)
            if session is not None:
                return session
        standing = self.config.standing
        if self._standing_for is not None:
            standing = await self._standing_for(channel_id)
        text = standing_text(standing)
        if servers:
            assert not isinstance(self.driver, InProcessDriver)
            start = await self.driver.new_session(self.cwd, text, servers)
        else:
            start = await self.driver.new_session(self.cwd, text)
        return self._session(start, standing)

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
        self, queue_channel: str, receipts: SessionReceipts, servers: list[dict[str, Any]]
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
                text = standing_text(receipt.standing)
                start = await driver.reopen_session(
                    receipt.session_id, receipt.strategy, self.cwd, text, servers
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
