"""The prompt exchange: one ``session/prompt`` at a time per session, run to its end.

:class:`PromptExchange` is the driver's part that sends a turn's prompt (each compiled section
one ``text`` block), hands the turn's facts to the caller as they come, waits for the prompt's
end (its answer, a timeout, a cancel's grace, or the agent's exit: the session's state machine
decides, :mod:`nostr_buzz.acp.state`), does what the state machine asks on the wire
(``session/cancel``, retirement) and settles the turn's result and usage.  An agent's own prompt
queueing is never used (docs/acp-adapters.md, "Prompt queueing is not used").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from nostr_buzz.acp import wire
from nostr_buzz.acp.facts import AgentGone, CancelAsked, Ended, Fact, PromptSent, Tick, Update
from nostr_buzz.acp.state import Action, Phase, Retire, SendCancel, Session
from nostr_buzz.acp.types import TurnResult
from nostr_buzz.errors import AgentError

from .agent_link import AgentLink
from .agent_open import SessionOpener

__all__ = ["PromptExchange"]


def _reporter(
    on_update: Callable[[str], None] | None, on_fact: Callable[[Fact], None] | None
) -> Callable[[Fact], None]:
    def report(fact: Fact) -> None:
        if on_update is not None and isinstance(fact, Update) and fact.kind is not None:
            on_update(fact.kind)
        if on_fact is not None:
            on_fact(fact)

    return report


class PromptExchange:
    """Turns run, streamed and cancelled in the driver's sessions (see the module docstring)."""

    def __init__(self, link: AgentLink, sessions: SessionOpener) -> None:
        self.link = link
        self.sessions = sessions

    def _ready(self, session_id: str) -> Session:
        """The session's state machine, when a prompt may be sent in it now."""
        if self.link.agent.conn is None:
            raise AgentError("the agent is not started: call start() first")
        session = self.link.hub.session(session_id)
        if session.phase == Phase.RETIRED:
            raise AgentError(
                f"session {session_id!r} was retired after a cancelled or failed turn: "
                "open a new session"
            )
        if session.phase != Phase.IDLE or session.own_phase == "running":
            raise AgentError(f"a prompt is already running in session {session_id!r}")
        return session

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
        session = self._ready(session_id)
        conn, hub = self.link.agent.conn, self.link.hub
        usage = hub.usage
        assert conn is not None  # _ready checked it
        started_at = self.link.clock()
        hub.replaying.discard(session_id)  # what follows is this turn's
        hub.feed(session_id, session, PromptSent())
        record = session.turn
        assert record is not None
        key = hub.key(session_id)
        usage.begin_turn(key)
        params = wire.prompt_params(session_id, sections)
        hub.on_fact[session_id] = _reporter(on_update, on_fact)
        prompt = asyncio.ensure_future(conn.send_request("session/prompt", params))
        hub.watch(session_id, session, prompt)
        hub.report(session_id, PromptSent())
        try:
            await self._wait(session_id, session)
        finally:
            if not prompt.done():
                prompt.cancel()
            with contextlib.suppress(BaseException):
                await prompt
            hub.prompts.pop(session_id, None)
            hub.on_fact.pop(session_id, None)
        split = hub.split.pop(session_id, ...)
        spent = usage.end_turn(key) if split is ... else split
        turn_seq = spent.turn_seq if spent is not None else usage.unknown_turn(key)
        ending, actions = session.settle(spent, asyncio.get_running_loop().time())
        await self._perform(session_id, actions)
        result = record.result(ending, spent, turn_seq, session_id, started_at, self.link.clock())
        if ending.evidence == "agent_exit":
            await self.link.reap()
        return result

    async def turn(self, session_id: str, sections: Sequence[str]) -> AsyncIterator[Fact]:
        """One prompt as a stream of facts: ``PromptSent`` once it is on the wire, what the
        agent reports in the turn (updates, text, tool calls, usage, permission asked, steer
        answered, its own turn begun), and ``Ended`` with its result, last.  Raises what
        :meth:`run_turn` raises; leaving the stream early abandons the prompt."""
        facts: asyncio.Queue[Fact | None] = asyncio.Queue()
        running = asyncio.ensure_future(
            self.run_turn(session_id, sections, on_fact=facts.put_nowait)
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
        loop, hub = asyncio.get_running_loop(), self.link.hub
        wake = hub.wakes[session_id]
        while session.phase in (Phase.PROMPTING, Phase.CANCELLING):
            if self.link.agent.conn is None:
                hub.feed(session_id, session, AgentGone("the agent was closed"))
                return
            await self._perform(session_id, hub.feed(session_id, session, Tick()))
            at = session.deadline()
            if at is None:
                return
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(0.0, at - loop.time()))

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``; the running turn then ends on the agent's answer (or after
        ``cancel_grace`` without one)."""
        session = self.link.hub.sessions.get(session_id)
        if session is None:
            await self.link.notify("session/cancel", {"sessionId": session_id})
            return
        await self._perform(session_id, self.link.hub.feed(session_id, session, CancelAsked()))

    async def _perform(self, session_id: str, actions: Sequence[Action]) -> None:
        """What the state machine asks for on the wire."""
        for action in actions:
            if isinstance(action, SendCancel):
                await self.link.notify("session/cancel", {"sessionId": session_id})
            elif isinstance(action, Retire):
                await self.sessions.retire(session_id)
