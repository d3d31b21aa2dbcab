"""Compaction as a fact: the updates read from the wire (ACP's ``compaction_update`` and
``compaction_summary_chunk``, as claude-agent-acp 0.101 and codex-acp 2.6 send them once the
client advertises ``clientCapabilities.session.compaction``) and how a session counts them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nostr_buzz.acp import wire
from nostr_buzz.acp.facts import (
    Compaction,
    CompactionChunk,
    PromptAnswered,
    PromptSent,
    Text,
    Update,
)
from nostr_buzz.acp.profiles import GENERIC
from nostr_buzz.acp.state import Report, Session, Timeouts

T = Timeouts(idle=10.0, hard=100.0, cancel_grace=5.0)


def update(kind: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": "s1", "update": {"sessionUpdate": kind, **fields}}


def test_the_client_advertises_compaction_and_notices() -> None:
    caps = wire.initialize_params("1.0")["clientCapabilities"]
    assert caps["session"] == {"compaction": {}, "notices": {}}
    assert caps["_meta"] == {"goose": {"customNotifications": True}}


def test_compaction_updates_become_facts() -> None:
    started = update("compaction_update", compactionId="c1", status="in_progress")
    assert wire.session_update_facts(started) == (
        Update("compaction_update"),
        Compaction("c1", "in_progress", None),
    )
    text = {"type": "text", "text": "we spoke of rain"}
    piece = update("compaction_summary_chunk", compactionId="c1", content=text)
    assert wire.session_update_facts(piece) == (
        Update("compaction_summary_chunk"),
        CompactionChunk("c1", "we spoke of rain"),
    )
    done = update("compaction_update", compactionId="c1", status="completed", summary=[text])
    [_, fact] = wire.session_update_facts(done)
    assert fact == Compaction("c1", "completed", "we spoke of rain") and fact.completed
    # ``summary: null`` clears it (""), an absent one leaves it as it was (None).
    cleared = update("compaction_update", compactionId="c1", status="completed", summary=None)
    assert wire.session_update_facts(cleared)[1] == Compaction("c1", "completed", "")
    odd = update("compaction_update", compactionId="c1", status="_vendor_paused")
    assert wire.session_update_facts(odd)[1] == Compaction("c1", "_vendor_paused")
    assert not Compaction("c1", "failed").completed


def test_a_malformed_compaction_update_is_activity_and_nothing_more() -> None:
    for bad in (
        update("compaction_update", status="completed"),  # no id
        update("compaction_update", compactionId="", status="completed"),
        update("compaction_update", compactionId=7, status="completed"),
        update("compaction_update", compactionId="x" * 257, status="completed"),
        update("compaction_update", compactionId="c1"),  # no status
        update("compaction_update", compactionId="c1", status=["completed"]),
        update("compaction_summary_chunk", content={"type": "text", "text": "x"}),
    ):
        assert wire.session_update_facts(bad) == (Update(None),)


def test_a_summary_is_bounded_whatever_the_agent_sends() -> None:
    huge = [{"type": "text", "text": "é" * wire.MAX_SUMMARY_BYTES}, {"type": "image"}]
    done = update("compaction_update", compactionId="c1", status="completed", summary=huge)
    fact = wire.session_update_facts(done)[1]
    assert isinstance(fact, Compaction) and fact.summary is not None
    assert len(fact.summary.encode()) <= wire.MAX_SUMMARY_BYTES


def test_a_turn_counts_each_completed_compaction_once_and_keeps_its_summary() -> None:
    s = Session(GENERIC, T, max_reply_bytes=16)
    s.receive(PromptSent(), 0.0)
    facts = [
        Compaction("c1", "in_progress"),
        CompactionChunk("c1", "we spoke "),
        CompactionChunk("c1", "of rain"),
        Compaction("c1", "completed"),
        Compaction("c1", "completed"),  # a runtime may repeat its terminal update
        Compaction("c2", "in_progress"),
        Compaction("c2", "cancelled"),  # never finished: nothing was compacted
        Text("Sunny."),
    ]
    reported = [a.fact for f in facts for a in s.receive(f, 1.0) if isinstance(a, Report)]
    assert reported[-1] == Text("Sunny.")
    record = s.turn
    assert record is not None and record.compactions == 1 and s.compactions == 1
    assert record.reply == "Sunny."  # a summary is never part of the reply
    s.receive(PromptAnswered("end_turn"), 2.0)
    ending, _ = s.settle(None, 2.0)
    now = datetime.now(UTC)
    result = record.result(ending, None, 1, "s1", now, now)
    # The summary of the compaction that happened (c2 never did).
    assert result.compactions == 1 and result.compaction_summary == "we spoke of rain"
    s.receive(PromptSent(), 3.0)
    for fact in (Compaction("c3", "completed", "rain, then sun"), Compaction("c1", "completed")):
        s.receive(fact, 4.0)
    assert s.turn is not None and s.turn.compactions == 1 and s.compactions == 2
    assert s.turn.summary is not None and s.turn.summary.text == "rain, then sun"


def test_a_summary_follows_acps_patch_rules() -> None:
    s = Session(GENERIC, T)
    s.receive(PromptSent(), 0.0)
    for fact in (
        CompactionChunk("c1", "first draft"),
        Compaction("c1", "in_progress", "replaced"),
        CompactionChunk("c1", ", and more"),
        Compaction("c1", "completed"),  # no summary: the one so far stands
    ):
        s.receive(fact, 1.0)
    assert s.turn is not None and s.turn.summary is not None
    assert s.turn.summary.text == "replaced, and more"
    s.receive(CompactionChunk("c2", "x" * 70_000), 1.0)
    s.receive(CompactionChunk("c2", "y"), 1.0)
    s.receive(Compaction("c2", "completed"), 1.0)
    assert s.turn.summary is not None and len(s.turn.summary.text) == wire.MAX_SUMMARY_BYTES
    s.receive(Compaction("c3", "completed", ""), 1.0)  # cleared
    assert s.turn.summary is not None and s.turn.summary.text == ""


def test_a_compaction_between_turns_is_the_next_turns() -> None:
    s = Session(GENERIC, T)
    s.receive(PromptSent(), 0.0)
    s.receive(PromptAnswered("end_turn"), 1.0)
    s.settle(None, 1.0)
    # claude-agent-acp compacts an idle session before its prompt cache expires.
    for fact in (CompactionChunk("idle-1", "the story so far"), Compaction("idle-1", "completed")):
        assert s.receive(fact, 5.0) == ()
    assert s.compactions == 1
    s.receive(PromptSent(), 6.0)
    record = s.turn
    assert record is not None and record.compactions == 1
    assert record.summary is not None and record.summary.text == "the story so far"
    s.receive(PromptAnswered("end_turn"), 7.0)
    s.settle(None, 7.0)
    s.receive(PromptSent(), 8.0)
    assert s.turn is not None and s.turn.compactions == 0 and s.turn.summary is None


def test_a_flood_of_compaction_ids_keeps_the_session_small() -> None:
    s = Session(GENERIC, T)
    s.receive(PromptSent(), 0.0)
    for n in range(10_000):
        s.receive(Compaction(f"c{n}", "completed"), 1.0)
    assert s.compactions == 10_000
    assert len(s._recent_compactions) <= 32


def test_a_compaction_without_a_summary_leaves_the_turn_none() -> None:
    # codex-acp 2.6 sends no summary at all.
    s = Session(GENERIC, T)
    s.receive(PromptSent(), 0.0)
    s.receive(Compaction("c1", "in_progress"), 1.0)
    s.receive(Compaction("c1", "completed"), 1.0)
    record = s.turn
    assert record is not None
    s.receive(PromptAnswered("end_turn"), 2.0)
    ending, _ = s.settle(None, 2.0)
    now = datetime.now(UTC)
    result = record.result(ending, None, 1, "s1", now, now)
    assert result.compactions == 1 and result.compaction_summary is None
