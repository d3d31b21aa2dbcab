"""Native steering: a compiled steer delivered into a running turn, and the turn the agent may
start on its own with it.

:class:`NativeSteering` is the driver's part that sends a steer by the route the adapter's
profile gives (:func:`~nostr_buzz.acp.profiles.steer_route`; unknown methods are never probed),
tells the session's state machine it was sent and how it was answered, and collects the turn an
agent started on its own after answering ``startedNewTurn``: ACP has no end signal for a turn
without a prompt, so that turn is over once the agent has been quiet for a while.  A second
steer while one is in flight for the same turn is ``released`` (the queue keeps the event); a
steer that times out counts as a transport failure (``failed``).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

from acp.exceptions import RequestError

from nostr_buzz.acp import wire
from nostr_buzz.acp.facts import SteerAnswered, SteerSent
from nostr_buzz.acp.profiles import steer_route
from nostr_buzz.acp.types import Ending, SteerOutcome, TurnResult

from .agent_link import AgentLink

__all__ = ["NativeSteering"]


class NativeSteering:
    """Steers sent into the driver's running turns, and the agent's own turns they start (see
    the module docstring)."""

    def __init__(self, link: AgentLink) -> None:
        self.link = link
        #: When a steer that may start the agent's own turn was sent, per session.
        self._own_started: dict[str, datetime] = {}

    def _route(self, session_id: str) -> tuple[str, str | None] | None:
        hub = self.link.hub
        session = hub.sessions.get(session_id)
        return steer_route(hub.profile, self.link.known, session.run_id if session else None)

    def can_steer(self, session_id: str) -> bool:
        """Whether a native steer transport exists for the session right now."""
        return self.link.agent.alive and self._route(session_id) is not None

    async def steer(self, session_id: str, text: str) -> SteerOutcome:
        """Deliver one compiled steer (``CompiledSteer.text``) natively.

        ``injected``: the running turn took it (add its manifest to the turn ledger);
        ``started_new_turn``: the agent started a new turn with it (report, do not add);
        ``failed``: no native steer, −32601, transport failure or another outcome (cancel the
        turn and merge); ``released``: another error, or a steer already in flight (release
        the event).  Unknown methods are never probed.
        """
        link, hub = self.link, self.link.hub
        route = self._route(session_id)
        if route is None or not link.agent.alive:
            return "failed"
        method, run_id = route
        session = hub.session(session_id)
        if not session.may_steer():
            return "released"
        started = link.clock()
        # Sent before the answer: the agent may start writing a turn of its own at once.
        hub.feed(session_id, session, SteerSent())
        self._own_started.setdefault(session_id, started)
        outcome: SteerOutcome
        try:
            raw = await link.request(method, wire.steer_params(session_id, text, run_id))
        except RequestError as exc:
            outcome = wire.steer_error(exc.code)
        except (ConnectionError, OSError, TimeoutError):
            outcome = "failed"
        else:
            outcome = wire.steer_answer(raw, any_success=run_id is not None)
        hub.feed(session_id, session, SteerAnswered(outcome))
        if session.own is None:
            self._own_started.pop(session_id, None)
        hub.diagnostic("steer_sent", session_id, {"method": method, "result": outcome})
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
        link, hub = self.link, self.link.hub
        session = hub.sessions.get(session_id)
        record = session.begin_own() if session is not None else None
        if session is None or record is None:
            return None
        started_at = self._own_started.pop(session_id, None) or link.clock()
        key, tracker = hub.key(session_id), hub.usage
        tracker.begin_turn(key)  # a no-op when its first update already began it
        loop, wake = asyncio.get_running_loop(), hub.wakes[session_id]
        try:
            while link.agent.conn is not None:
                limit = quiet if record.heard else min(hub.timeouts.idle, silence)
                deadline = min(record.last_activity + limit, record.hard_deadline)
                if loop.time() >= deadline:
                    break
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), deadline - loop.time())
                record.heard = record.heard or bool(record.chunks)
        finally:
            session.end_own()
        usage = tracker.end_turn(key)
        turn_seq = usage.turn_seq if usage is not None else tracker.unknown_turn(key)
        if link.agent.conn is not None:  # the harness stopped waiting
            ending = Ending("unknown", "success", "timeout")
        else:
            ending = Ending("error", "failed", "agent_exit")
        return record.result(ending, usage, turn_seq, session_id, started_at, link.clock())
