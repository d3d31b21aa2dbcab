"""The bot's budget state in the state database: spend, the owner's caps, notices and held
channels survive a restart; the owner's ``!budget`` is parsed strictly (the relays' part and
the turns held are in tests/e2e/bot/test_budget.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from nostr_buzz.bot.budget import BudgetGate, release_holds, spend_of
from nostr_buzz.bot.delivery import Delivery
from nostr_buzz.bot.state import BotStore
from nostr_buzz.core.budget import Caps
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts
from tests.support.events import chat
from tests.support.keys import ALICE, offline_config

NOW = datetime(2026, 12, 4, 18, 30, tzinfo=UTC).timestamp()
TS = "2026-12-04T18:29:00.000Z"


def gate(state: Path, records: list[DiagnosticRecord]) -> tuple[BudgetGate, BotStore]:
    config = offline_config(state_dir=state, budget=Caps(daily_usd=0.01, action="stop"))
    feed = DiagnosticsFeed(None, clock=lambda: datetime.now(UTC), callback=records.append)
    store = BotStore(state)
    delivery = Delivery(config, store, feed, lambda c, n: None, lambda: NOW)  # type: ignore[arg-type,return-value]
    return BudgetGate(config, store.budget, delivery, feed, lambda: NOW), store


def test_spend_caps_notices_and_held_channels_survive_a_restart(tmp_path: Path) -> None:
    records: list[DiagnosticRecord] = []
    first, store = gate(tmp_path / "state", records)
    payload = MetricPayload(
        harness="h", timestamp=TS, turn_id="t1", turn=TokenCounts(1, 2, None, 0.02)
    )
    with store.transaction():
        first.record("m1", payload)
        first.record("m1-again", payload)  # the same turn: counted once
    stop = first.ledger.decide(NOW)
    assert stop.action == "stop" and first.ledger.spent("daily_usd", NOW) == 0.02
    store.budget.note("held:room", "1")
    assert first.first_notice("stop:x:" + stop.period, stop.until or 0)
    store.close()

    again, store = gate(tmp_path / "state", records)
    assert again.ledger.spent("daily_usd", NOW) == 0.02
    assert again.ledger.spent("daily_tokens", NOW) == 3  # no total: input + output
    assert not again.first_notice("stop:x:" + stop.period, stop.until or 0)  # told once
    assert again.held == ["room"]
    assert again.change("nostr:npub1xyz !budget daily_usd 1") == ["room"]
    assert again.held == [] and again.ledger.decide(NOW).action == "run"
    store.close()

    third, store = gate(tmp_path / "state", records)
    assert third.caps.daily_usd == 1.0  # the owner's cap outlives the restart
    for bad in ("!budget", "!budget daily_usd lots", "!budget yearly_usd 5", "!budget action go"):
        assert third.change(bad) is None
    assert third.change("!budget action warn") == [] and third.caps.action == "warn"
    errors = [r.payload.get("error") for r in records if r.kind == "budget_changed"]
    assert len([e for e in errors if e]) == 4
    store.close()


def test_a_hold_of_an_earlier_run_is_released_at_start_and_decided_again(tmp_path: Path) -> None:
    """A hold lasts to its period's end in the queue: at the next start it is released (its
    backoff gone from the state database too), so the caps in force decide the next turn."""
    records: list[DiagnosticRecord] = []
    _, store = gate(tmp_path / "state", records)
    queue = store.journal.load_queue()
    event = chat(ALICE, int(NOW), content="held")
    assert queue.push(event, now=NOW).accepted
    store.journal.record_push(queue, QueuedEvent(event, "@mention", NOW), [], 1)
    batch = queue.flush_next(NOW)
    assert batch is not None
    with store.transaction(durable=True):
        queue.hold(batch, NOW + 3600)
        store.journal.sync_channel(queue, batch.channel)
    store.budget.note("held:" + batch.channel, "1")
    assert queue.flush_next(NOW + 60) is None  # held
    store.close()

    again, store = gate(tmp_path / "state", records)
    queue = store.journal.load_queue()
    assert queue.flush_next(NOW + 60) is None  # the stored hold, until the period's end
    release_holds(again, queue, store)
    assert again.held == [] and queue.flush_next(NOW + 60) is not None
    [released] = [r for r in records if r.kind == "budget_released"]
    assert released.payload == {"channels": 1}
    store.close()
    third, store = gate(tmp_path / "state", records)
    assert store.journal.load_queue().flush_next(NOW + 60) is not None  # released durably
    release_holds(third, store.journal.load_queue(), store)  # nothing held: nothing said
    assert len([r for r in records if r.kind == "budget_released"]) == 1
    store.close()


def test_what_a_metric_counts() -> None:
    counts = {
        TokenCounts(10, 5, 20, 0.5): (0.5, 20),
        TokenCounts(10, None, None, None): (None, 10),
        TokenCounts(None, 5, None, None): (None, None),
    }
    for turn, (cost, tokens) in counts.items():
        spend = spend_of("m", MetricPayload(harness="h", timestamp=TS, turn=turn))
        assert (spend.cost_usd, spend.tokens, spend.at) == (cost, tokens, NOW - 60)
