"""``buzz watch``'s view, pure: the diagnostics feed folded into running turns, tool calls and
spend; the state snapshot into queue depth and outbox; the ``--once`` JSON schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nostr_buzz.core.budget import Caps, Spend
from nostr_buzz.core.delivery_state import RelayRecord
from nostr_buzz.nips import nip10
from nostr_buzz.reports.watch import (
    FeedRecord,
    FeedSummary,
    Moment,
    OutboxRow,
    QueuedRow,
    RetryRow,
    StateSnapshot,
    WatchView,
    watch_view,
)
from tests.support.keys import ALICE, BOB, OWNER

DAY = 86_400
T0 = 20_000 * DAY + 3600.0  # 01:00 UTC on some day
E1, E2, E3, E4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)


def rec(kind: str, at: float, seq: int = 0, **fields: Any) -> tuple[FeedRecord, float]:
    payload = fields.pop("payload", {})
    return FeedRecord(seq=seq, timestamp=f"t{at}", kind=kind, payload=payload, **fields), at


def fold(*records: tuple[FeedRecord, float]) -> FeedSummary:
    summary = FeedSummary()
    summary.add_all(records)
    return summary


def started(turn: str, at: float, ids: list[str], channel: str = "eng") -> tuple[FeedRecord, float]:
    return rec(
        "turn_started", at, turn_id=turn, channel_id=channel, payload={"triggeringEventIds": ids}
    )


def row(
    event_id: str, author: str, *, channel: str = "eng", at: float = T0, cancelled: bool = False
) -> QueuedRow:
    return QueuedRow(event_id, channel, author, at, cancelled)


EMPTY = StateSnapshot()


def view(summary: FeedSummary, snapshot: StateSnapshot = EMPTY, now: float = T0 + 10) -> WatchView:
    return watch_view(snapshot, summary, moment=Moment(now, "now", "day"), state_dir="/s")


def test_a_turn_runs_from_turn_started_until_any_record_that_ends_it() -> None:
    for end in ("turn_completed", "turn_failed", "turn_ended"):
        running = fold(started("t1", T0, [E1]), started("t2", T0 + 1, [E2], "ops"))
        assert set(running.running) == {"t1", "t2"}
        running.add(*rec(end, T0 + 2, turn_id="t1"))
        assert set(running.running) == {"t2"}, end


def test_an_agent_start_ends_every_earlier_turn() -> None:
    # A bot killed mid-turn leaves turn_started without an end; its next start begins with
    # agent_started: those turns no longer run, the ones after it do.
    summary = fold(
        started("old", T0, [E1]),
        rec("agent_started", T0 + 5, payload={"agentName": "demo"}),
        started("new", T0 + 6, [E2]),
    )
    assert list(summary.running) == ["new"]
    assert summary.agent is not None and summary.agent.name == "demo"
    assert not summary.agent.exited
    summary.add(*rec("agent_exited", T0 + 7))
    assert summary.agent.exited


def test_running_turn_shows_channel_authors_duration_and_last_tool_call() -> None:
    summary = fold(
        started("t1", T0, [E1, E2]),
        rec("permission_decision", T0 + 1, turn_id="t1",
            payload={"title": "Read a.txt", "toolKind": "read", "decision": "approved"}),
        rec("permission_decision", T0 + 2, turn_id="t1",
            payload={"title": "rm -rf /", "toolKind": "execute", "decision": "rejected"}),
        rec("permission_decision", T0 + 3, turn_id="other", payload={"title": "not this turn"}),
    )  # fmt: skip
    snapshot = StateSnapshot(queued=(row(E1, ALICE.public_key.hex), row(E2, BOB.public_key.hex)))
    [turn] = view(summary, snapshot, now=T0 + 4.5).running_turns
    assert (turn.channel, turn.queue_channel, turn.turn_id) == ("eng", "eng", "t1")
    assert turn.actors == [ALICE.public_key.bech32, BOB.public_key.bech32]
    assert turn.duration_seconds == 4.5 and turn.started_at == f"t{T0}"
    assert turn.last_tool is not None
    assert (turn.last_tool.title, turn.last_tool.kind) == ("rm -rf /", "execute")
    assert turn.last_tool.decision == "rejected" and not turn.private


def test_a_private_turn_never_shows_a_tool_title_and_names_its_author_from_the_channel() -> None:
    channel = nip10.private_channel(ALICE.public_key.hex)
    wrap_signer = "77" * 32  # a gift wrap is signed by a throwaway key
    summary = fold(
        started("t1", T0, [E1], channel),
        # Even if a title reached the feed, the view drops it for a private conversation.
        rec("permission_decision", T0 + 1, turn_id="t1",
            payload={"title": "secret words", "toolKind": "edit", "decision": "approved"}),
    )  # fmt: skip
    snapshot = StateSnapshot(queued=(row(E1, wrap_signer, channel=channel),))
    out = view(summary, snapshot)
    [turn] = out.running_turns
    assert turn.private and turn.actors == [ALICE.public_key.bech32]
    assert turn.last_tool is not None and turn.last_tool.title is None
    assert turn.last_tool.kind == "edit"
    assert "secret words" not in out.to_json()


def test_queue_depth_counts_pending_in_flight_and_cancelled_per_channel() -> None:
    owner = OWNER.public_key.hex
    summary = fold(started("t1", T0, [E1]))
    snapshot = StateSnapshot(
        queued=(
            row(E1, owner, at=T0),
            row(E2, owner, at=T0 + 1),
            row(E3, owner, at=T0 + 2, cancelled=True),
            row(E4, owner, channel="ops", at=T0 + 5),
        ),
        retries=(RetryRow("ops", 2, T0 + 40), RetryRow("eng", 0, None)),
    )
    queue = {c.channel: c for c in view(summary, snapshot, now=T0 + 10).queue}
    eng, ops = queue["eng"], queue["ops"]
    assert (eng.pending, eng.in_flight, eng.cancelled) == (1, 1, 1)
    assert eng.oldest_age_seconds == 10 and eng.attempts == 0 and eng.backoff_seconds is None
    assert (ops.pending, ops.in_flight, ops.attempts, ops.backoff_seconds) == (1, 0, 2, 30)


def test_the_outbox_is_grouped_by_kind_with_its_oldest_entry() -> None:
    snapshot = StateSnapshot(
        outbox=(OutboxRow(9, T0, 0), OutboxRow(44200, T0 + 4, 3), OutboxRow(9, T0 + 8, 1))
    )
    outbox = view(FeedSummary(), snapshot, now=T0 + 10).outbox
    assert outbox.pending == 3 and outbox.oldest_age_seconds == 10
    assert [
        (k.kind, k.name, k.pending, k.oldest_age_seconds, k.attempts) for k in outbox.kinds
    ] == [
        (9, "reply", 2, 10, 1),
        (44200, "metric", 1, 6, 3),
    ]


def test_each_pending_entry_shows_where_it_stands_on_every_relay_it_is_meant_for() -> None:
    fast, slow, down = "wss://fast.example", "wss://slow.example", "wss://down.example"
    records = (
        RelayRecord(fast, accepted_at=T0 + 1),
        RelayRecord(down, attempts=3, next_attempt=T0 + 40, last_error="blocked: not here"),
    )
    snapshot = StateSnapshot(
        outbox=(
            OutboxRow(44200, T0 + 2, 1, E2, (fast, slow, down), records),
            OutboxRow(9, T0, 0, E1, (fast,)),
        )
    )
    outbox = view(FeedSummary(), snapshot, now=T0 + 10).outbox
    # The oldest first; the relays in the order they are meant, then their state on each.
    assert [(e.event_id, e.name, e.age_seconds, e.waiting) for e in outbox.entries] == [
        (E1, "reply", 10, 1),
        (E2, "metric", 8, 2),
    ]
    metric = outbox.entries[1]
    assert [
        (r.relay, r.state, r.attempts, r.retry_in_seconds, r.last_error) for r in metric.relays
    ] == [
        (fast, "accepted", 0, None, None),
        (slow, "pending", 0, None, None),
        (down, "failing", 3, 30, "blocked: not here"),
    ]
    shown = json.loads(view(FeedSummary(), snapshot, now=T0 + 10).to_json())
    assert shown["outbox"]["entries"][1]["relays"][2] == {
        "relay": down,
        "state": "failing",
        "attempts": 3,
        "retryInSeconds": 30.0,
        "lastError": "blocked: not here",
    }


def test_spend_is_the_cost_of_todays_metrics_utc() -> None:
    summary = fold(
        rec("metric_queued", T0 - 2 * 3600, payload={"costUsd": 5.0}),  # yesterday, 23:00
        rec("metric_queued", T0, payload={"costUsd": 0.25}),
        rec("metric_queued", T0 + 1, payload={"costUsd": 0.5}),
        rec("metric_queued", T0 + 2, payload={"costUsd": None}),
        rec("metric_queued", T0 + 3, payload={"costUsd": "1"}),  # not a number: not a cost
        rec("metric_queued", T0 + 4, payload={}),  # written by an earlier bot
    )
    spend = view(summary, now=T0 + 60).spend
    assert (spend.cost_usd, spend.turns, spend.turns_without_cost) == (0.75, 5, 3)
    assert view(summary, now=T0 + DAY).spend.turns == 0  # the next day starts from nothing


def test_the_budget_shows_each_cap_in_force_against_its_period_and_the_held_channels() -> None:
    spends = (
        Spend("m1", T0 - 2 * 3600, 0.5, 100, "t1"),  # yesterday: counts for the week only
        Spend("m2", T0, 0.25, 40, "t2"),
        Spend("m3", T0 + 1, None, 60, "t3"),  # cost unknown: tokens only
        Spend("m4", T0 + 2, 9.0, 1, "t2"),  # the same turn again (another shard's metric)
    )
    notes = (("cap:daily_usd", "1"), ("held:eng", "1"), ("cap:action", "stop"))
    snapshot = StateSnapshot(spends=spends, budget_notes=notes)
    configured = Caps(daily_usd=0.1, weekly_usd=5.0, daily_tokens=1000)
    budget = watch_view(
        snapshot, fold(), moment=Moment(T0 + 10, "now", "day"), state_dir="/s", caps=configured
    ).budget
    assert budget is not None and budget.action == "stop" and budget.held == ["eng"]
    caps = {c.name: (c.limit, c.spent) for c in budget.caps}
    # The owner's !budget daily_usd 1 is over the configuration's 0.1.
    assert caps == {
        "daily_usd": (1.0, 0.25),
        "weekly_usd": (5.0, 0.75),
        "daily_tokens": (1000, 100),
    }
    assert all(c.period_ends > T0 + 10 for c in budget.caps)
    # No cap configured nor given by the owner: nothing to show.
    assert view(fold(), StateSnapshot(spends=spends)).budget is None


def test_the_once_json_has_the_documented_schema() -> None:
    summary = fold(
        rec("agent_started", T0 - 5, seq=1, payload={"agentName": "demo"}),
        started("t1", T0, [E1]),
    )
    summary.add(*rec("metric_queued", T0 + 1, seq=9, payload={"costUsd": 0.1}))
    snapshot = StateSnapshot(queued=(row(E1, ALICE.public_key.hex),), outbox=(OutboxRow(9, T0, 0),))
    doc = json.loads(view(summary, snapshot).to_json())
    assert list(doc) == [
        "version", "stateDir", "generatedAt", "agent", "runningTurns", "queue", "outbox",
        "spend", "budget", "feed",
    ]  # fmt: skip
    assert doc["version"] == 1 and doc["budget"] is None
    assert doc["agent"] == {"name": "demo", "startedAt": f"t{T0 - 5}", "exited": False}
    assert list(doc["runningTurns"][0]) == [
        "channel", "queueChannel", "turnId", "sessionId", "actors", "eventIds", "startedAt",
        "durationSeconds", "private", "lastTool",
    ]  # fmt: skip
    assert doc["queue"] == [
        {"channel": "eng", "pending": 0, "inFlight": 1, "cancelled": 0,
         "oldestAgeSeconds": 10.0, "attempts": 0, "backoffSeconds": None, "thread": None},
    ]  # fmt: skip
    assert doc["outbox"]["kinds"][0] == {
        "kind": 9, "name": "reply", "pending": 1, "oldestAgeSeconds": 10.0, "attempts": 0,
    }  # fmt: skip
    assert doc["spend"] == {"day": "day", "costUsd": 0.1, "turns": 1, "turnsWithoutCost": 0}
    assert doc["feed"] == {"lastSeq": 9, "lastRecordAt": f"t{T0 + 1}"}


def test_malformed_payload_values_are_ignored_not_fatal() -> None:
    summary = fold(
        rec("agent_started", T0 - 1, payload={"agentName": ["x"]}),
        rec("turn_started", T0, turn_id="t1", payload={"triggeringEventIds": "not a list"}),
        rec("turn_started", T0, payload={"triggeringEventIds": [E1]}),  # no turn id
        rec("permission_decision", T0, turn_id="t1", payload={"title": 5, "decision": None}),
        started("t2", T0, [E1, 7]),  # type: ignore[list-item]
    )
    snapshot = StateSnapshot(queued=(row(E1, "not a key"),))
    out = view(summary, snapshot)
    assert out.agent is not None and out.agent.name is None
    first, second = out.running_turns
    assert first.event_ids == [] and first.actors == []
    assert first.last_tool is not None and first.last_tool.title is None
    assert second.event_ids == [E1] and second.actors == ["not a key"]  # shown as it is


def _shape(doc: object) -> object:
    """The members of a JSON document, at every depth (a list by its first element)."""
    if isinstance(doc, dict):
        return {key: _shape(value) for key, value in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return None


def test_the_schema_in_docs_cli_md_is_the_one_printed() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = docs[docs.index("## `buzz watch`") :]
    example = json.loads(section[section.index("```json") + 7 : section.index("```\n", 10)])
    summary = fold(
        rec("agent_started", T0 - 5, payload={"agentName": "demo"}),
        started("t1", T0, [E1]),
        rec("permission_decision", T0 + 1, turn_id="t1",
            payload={"title": "Read", "toolKind": "read", "decision": "approved"}),
    )  # fmt: skip
    relays = (RelayRecord("wss://relay.one", accepted_at=T0),)
    pending = OutboxRow(44200, T0, 0, E2, ("wss://relay.one", "wss://relay.two"), relays)
    snapshot = StateSnapshot(queued=(row(E1, ALICE.public_key.hex),), outbox=(pending,))
    assert _shape(json.loads(view(summary, snapshot).to_json())) == _shape(example)
