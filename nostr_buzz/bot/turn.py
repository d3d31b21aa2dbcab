"""The running turn: one batch from flush to settlement, and the steers delivered into it.

A :class:`Turn` moves through explicit phases, never backwards:

* ``PREPARING`` — flushed; the session is opened, the context resolved, the turn compiled.
  Nothing is on the wire, so nothing can be steered or cancelled at the agent yet (a cancel
  is remembered and applied as soon as the prompt goes out).
* ``LIVE`` — the prompt is on the wire: steers may be delivered (one at a time).
* ``ENDED`` — the prompt answered: no new steer starts; one already on the wire is awaited
  (bounded) before the metric snapshots the ledger, so an injected steer answered after the
  prompt response still reaches the metric.
* ``SETTLED`` — the outcome is recorded in the queue and the state database.

The agent's permission requests are decided on the running turns
(:meth:`.running.RunningTurns.permission`, the rule in :mod:`nostr_buzz.core.permission`):
only for a turn that is live in the asking session; ``permissions = "owner"`` approves only
when every actor whose words reach that turn (its batch, the cancelled events riding with it,
every steer sent into it) and every actor whose words entered the session before is the owner;
``allow`` approves for any live turn; ``ask`` (and ``owner`` for a request someone else's words
stand in the way of) asks the owner by private message and waits for the answer
(:mod:`.approvals`).  The turn counts its decisions for its metric.

Every turn that reached the agent gets a metric, cancelled and failed ones included; a turn
the agent reported no usage for has every counter unknown.  A failed turn emits
``turn_failed`` with the agent's error (a private conversation's: its class, :mod:`.privacy`).

Settling: success completes the batch (its ids count as delivered); a cancel for ``interrupt``
or ``steer`` stores the batch as cancelled events for the channel's next turn; the owner's
``!cancel`` (or a cancel by the agent itself) drops it as delivered; a failure returns it to
the queue with backoff, until it is dead-lettered.

Here: a batch run from its flush to its settlement, the owner's commands, and the commit that
stores a turn's outcome with its replies and metrics.  Its parts: the worker's looks at the
queue (:mod:`.worker`), the prompt made ready (:mod:`.preparer`), steers (:mod:`.steering`),
what a turn reports (:mod:`.turn_report`), and what becomes of its batch (:mod:`.settling`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from nostr_buzz.acp.facts import Ended, PromptSent
from nostr_buzz.acp.types import TurnResult
from nostr_buzz.core.compiler import CompiledTurn
from nostr_buzz.core.queue import Batch, DispatchQueue
from nostr_buzz.core.session_key import channel_of, thread_of
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload

from .budget import BudgetGate, admit, release_held, release_holds
from .config import PluginConfig
from .context import ContextResolver
from .delivery import Delivery, Signed
from .intake import in_flight_action
from .preparer import TurnPreparer
from .running import CancelWhy, Output, Phase, RunningTurns, Turn
from .settling import Notice, Settling
from .state import BotStore
from .steering import Steering
from .supervisor import AgentSupervisor
from .telemetry import open_telemetry
from .thread_checkpoints import ThreadCheckpoints
from .turn_report import TurnReport
from .worker import Worker

__all__ = ["TurnRunner"]

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class TurnRunner:
    """Runs flushed batches as turns and settles them (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        queue: DispatchQueue,
        store: BotStore,
        supervisor: AgentSupervisor,
        resolver: ContextResolver,
        delivery: Delivery,
        diagnostics: DiagnosticsFeed,
        *,
        clock: Callable[[], float],
        spawn: Spawn,
        wake: Callable[[], None],
        running: RunningTurns,
    ) -> None:
        # One cache of people's relay lists (NIP-65): replies go to where they read, history
        # is read where they write.
        resolver.directory = delivery.signing.directory
        if running.approvals is not None:  # the owner's DM relays, read through it
            running.approvals.directory = delivery.signing.directory
        self.config, self.queue, self.store = config, queue, store
        self.supervisor, self.delivery, self.diagnostics = supervisor, delivery, diagnostics
        self._clock, self._spawn, self._wake = clock, spawn, wake
        #: The running turn of each queue channel.
        self.running = running
        self.budget = BudgetGate(config, store.budget, delivery, diagnostics, clock)
        self.checkpoints = ThreadCheckpoints(config, delivery, diagnostics, clock)
        self.checkpoints.summarize_on_close(supervisor, store, self.budget)
        self.telemetry = open_telemetry(config, diagnostics, supervisor, clock)
        running.decided = self.telemetry.permission  # each decision, for the turn's span
        running.retrieved = self.telemetry.retrieval  # each call of the agent's Nostr tools
        self.preparer = TurnPreparer(store, supervisor, resolver, self.checkpoints, diagnostics)
        self.steering = Steering(
            queue, supervisor, resolver, diagnostics, clock, self.telemetry, self.cancel
        )
        self.report = TurnReport(config, supervisor, diagnostics)
        self.settling = Settling(queue, store, supervisor, diagnostics, clock)
        self.worker = Worker(queue, config.coalesce_window, clock, wake, self._start)
        # A hold of an earlier run was decided under the caps of then: decided again now.
        release_holds(self.budget, queue, store)

    # -- the worker -----------------------------------------------------------------------

    async def work(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        """Flush batches and run each as a turn until ``stop``; ``wake`` says the queue changed
        (:class:`.worker.Worker`).  Then the turns' telemetry is exported."""
        try:
            await self.worker.work(stop, wake)
        finally:
            # The bot is stopping: the turns cancelled with the worker end their spans first,
            # then what is left is exported (bounded, in a thread: docs/bot.md, "Telemetry").
            await asyncio.sleep(0)
            await self.telemetry.aclose()

    def admitted(self, channel: str, now: float) -> None:
        """An event was queued for ``channel`` at ``now``: the worker looks again when it may
        matter (:meth:`.worker.Worker.admitted`)."""
        self.worker.admitted(channel, now)

    def _start(self, batch: Batch) -> None:
        self._spawn(self.run(batch), f"buzz-turn {batch.channel}")

    async def react(self, channel: str, event: Event, prompt_tag: str) -> None:
        """An admitted event for ``channel`` whose turn is running: steer it, interrupt it, or
        (most often) let the event wait for a turn of its own (:func:`.intake.in_flight_action`)."""
        turn = self.running.get(channel)
        if turn is None or not self.queue.in_flight(channel):
            return
        newest = turn.batch.events[-1].event
        action = in_flight_action(self.config.in_flight, newest, event)
        if action == "steer":
            self._spawn(self.steering.steer(turn, event, prompt_tag), "buzz-steer")
        elif action == "interrupt":
            await self.cancel(turn, "interrupt")

    async def obey(self, command: Literal["cancel", "new", "budget"], event: Event) -> None:
        """The owner's ``!cancel`` (:meth:`cancel_for_owner`), ``!new`` (the channel's next turn
        opens a new agent session, with the standing context as it is then: a running turn
        ends in the session it has) or ``!budget`` (:meth:`change_budget`).  Under ``thread``
        scope a command in a thread addresses that thread's session; one at a channel's top
        level, every thread of the channel (docs/bot.md, "Session scope")."""
        key = self.queue.channel_of(event)
        whole = thread_of(key) == event.id  # a top-level command under thread scope
        if command == "budget":
            self.change_budget(event.content)
        elif command == "cancel":
            await self.cancel_for_owner(key, whole)
        elif whole:
            self.supervisor.end_channel(channel_of(key), self.store.receipts)
        else:
            self.supervisor.end_session(key, self.store.receipts)

    async def cancel_for_owner(self, key: str, whole: bool = False) -> None:
        """The owner's ``!cancel``: the running turn of its key (``whole``: of every thread of
        its channel), else every running turn."""
        running = self.running
        targets = [running[key]] if key in running else []
        if whole:
            targets = [t for k, t in running.items() if channel_of(k) == channel_of(key)]
        for turn in targets or list(running.values()):
            await self.cancel(turn, "owner")

    def change_budget(self, content: str) -> None:
        """The owner's ``!budget CAP VALUE``: the channels the budget held are looked at again."""
        release_held(self.budget, content, self.queue, self.store)
        self._wake()

    async def _within_budget(self, batch: Batch) -> bool:
        """The budget's word before a turn: False when ``stop`` held the batch back."""
        admitted = await admit(self.budget, batch, self.queue, self.store, self.delivery.notify)
        if not admitted:
            self._wake()
        return admitted

    # -- one turn -------------------------------------------------------------------------

    async def run(self, batch: Batch) -> None:
        """Run ``batch`` to its settlement; never raises (but for cancellation)."""
        if not await self._within_budget(batch):
            return
        turn = Turn.of(batch)
        self.running[batch.channel] = turn
        started_at = datetime.fromtimestamp(self._clock(), UTC)
        events = [q.event for q in batch.events]
        self.telemetry.started(turn.turn_id, batch.channel, events)
        # A private answer's DM relays, looked up while the turn runs (a round trip saved).
        dm_lookup = self.delivery.signing.private.look_up(batch.events[-1].event)
        try:
            prepared = await self.preparer.prepare(turn)
            if prepared is None:  # cancelled before the prompt went out
                await self._commit(turn, lambda: self.settling.cancelled(turn))
                return
            compiled, history_ids = prepared
            result = await self._prompt(turn, compiled)
            self.report.completed(turn, result)
            followups = await self.steering.follow(turn, self.report.output)
            targets = [turn.batch.events[-1].event, *(out.target for out in followups)]
            dm_relays = await self.delivery.signing.private.relays_for(dm_lookup, targets)
            await self._finish(turn, result, history_ids, started_at, followups, dm_relays)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # resolution, session or compile trouble: retry the batch
            private = nip10.is_private_channel(batch.channel)  # its class only: no text
            log.warning(
                "turn in %s failed: %s", batch.channel, type(exc).__name__ if private else exc
            )
            self.report.failed(turn, f"{type(exc).__name__}: {exc}", None, type(exc).__name__)
            self.telemetry.failed(turn.turn_id, type(exc).__name__)
            await self._commit(turn, lambda: self.settling.failed(turn))
            if self.supervisor.needs_restart(None):
                self._spawn(self.supervisor.ensure_agent(), "buzz-agent-restart")
        finally:
            dm_lookup.cancel()  # a no-op once it has answered
            self.running.withdraw(turn)
            if (note := self.running.ended(turn)) is not None:
                self._spawn(note, "buzz-limit-note")
            turn.advance(Phase.SETTLED)
            if self.running.get(batch.channel) is turn:
                del self.running[batch.channel]
            self.supervisor.live.notify()  # its session is idle: it may be closed for room
            # Whatever the way out (a cancel before the prompt, a stop): no longer running.
            self.diagnostics.emit("turn_ended", **turn.ids.as_kwargs(), payload={})
            self.telemetry.ended(turn.turn_id, cancelled=turn.cancel_reason is not None)
            self._wake()

    async def _commit(
        self,
        turn: Turn,
        settle: Callable[[], list[Notice]],
        outputs: Sequence[Output] = (),
        dm_relays: Mapping[str, tuple[str, ...]] | None = None,
        checkpoint: Signed | None = None,
    ) -> None:
        """Sign the turn's replies and metrics through the agent's signer (before any
        transaction: a signer may answer over the network), record the outcome with them in
        one durable transaction, then send them: a crash before the commit leaves the batch
        (and any steer that started a turn of its own) to run again with nothing published;
        after it, the outbox holds exactly these replies and metrics (and the ``checkpoint`` a
        compaction left).  A dead-letter notice, known once the queue has settled, is signed
        and stored just after."""
        replies: list[Signed] = []
        metrics: list[Signed] = []
        spent: list[tuple[str, MetricPayload]] = []  # each turn's spend, for the budget
        metric_of: list[tuple[Output, Signed | None]] = []  # each metric's turn (telemetry)
        for out in outputs:
            if out.payload is not None:
                metric = await self.delivery.signing.sign_metric(out.payload, out.ids)
                metrics += [metric] if metric is not None else []
                metric_of.append((out, metric))
                key = metric.events[0].id if metric is not None else f"turn:{out.ids.turn_id}"
                spent.append((key, out.payload))
            if out.reply is not None:
                replies.append(
                    await self.delivery.signing.sign_reply(
                        out.target, out.reply, out.ids, dm_relays
                    )
                )
        with self.store.transaction(durable=True):
            made = [checkpoint] if checkpoint is not None else []
            stored = [
                e
                for signed in [*replies, *metrics, *made]
                for e in self.delivery.store_signed(signed)
            ]
            notices = settle()
            self.store.journal.sync_channel(self.queue, turn.batch.channel)
            for key, payload in spent:
                self.budget.record(key, payload)
        if checkpoint is not None:
            self.checkpoints.queued(checkpoint)
        self.delivery.send(stored)
        for out, signed in metric_of:
            metric_id = signed.events[0].id if signed is not None else None
            self.telemetry.committed(out.ids, turn.batch.channel, out.payload, metric_id, out.reply)
        for target, text in notices:
            await self.delivery.notify(target, text)

    async def _prompt(self, turn: Turn, compiled: CompiledTurn) -> TurnResult:
        assert turn.session is not None
        driver = self.supervisor.driver
        session_id = turn.session.start.session_id
        turn.earlier_actors = frozenset(turn.session.actors)  # named in the owner's question
        turn.session.actors.update(turn.provenance().actors())  # before the agent can ask
        if self.supervisor.continues_sessions:  # docs/bot.md, "Sessions that survive a restart"
            self.store.receipts.begin_turn(turn.batch.channel, turn.session.receipt())
        result: TurnResult | None = None
        async for fact in driver.turn(session_id, compiled.sections):
            if isinstance(fact, PromptSent):  # on the wire: from here steers may go
                turn.advance(Phase.LIVE)
                if turn.cancel_reason is not None:
                    await driver.cancel(session_id)
            elif isinstance(fact, Ended):
                result = fact.result
        assert result is not None  # the stream ends with its result
        turn.advance(Phase.ENDED)
        # A steer the agent answered before its prompt response belongs to this turn's
        # ledger: let it finish (bounded by the driver's request timeout) before the metric
        # takes the snapshot and the batch settles.  Steers still waiting find the turn ended.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(driver.request_timeout + 1), turn.steer_lock:
                pass
        return result

    async def _finish(
        self,
        turn: Turn,
        result: TurnResult,
        history_ids: list[str],
        started_at: datetime,
        followups: list[Output],
        dm_relays: Mapping[str, tuple[str, ...]],
    ) -> None:
        session = turn.session
        assert session is not None
        ids = turn.ids
        main = self.report.output(
            turn.batch.events[-1].event,
            [q.event for q in turn.batch.events],
            turn.ledger.snapshot(),
            result,
            ids,
            started_at,
            turn.permissions,
        )
        outputs = [main, *followups]
        made = await self.checkpoints.after_turn(turn.batch.channel, session, result, ids)
        await self._commit(
            turn,
            lambda: self.settling.ended(turn, result, session, history_ids),
            outputs,
            dm_relays,
            made,
        )
        if self.supervisor.needs_restart(result):
            self._spawn(self.supervisor.ensure_agent(), "buzz-agent-restart")

    # -- cancel and steer -----------------------------------------------------------------

    async def cancel(self, turn: Turn, reason: CancelWhy) -> None:
        """Cancel ``turn`` (the first reason given wins)."""
        if turn.cancel_reason is None:
            turn.cancel_reason = reason
        self.running.withdraw(turn)
        if turn.may_cancel_at_agent():
            assert turn.session is not None
            await self.supervisor.driver.cancel(turn.session.start.session_id)
