"""Opening an ACP session: a new one (``session/new``), or one of an earlier agent process
continued (``session/resume``, ``session/load``) — docs/acp-adapters.md, "Sessions that survive
a restart" — and closing one (``session/close``, where advertised).  :class:`SessionOpener` is
the driver's part that does these for its agent and knows whether a session may still be
prompted.

Both put the session in the mode that asks the client before a tool runs
(docs/acp-adapters.md, "Permission modes") and deliver the standing context by the strategy
given.  A continued session gets its standing context again where it travels beside the
history (an adapter keeps a ``_meta`` or ``systemPrompt`` text in its process, not in the
session it stores); legacy delivery put it in the first prompt, which the history holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from acp.exceptions import RequestError
from pydantic import ValidationError

from nostr_buzz.acp import wire
from nostr_buzz.acp.profiles import GOOSE_SYSTEM_PROMPT, choose_strategy, reopen_method
from nostr_buzz.acp.types import AgentInfo, ReopenMethod, SessionStart, StandingStrategy
from nostr_buzz.errors import AgentError

from .agent_link import AgentLink, Request
from .agent_sessions import SessionHub

__all__ = [
    "CLOSE_SESSION_TIMEOUT",
    "Opened",
    "Request",
    "SessionOpener",
    "close",
    "open_new",
    "reopen",
    "started",
]

_TRANSPORT: Final = (RequestError, ConnectionError, OSError, TimeoutError)
#: How long ``session/close`` may take before it is given up.
CLOSE_SESSION_TIMEOUT: Final = 5.0
_WIRE_ERRORS: Final = (*_TRANSPORT, ValidationError)

#: (the session's id, how its standing context travelled, the permission mode it is in).
Opened = tuple[str, StandingStrategy, str | None]


async def _asking_mode(request: Request, session_id: str, raw: object) -> str | None:
    """Put the session in the advertised mode that asks the client before every tool
    (:data:`~nostr_buzz.acp.profiles.ASKING_MODES`); the session's mode, None when the agent
    advertises none.  An agent that advertises modes but no asking one, or refuses it, gets no
    session: its own defaults would decide for it (docs/acp-adapters.md, "Permission modes")."""
    choice = wire.asking_mode(raw)
    if choice is None:
        return None
    wanted, ids, switch = choice
    if wanted is None:
        raise AgentError(
            f"the agent offers no mode that asks before running tools (modes {ids}): "
            "the bot's permission policy could not hold"
        )
    if switch:
        try:
            await request("session/set_mode", {"sessionId": session_id, "modeId": wanted})
        except _TRANSPORT as exc:
            raise AgentError(
                f"the agent refused the session mode {wanted!r}: {wire.describe(exc)}"
            ) from None
    return wanted


async def _goose_standing(
    request: Request, session_id: str, standing: str, strategy: StandingStrategy
) -> StandingStrategy:
    """goose's ``system-prompt/set``; any failure of it (−32601 or other) falls back to legacy
    delivery, so the standing context is never lost."""
    if strategy != "goose" or not standing:
        return strategy
    try:
        await request(GOOSE_SYSTEM_PROMPT, wire.goose_system_prompt_params(session_id, standing))
    except _TRANSPORT:
        return "legacy"
    return strategy


async def open_new(
    request: Request,
    info: AgentInfo,
    strategy: StandingStrategy,
    cwd: str,
    standing: str,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
) -> Opened:
    """``session/new`` with the standing context and the MCP servers offered;
    :class:`AgentError` when refused."""
    try:
        params = wire.new_session_params(cwd, standing, strategy, info, mcp_servers)
        raw = await request("session/new", params)
        session_id = wire.session_id_of(raw)
    except _WIRE_ERRORS as exc:
        raise AgentError(f"the agent refused a new session: {wire.describe(exc)}") from None
    mode = await _asking_mode(request, session_id, raw)
    return session_id, await _goose_standing(request, session_id, standing, strategy), mode


async def reopen(
    request: Request,
    info: AgentInfo,
    method: ReopenMethod,
    session_id: str,
    strategy: StandingStrategy,
    cwd: str,
    standing: str,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
) -> Opened:
    """``session/resume`` or ``session/load`` of ``session_id``, whose standing context first
    travelled by ``strategy``, with the MCP servers offered; :class:`AgentError` when the agent
    refuses it.  The caller keeps what ``session/load`` replays out of the session's turns."""
    params = wire.reopen_params(session_id, cwd, standing, strategy, info, mcp_servers)
    try:
        raw = await request(f"session/{method}", params)
    except _WIRE_ERRORS as exc:
        raise AgentError(
            f"the agent could not {method} session {session_id!r}: {wire.describe(exc)}"
        ) from None
    mode = await _asking_mode(request, session_id, raw if isinstance(raw, dict) else {})
    return session_id, await _goose_standing(request, session_id, standing, strategy), mode


def started(hub: SessionHub, opened: Opened, reopened: ReopenMethod | None) -> SessionStart:
    """The session ``opened`` (``reopened``: how it was continued) known to ``hub``, and its
    ``session_started`` diagnostic."""
    session_id, strategy, mode = opened
    hub.session(session_id)
    payload: dict[str, Any] = {"standingStrategy": strategy}
    if mode is not None:  # docs/acp-adapters.md, "Permission modes"
        payload["permissionMode"] = mode
    if reopened is not None:
        payload["reopened"] = reopened
    hub.diagnostic("session_started", session_id, payload)
    return SessionStart(session_id=session_id, strategy=strategy, reopened=reopened)


async def close(request: Request, info: AgentInfo | None, session_id: str) -> bool:
    """``session/close`` where the agent advertises ``sessionCapabilities.close`` (bounded in
    time, any failure ignored: the session is never prompted again either way); whether it
    was sent."""
    if info is None or not info.session_close:
        return False
    with contextlib.suppress(*_TRANSPORT):
        await asyncio.wait_for(
            request("session/close", {"sessionId": session_id}), CLOSE_SESSION_TIMEOUT
        )
    return True


class SessionOpener:
    """The sessions of the driver's agent opened, continued, retired and released, and
    whether one may still be prompted (docs/bot.md, "Live sessions")."""

    def __init__(self, link: AgentLink) -> None:
        self.link = link

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
        link, info = self.link, self.link.info
        strategy = choose_strategy(link.hub.profile, info)
        opened = await open_new(link.request, info, strategy, cwd, standing, mcp_servers)
        link.hub.usage.session_started(link.hub.key(opened[0]))  # ours: zero baseline
        return started(link.hub, opened, None)

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
        hub, info = self.link.hub, self.link.info
        method = reopen_method(hub.profile, info)
        if method is None:
            raise AgentError("the agent continues no session of an earlier process")
        # Until its first prompt, what the agent sends for the session is history it replays
        # (a replayed update may still be on its way when the answer to the load is read).
        hub.replaying.add(session_id)
        try:
            opened = await reopen(
                self.link.request, info, method, session_id, strategy, cwd, standing, mcp_servers
            )
        except BaseException:
            hub.replaying.discard(session_id)
            raise
        return started(hub, opened, method)

    def usable(self, session_id: str) -> bool:
        """False for a session retired after a cancel (docs/acp-adapters.md): the caller must
        open a fresh session (with the standing context) for its next turn."""
        session = self.link.hub.sessions.get(session_id)
        return session is None or session.usable

    def compactions(self, session_id: str) -> int:
        """How many times the agent compacted this session's context (docs/envelope.md,
        "Compaction"): 0 for a session it never reported one of."""
        session = self.link.hub.sessions.get(session_id)
        return session.compactions if session is not None else 0

    async def retire(self, session_id: str) -> None:
        """Never prompt this session again; ``session/close`` it when the agent can."""
        link = self.link
        link.hub.diagnostic("session_retired", session_id, {})
        await close(link.request, link.known if link.agent.alive else None, session_id)

    async def close_session(self, session_id: str) -> bool:
        """Release an idle session: ``session/close`` where advertised (whether it was sent),
        and all the driver kept of it forgotten; a later :meth:`reopen_session` continues it
        where the agent can."""
        link = self.link
        on_wire = link.agent.alive and self.usable(session_id)  # a retired one was closed already
        sent = await close(link.request, link.known if on_wire else None, session_id)
        link.hub.forget(session_id)
        return sent
