"""The bot's budget: the caps of ``[budget]`` checked before each turn (docs/bot.md, "Budgets").

The spend compared with the caps (:mod:`nostr_buzz.core.budget`) is the agent's own settled
turns, recorded with each turn's metric when its outcome commits, plus the metrics that other
shards of the same agent key published: read from the write relays and opened through the
agent's signer (a metric is NIP-44 encrypted from the agent's key to the owner's, and that
conversation key is the sender's as much as the owner's).  Each turn counts once, by metric id
and turn id.

Over a cap, ``warn`` runs the turn and tells the owner once per period by NIP-17 private
message; ``stop`` holds the batch in the queue (no attempt counted) until the period ends or
the owner raises the cap (``!budget daily_usd 20``), and tells the sender once per period, in
the turn's own kind.  A hold is only as good as the caps it was decided under: at every start
(``buzz.toml``'s caps may have changed) and every owner's ``!budget`` the held channels are
released, and their next turn is decided again under the caps in force and the spend
(:func:`release_holds`).  The state database keeps the spend, the notices given, the owner's caps
and the channels held (the ``budget_*`` tables, :mod:`.budget_table`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from nostr_buzz.core.budget import (
    BudgetDecision,
    BudgetLedger,
    Caps,
    Spend,
    kept_since,
    with_owner_note,
    with_owner_notes,
)
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip_am import KIND, MetricPayload, created_at_of, open_own_metric_event

from .budget_table import BudgetTable
from .config import PluginConfig
from .delivery import Delivery

if TYPE_CHECKING:
    from nostr_buzz.core.queue import Batch, DispatchQueue

    from .state import BotStore

__all__ = ["BudgetGate", "admit", "release_held", "release_holds", "spend_of", "stopped_notice"]

#: Metrics of other shards asked for per decision (one page per relay): past it the spend read
#: from the relays is a lower bound (docs/bot.md, "Budgets").
PAGE_LIMIT: Final = 500


def spend_of(metric_id: str, payload: MetricPayload) -> Spend:
    """What one metric counts: the turn's cost and tokens (total, else input + output)."""
    turn = payload.turn
    cost = turn.cost_usd if turn is not None else None
    tokens = turn.total_tokens if turn is not None else None
    if tokens is None and turn is not None and turn.input_tokens is not None:
        tokens = turn.input_tokens + (turn.output_tokens or 0)
    at = float(created_at_of(payload.timestamp))
    return Spend(metric_id, at, cost, tokens, payload.turn_id)


def stopped_notice(decision: BudgetDecision) -> str:
    caps = ", ".join(f"{o.cap} = {o.limit:g}" for o in decision.over)
    return (
        f"This agent is paused: its budget ({caps}) is spent for this period. Your message "
        "stays queued and is answered when the period ends or the owner raises the budget."
    )


def warning_text(decision: BudgetDecision) -> str:
    spent = "; ".join(f"{o.cap}: {o.spent:g} of {o.limit:g} ({o.period})" for o in decision.over)
    return f"Budget reached (action = warn, turns still run): {spent}."


class BudgetGate:
    """Decides, before each turn, whether it runs (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        table: BudgetTable,
        delivery: Delivery,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.table = table
        self.delivery = delivery
        self.diagnostics = diagnostics
        self._clock = clock
        # The owner's !budget outlives restarts (checked when given).
        caps = with_owner_notes(config.budget, table.notes("cap:"))
        self.ledger = BudgetLedger(caps, notified=table.notices())
        self.ledger.add_all(table.spends())

    @property
    def caps(self) -> Caps:
        return self.ledger.caps

    @property
    def held(self) -> list[str]:
        """The queue channels held by ``stop``."""
        return list(self.table.notes("held:"))

    def record(self, metric_id: str, payload: MetricPayload) -> None:
        """A settled turn's metric (called inside the transaction that commits it)."""
        spend = spend_of(metric_id, payload)
        if self.ledger.add(spend):
            self.table.add_spend(spend)

    async def decide(self) -> BudgetDecision:
        """Run, warn or stop: the caps against the spend, other shards' read first."""
        if not self.caps.active:
            return BudgetDecision("run")
        now = self._clock()
        self.ledger.forget_before(now)
        self.table.forget_before(kept_since(now), now)
        start = self.caps.earliest_start(now)
        if start is not None:
            await self._read_shards(int(start))
        return self.ledger.decide(self._clock())

    async def _read_shards(self, since: int) -> None:
        """Add the agent key's metrics on the write relays (other shards', and our own)."""
        config = self.config
        agent = config.signer.public_key.hex
        wanted = Filter(
            kinds=(KIND,),
            authors=(agent,),
            since=since,
            limit=PAGE_LIMIT,
            tags={"p": (config.owner.hex,)},
        )
        try:
            result = await self.delivery.write_pool.query(wanted)
        except Exception as exc:  # the relays' trouble never stops a turn by itself
            self.diagnostics.emit("budget_spend_unread", payload={"error": str(exc)})
            return
        if not result.any_finished:
            errors = sorted({r.error or "?" for r in result.per_relay.values()})
            self.diagnostics.emit("budget_spend_unread", payload={"error": ", ".join(errors)})
        for event in result.events:
            if self.ledger.knows(event.id):
                continue
            try:
                payload = await open_own_metric_event(config.signer, config.owner, event)
            except BuzzError:
                continue  # not a metric this agent can read: counts nothing
            self.ledger.add(spend_of(event.id, payload))

    def first_notice(self, name: str, until: float) -> bool:
        """True (and remembered until ``until``) the first time ``name`` is asked for."""
        if not self.ledger.first_notice(name, until):
            return False
        self.table.note("notice:" + name, repr(until))
        return True

    async def warn_owner(self, decision: BudgetDecision) -> None:
        """``warn``: a private message to the owner, once per period, sent as an approval
        question is (``Delivery.tell_owner``: through the outbox, wrapped to the owner and to
        the agent): a message no relay took is tried again before the next turn."""
        name = "warn:" + decision.period
        told = name not in self.ledger.notified
        if told:
            told = await self.delivery.tell_owner(warning_text(decision))
            if told:
                self.first_notice(name, decision.until or 0.0)
        self.diagnostics.emit("budget_warned", payload={**_report(decision), "notified": told})

    def hold(self, channel: str, events: list[Event], decision: BudgetDecision) -> bool:
        """``stop``: remember the held channel; True when its sender is to be told (once per
        sender and period)."""
        self.table.note("held:" + channel, "1")
        sender = events[-1].pubkey
        told = self.first_notice(f"stop:{sender}:{decision.period}", decision.until or 0.0)
        payload = {**_report(decision), "eventIds": [e.id for e in events], "notified": told}
        self.diagnostics.emit("budget_stopped", channel_id=channel_of(channel), payload=payload)
        return told

    def change(self, content: str) -> list[str] | None:
        """The owner's ``!budget CAP VALUE`` (``off``: no cap; ``action warn|stop``): the
        channels to release now, or None when the command was not understood (reported)."""
        words = content.split()
        at = next((i for i, w in enumerate(words) if w == "!budget"), len(words))
        args = words[at + 1 : at + 3]
        try:
            if len(args) != 2:
                raise ValueError("expected !budget CAP VALUE, e.g. !budget daily_usd 20")
            caps = with_owner_note(self.caps, args[0], args[1])
        except ValueError as exc:
            self.diagnostics.emit("budget_changed", payload={"error": str(exc)})
            return None
        self.ledger.caps = caps
        self.table.note("cap:" + args[0], args[1])
        value = getattr(caps, args[0])
        self.diagnostics.emit("budget_changed", payload={"cap": args[0], "value": value})
        return self.unhold()

    def unhold(self) -> list[str]:
        """Forget every hold (the caller releases the channels): the held channels."""
        held = self.held
        for channel in held:
            self.table.note("held:" + channel, None)
        return held


def _report(decision: BudgetDecision) -> dict[str, object]:
    over = [
        {"cap": o.cap, "limit": o.limit, "spent": o.spent, "period": o.period}
        for o in decision.over
    ]
    return {"decision": decision.action, "over": over, "until": decision.until}


def release_held(gate: BudgetGate, content: str, queue: DispatchQueue, store: BotStore) -> None:
    """The owner's ``!budget CAP VALUE`` applied: the channels it no longer holds are released
    in the queue, durably."""
    _release(gate.change(content) or [], queue, store)


def release_holds(gate: BudgetGate, queue: DispatchQueue, store: BotStore) -> None:
    """At start: every channel held by the budget (a hold decided under the caps of an earlier
    run, until its period's end) is released, durably; its next turn is decided again under
    the caps in force (``budget_released``)."""
    held = gate.unhold()
    if held:
        _release(held, queue, store)
        gate.diagnostics.emit("budget_released", payload={"channels": len(held)})


def _release(channels: list[str], queue: DispatchQueue, store: BotStore) -> None:
    with store.transaction(durable=True):
        for channel in channels:
            if queue.release(channel):
                store.journal.sync_channel(queue, channel)


async def admit(
    gate: BudgetGate,
    batch: Batch,
    queue: DispatchQueue,
    store: BotStore,
    notify: Callable[[Event, str], Awaitable[None]],
) -> bool:
    """The budget's word before a turn: True to run it; False when ``stop`` held the batch
    back in the queue (no attempt counted) and told its sender (``notify``), once per
    period.  ``warn`` tells the owner and runs it."""
    decision = await gate.decide()
    if decision.action == "warn":
        await gate.warn_owner(decision)
    if decision.action != "stop" or decision.until is None:
        return True
    with store.transaction(durable=True):
        queue.hold(batch, decision.until)
        store.journal.sync_channel(queue, batch.channel)
        tell = gate.hold(batch.channel, [q.event for q in batch.events], decision)
    if tell:
        await notify(batch.events[-1].event, stopped_notice(decision))
    return False
