"""What becomes of a turn's batch in the queue once the turn's outcome is known (docs/queue.md,
"Cancel, interrupt and steer"; :func:`.running.settlement`): success completes it and the
session learns what it now holds; a cancel for ``interrupt`` or ``steer`` stores it as
cancelled events for the channel's next turn; the owner's ``!cancel`` (or a cancel by the agent
itself) drops it as delivered; a failure returns it to the queue with backoff until it is
dead-lettered, with one short notice in its thread.  The steers injected into a turn that did
not complete were not answered: they are queued again.

Each of these runs inside the durable transaction of the runner's commit (:mod:`.turn`), so the
queue's settlement is stored with the turn's replies and metrics."""

from __future__ import annotations

from collections.abc import Callable

from nostr_buzz.acp.types import TurnResult
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed

from .outputs import dead_letter_notice
from .running import Turn, settlement
from .state import BotStore
from .supervisor import AgentSupervisor, ChannelSession

__all__ = ["Notice", "Settling"]

#: A notice to sign and send once the queue has settled: (the event it answers, its text).
Notice = tuple[Event, str]


class Settling:
    """Settles the bot's turns in its queue (see the module docstring); each method gives the
    notices to send once the settlement is committed."""

    def __init__(
        self,
        queue: DispatchQueue,
        store: BotStore,
        supervisor: AgentSupervisor,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
    ) -> None:
        self.queue, self.store, self.supervisor = queue, store, supervisor
        self.diagnostics, self._clock = diagnostics, clock

    def ended(
        self, turn: Turn, result: TurnResult, session: ChannelSession, history: list[str]
    ) -> list[Notice]:
        """Record the outcome of a turn the agent answered; ``history``: the ids of the thread
        history its prompt carried (delivered with it)."""
        batch = turn.batch
        if settlement(result.outcome, turn.cancel_reason) == "complete":
            self.queue.complete(batch)
            session.delivered.update(q.event.id for q in batch.events)
            session.delivered.update(q.event.id for q in batch.cancelled_events)
            session.delivered.update(history)
            session.delivered.update(q.event.id for q in turn.steered)
            session.covered = batch.events[-1].event.id
            if turn.standing_sent_at is not None:
                session.standing_compactions = turn.standing_sent_at
            if self.supervisor.continues_sessions:
                self.store.receipts.complete_turn(batch.channel, session.receipt())
            return []
        if result.outcome == "cancelled":
            return self.cancelled(turn)
        return self.failed(turn)

    def cancelled(self, turn: Turn) -> list[Notice]:
        """A cancelled turn (before its prompt went out, or answered ``cancelled``)."""
        if turn.session is not None:
            self.supervisor.forget(turn.batch.channel, turn.session, self.store.receipts)
        reason = turn.cancel_reason
        if settlement("cancelled", reason) == "requeue":
            assert reason == "interrupt" or reason == "steer"
            self.queue.requeue_cancelled(turn.batch, reason)
            self._readmit_steers(turn)
        else:  # the owner's !cancel, or the agent cancelled on its own: dropped, not retried
            self.queue.complete(turn.batch)
        return []

    def failed(self, turn: Turn) -> list[Notice]:
        """Back to the queue with backoff; a dead letter gets one short notice in its thread
        (signed, stored and sent once the settlement is committed)."""
        dead = self.queue.fail(turn.batch, self._clock())
        self._readmit_steers(turn)
        if dead is None:
            return []
        self.diagnostics.emit(
            "event_dead_lettered",
            channel_id=channel_of(dead.channel),
            payload={"eventIds": [q.event.id for q in dead.events], "attempts": dead.attempts},
        )
        return [(dead.events[-1].event, dead_letter_notice(dead.attempts))]

    def _readmit_steers(self, turn: Turn) -> None:
        """The steers injected into a turn that did not complete were not answered: they are
        queued again (their rows never left the state database)."""
        for steer in turn.steered:
            if self.queue.forget(steer.event.id):
                self.queue.push(steer.event, steer.prompt_tag, now=steer.received_at)
