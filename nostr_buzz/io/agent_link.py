"""What the parts of an agent driver share: the agent process and the way to talk to it.

:class:`AgentLink` holds what every part of :class:`~nostr_buzz.io.agent_driver.AgentDriver`
works through: the process group (:class:`~nostr_buzz.io.agent_process.AgentProcess`) and its
JSON-RPC connection, the sessions and what the agent sends them
(:class:`~nostr_buzz.io.agent_sessions.SessionHub`), what the agent said of itself at
``initialize``, the clock of the turns' timestamps, and the two ways of speaking to the agent:
a request bounded in time (the driver's), and a notification that is dropped when the agent is
gone.  The parts: the driver's lifecycle (:mod:`nostr_buzz.io.agent_driver`), its sessions
opened and closed (:class:`~nostr_buzz.io.agent_open.SessionOpener`), the prompt exchange
(:class:`~nostr_buzz.io.agent_prompts.PromptExchange`) and native steering
(:class:`~nostr_buzz.io.agent_steering.NativeSteering`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nostr_buzz.acp.types import AgentInfo
from nostr_buzz.errors import AgentError
from nostr_buzz.io.agent_process import AgentProcess
from nostr_buzz.io.agent_sessions import SessionHub

__all__ = ["AgentLink", "Request"]

#: ``request(method, params)``: one JSON-RPC request to the agent, bounded in time.
Request = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass(eq=False, repr=False)
class AgentLink:
    """The agent process, its sessions and its wire (see the module docstring)."""

    agent: AgentProcess
    hub: SessionHub
    #: One request to the agent, bounded in time (the driver's ``request_timeout``).
    request: Request
    #: The clock of the turns' ``started_at`` and the end of their results.
    clock: Callable[[], datetime]
    #: What ``initialize`` answered; None while no agent is started.
    known: AgentInfo | None = None

    @property
    def info(self) -> AgentInfo:
        """The started agent's :class:`AgentInfo`; :class:`AgentError` before a start."""
        known = self.known
        if known is not None:
            return known
        raise AgentError("the agent is not started: call start() first")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """One notification; nothing is sent when the agent is gone or going."""
        conn = self.agent.conn
        if conn is None:
            return
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await conn.send_notification(method, params)

    def exited(self, report: bool, returncode: int | None) -> None:
        """The ``agent_exited`` diagnostic, when the process's exit is news."""
        if report:
            self.hub.diagnostic("agent_exited", None, {"returncode": returncode})

    async def reap(self) -> None:
        """The connection is gone: wait (bounded) for the exit status, then report it."""
        self.exited(*await self.agent.reap())
