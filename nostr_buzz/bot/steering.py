"""Steering: an event that arrives while its channel's turn runs, delivered into that turn
once its prompt is live (docs/queue.md, "In flight"; docs/envelope.md, "The turn ledger").  An
injected steer is in the turn's ledger before it is acknowledged; one the agent answers with a
turn of its own is a follow-up; a failed one cancels the turn so that the batch and the steer
run again together; one that finds the turn ended stays pending for the channel's next batch."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Final

from nostr_buzz.acp.types import TurnResult
from nostr_buzz.core.compiler import compile_steer
from nostr_buzz.core.queue import DispatchQueue, QueuedEvent
from nostr_buzz.errors import QueueError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.manifest import Manifest

from .context import ContextResolver
from .outputs import TurnIds
from .running import CancelWhy, Followup, Output, Phase, Turn
from .supervisor import AgentSupervisor
from .telemetry import TurnTelemetry

__all__ = ["FOLLOW_QUIET", "FOLLOW_SILENCE", "Steering"]

#: A turn the agent started on its own is over once it has been quiet this long (seconds),
#: or given up when nothing at all came for ``FOLLOW_SILENCE``.
FOLLOW_QUIET: Final = 1.0
FOLLOW_SILENCE: Final = 30.0

#: The runner's output of a turn: its target, the events it took, its manifest, the result,
#: its ids and when it started.
MakeOutput = Callable[[Event, list[Event], Manifest | None, TurnResult, TurnIds, datetime], Output]


class Steering:
    """Steers into the bot's running turns, through its agent and its queue."""

    def __init__(
        self,
        queue: DispatchQueue,
        supervisor: AgentSupervisor,
        resolver: ContextResolver,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
        telemetry: TurnTelemetry,
        cancel: Callable[[Turn, CancelWhy], Awaitable[None]],
    ) -> None:
        self.queue, self.supervisor, self.resolver = queue, supervisor, resolver
        self.diagnostics, self.telemetry = diagnostics, telemetry
        self._clock, self._cancel = clock, cancel

    async def steer(self, turn: Turn, event: Event, prompt_tag: str) -> None:
        """Deliver ``event`` into ``turn`` once its prompt is live; if the turn ends first (or
        is being cancelled), the event stays pending and rides with the channel's next batch."""
        await turn.until(lambda t: t.phase >= Phase.LIVE)
        async with turn.steer_lock:
            if turn.may_steer():
                await self._deliver(turn, event, prompt_tag)

    async def _deliver(self, turn: Turn, event: Event, prompt_tag: str) -> None:
        assert turn.session is not None
        steer = compile_steer(
            event,
            channel_id=turn.channel_id,
            channel_type=turn.channel_type,
            prompt_tag=prompt_tag,
            retrieval=self.resolver.retrieval_of(turn.session),
        )
        # Its words reach the agent whatever the answer: they count for permissions from now.
        turn.steer_actors.append(event.pubkey)
        turn.session.actors.add(event.pubkey)
        outcome = await self.supervisor.driver.steer(turn.session.start.session_id, steer.text)
        ids = turn.ids.as_kwargs()
        now = self._clock()
        self.telemetry.steer(turn.turn_id, event, outcome)
        if outcome == "injected":
            turn.ledger.accept_update(steer.manifest)  # in the ledger before it is acknowledged
            taken = self.result(event.id, "injected", now)
            turn.steered += [taken] if taken is not None else []
            self.diagnostics.prompt_context_steer("injected", turn.ledger.snapshot(), **ids)
        elif outcome == "started_new_turn":
            # A turn of its own: answered and metered after this one's prompt returns, and
            # only then delivered in the queue (committed with this turn's outcome).
            turn.followups.append(Followup(event, steer.manifest))
            self.diagnostics.prompt_context_steer("startedNewTurn", steer.manifest, **ids)
        elif outcome == "failed":
            self.diagnostics.prompt_context_steer("failed", None, **ids)
            await self._cancel(turn, "steer")
        else:  # released: the event stays pending
            self.diagnostics.prompt_context_steer("released", None, **ids)
        # Nothing is written here: an injected steer's row stays until the turn's outcome
        # (and the reply that answers it) commits, so a crash before that runs it again.

    def result(self, event_id: str, outcome: str, now: float) -> QueuedEvent | None:
        """The queue told what became of a steer (:meth:`DispatchQueue.steer_result`); the
        event it settled, if any."""
        try:
            return self.queue.steer_result(event_id, outcome, now)
        except QueueError:
            return None

    async def follow(self, turn: Turn, output: MakeOutput) -> list[Output]:
        """The turns the agent started on its own for steers (``startedNewTurn``): each is
        answered in the steer's thread and metered with the steer's own manifest.  A steer
        whose turn never showed anything stays queued for a turn of its own.  ``output``
        makes each one's reply and metric (the runner's)."""
        outputs: list[Output] = []
        session = turn.session
        for followup in turn.followups if session is not None else []:
            assert session is not None
            result = await self.supervisor.driver.follow_turn(
                session.start.session_id, quiet=FOLLOW_QUIET, silence=FOLLOW_SILENCE
            )
            if result is None or (result.usage is None and not result.reply.strip()):
                continue
            self.result(followup.event.id, "started_new_turn", self._clock())
            ids = TurnIds(turn.channel_id, session.metric_session_id, uuid.uuid4().hex)
            self.diagnostics.turn_started([followup.event.id], **ids.as_kwargs())
            self.diagnostics.turn_completed(result.outcome, result.stop_reason, **ids.as_kwargs())
            event = followup.event
            outputs.append(
                output(event, [event], followup.manifest, result, ids, result.started_at)
            )
        return outputs
