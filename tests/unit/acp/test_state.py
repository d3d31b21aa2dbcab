"""The session state machine, table-tested (no process, no clock: ``now`` is given)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from datetime import UTC, datetime

import msgspec
import pytest

from nostr_buzz.acp.facts import (
    AgentGone,
    CancelAsked,
    Cost,
    CumulativeUsage,
    Fact,
    ModelFailed,
    Occupancy,
    OwnTurnBegan,
    PromptAnswered,
    PromptFailed,
    PromptSent,
    PromptUsage,
    RunId,
    SteerAnswered,
    SteerSent,
    Text,
    Tick,
    ToolCall,
    Update,
)
from nostr_buzz.acp.profiles import CLAUDE, CODEX, GENERIC, GOOSE
from nostr_buzz.acp.state import (
    HOLLOW_ERROR,
    Action,
    Count,
    EndPrompt,
    Phase,
    Report,
    Retire,
    SendCancel,
    Session,
    SplitUsage,
    StateError,
    Timeouts,
    count_usage,
)
from nostr_buzz.acp.types import Ending
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.nips.nip_am import TokenCounts

T = Timeouts(idle=10.0, hard=100.0, cancel_grace=5.0)
OK = Ending("end_turn", "success", "prompt_response", native="end_turn")
SPENT = UsageRecord(
    turn=TokenCounts(5, 2, 7, None), cumulative=None, delta_reliable=True, turn_seq=1
)
ZERO = UsageRecord(turn=TokenCounts(0, 0, 0, 0.0), cumulative=None, delta_reliable=True, turn_seq=1)


def session(*facts: Fact, now: float = 0.0, profile: object = GENERIC) -> Session:
    s = Session(profile, T)  # type: ignore[arg-type]
    for fact in facts:
        s.receive(fact, now)
    return s


# (name, facts before, the fact, now, phase after, actions)
TRANSITIONS: list[tuple[str, tuple[Fact, ...], Fact, float, Phase, tuple[Action, ...]]] = [
    ("prompt starts", (), PromptSent(), 0.0, Phase.PROMPTING, ()),
    ("cancel asked", (PromptSent(),), CancelAsked(), 1.0, Phase.CANCELLING, (SendCancel(),)),
    ("cancel with no prompt still goes out", (), CancelAsked(), 1.0, Phase.IDLE, (SendCancel(),)),
    ("answered", (PromptSent(),), PromptAnswered("end_turn"), 1.0, Phase.ENDED, (EndPrompt(OK),)),
    (
        "max_tokens",
        (PromptSent(),),
        PromptAnswered("max_tokens"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("max_tokens", "success", "prompt_response", native="max_tokens")),),
    ),
    (
        "refusal is an answer of unknown stop",
        (PromptSent(),),
        PromptAnswered("refusal"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("unknown", "success", "prompt_response", native="refusal")),),
    ),
    (
        "cancelled by the agent on its own",
        (PromptSent(),),
        PromptAnswered("cancelled"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("cancelled", "cancelled", "prompt_response", native="cancelled")),),
    ),
    (
        "cancelled after our cancel",
        (PromptSent(), CancelAsked()),
        PromptAnswered("cancelled"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("cancelled", "cancelled", "cancel_response", native="cancelled")),),
    ),
    (
        "the turn finished before the cancel",
        (PromptSent(), CancelAsked()),
        PromptAnswered("end_turn"),
        1.0,
        Phase.ENDED,
        (EndPrompt(OK),),
    ),
    (
        "an error answers the cancel",
        (PromptSent(), CancelAsked()),
        PromptFailed("boom"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("cancelled", "cancelled", "cancel_response", error="boom")),),
    ),
    (
        "an error response",
        (PromptSent(),),
        PromptFailed("JSON-RPC error -32603: x"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("error", "failed", "error", error="JSON-RPC error -32603: x")),),
    ),
    (
        "no stopReason",
        (PromptSent(),),
        PromptAnswered(None),
        1.0,
        Phase.ENDED,
        (
            EndPrompt(
                Ending("error", "failed", "error", error="prompt response without stopReason")
            ),
        ),
    ),
    (
        "the agent exits",
        (PromptSent(),),
        AgentGone("gone"),
        1.0,
        Phase.ENDED,
        (EndPrompt(Ending("error", "failed", "agent_exit", error="gone")),),
    ),
    ("before the idle timeout", (PromptSent(),), Tick(), 9.9, Phase.PROMPTING, ()),
    (
        "idle timeout cancels",
        (PromptSent(),),
        Tick(),
        10.0,
        Phase.ENDED,
        (EndPrompt(Ending("error", "failed", "timeout", error="idle timeout")), SendCancel()),
    ),
    (
        "no answer to the cancel",
        (PromptSent(), CancelAsked()),
        Tick(),
        5.0,
        Phase.ENDED,
        (EndPrompt(Ending("cancelled", "cancelled", "timeout", error="no answer to the cancel")),),
    ),
    (
        "a late answer is ignored",
        (PromptSent(), AgentGone("x")),
        PromptAnswered("end_turn"),
        2.0,
        Phase.ENDED,
        (),
    ),
    (
        "an update is progress",
        (PromptSent(),),
        Update("agent_message_chunk"),
        1.0,
        Phase.PROMPTING,
        (Report(Update("agent_message_chunk")),),
    ),
    (
        "an unknown update is reported as activity",
        (PromptSent(),),
        Update(None),
        1.0,
        Phase.PROMPTING,
        (Report(Update(None)),),
    ),
    (
        "a cost is reported and counted",
        (PromptSent(),),
        Cost(0.5),
        1.0,
        Phase.PROMPTING,
        (Report(Cost(0.5)), Count(Cost(0.5))),
    ),
    ("a cost between turns is counted", (), Cost(0.5), 1.0, Phase.IDLE, (Count(Cost(0.5)),)),
]


@pytest.mark.parametrize(
    ("before", "fact", "now", "phase", "actions"),
    [row[1:] for row in TRANSITIONS],
    ids=[row[0] for row in TRANSITIONS],
)
def test_transitions(
    before: tuple[Fact, ...], fact: Fact, now: float, phase: Phase, actions: tuple[Action, ...]
) -> None:
    s = session(*before)
    assert s.receive(fact, now) == actions
    assert s.phase == phase


def test_activity_pushes_the_idle_deadline_but_not_the_hard_one() -> None:
    s = session(PromptSent())
    assert s.deadline() == 10.0
    s.receive(Text("hi"), 8.0)
    assert s.deadline() == 18.0
    for at in range(9, 100, 9):
        s.receive(Update("agent_message_chunk"), float(at))
    assert s.deadline() == 100.0  # the hard timeout
    assert s.receive(Tick(), 100.0)[0] == EndPrompt(
        Ending("error", "failed", "timeout", error="hard timeout")
    )


def test_an_injected_steer_renews_the_hard_deadline() -> None:
    s = session(PromptSent())
    s.receive(SteerSent(), 50.0)
    s.receive(SteerAnswered("injected"), 95.0)
    assert s.deadline() == 105.0 and s.turn is not None and s.turn.hard_deadline == 195.0


def test_a_cancel_bounds_the_wait_by_its_grace() -> None:
    s = session(PromptSent())
    s.receive(CancelAsked(), 3.0)
    assert s.deadline() == 8.0 and not s.running


def test_one_prompt_at_a_time_and_never_in_a_retired_session() -> None:
    s = session(PromptSent())
    with pytest.raises(StateError, match="already running"):
        s.receive(PromptSent(), 1.0)
    s.receive(PromptFailed("x"), 1.0)
    assert s.settle(None, 1.0)[1] == (Retire(),)
    with pytest.raises(StateError, match="retired"):
        s.receive(PromptSent(), 2.0)
    with pytest.raises(StateError, match="no prompt"):
        s.settle(None, 2.0)


def test_text_after_a_tool_call_starts_a_paragraph_and_a_new_message_resets_the_final() -> None:
    s = session(PromptSent())
    for fact in (Text("narration"), ToolCall("c1"), Text("  "), Text("answer", "m2")):
        s.receive(fact, 1.0)
    assert s.turn is not None
    assert s.turn.reply == "narration  \n\nanswer"
    assert "".join(s.turn.final) == "answer"
    assert s.turn.tool_calls == 1
    s.receive(Occupancy(10, 100), 1.0)
    s.receive(RunId("run-1"), 1.0)
    assert (s.turn.context_used, s.turn.context_size, s.turn.run_id) == (10, 100, "run-1")
    assert s.run_id == "run-1"


def test_text_past_the_reply_cap_is_counted_and_dropped_as_it_arrives() -> None:
    s = Session(GENERIC, T, max_reply_bytes=8)
    s.receive(PromptSent(), 0.0)
    reported = [s.receive(Text(t, "m1"), 1.0) for t in ("héllo", "wörld!", "more", "é")]
    record = s.turn
    assert record is not None
    # 6 + 7 = 13 bytes > 8: "w" is kept, not "wö" (9 bytes): never half of a character.
    assert record.reply == "héllow" and "".join(record.final) == "héllow"
    assert (record.kept, record.dropped) == (7, 6 + 4 + 2)
    # What goes on to the turn's stream is what was kept, never the dropped text.
    texts = [a.fact.text for acts in reported for a in acts if isinstance(a, Report)]  # type: ignore[attr-defined]
    assert texts == ["héllo", "w", "", ""]
    s.receive(PromptAnswered("end_turn"), 2.0)
    ending, _ = s.settle(SPENT, 2.0)
    now = datetime.now(UTC)
    result = record.result(ending, SPENT, 1, "sess", now, now)
    assert result.reply == "héllow" and result.reply_dropped_bytes == 12


def test_without_a_cap_every_byte_is_kept() -> None:
    s = session(PromptSent())
    s.receive(Text("x" * 100_000), 1.0)
    assert s.turn is not None and len(s.turn.reply) == 100_000 and s.turn.dropped == 0


# (name, profile, facts of the turn, usage, seconds, settled ending, retire?)
SETTLEMENTS = [
    ("an answer keeps the session", GENERIC, (), SPENT, 1.0, OK, False),
    ("a failure retires it", CODEX, (PromptFailed("x"),), None, 1.0, "failed", True),
    (
        "a cancel keeps a generic session",
        GENERIC,
        (CancelAsked(), PromptAnswered("cancelled")),
        None,
        1.0,
        "cancelled",
        False,
    ),
    (
        "a cancel retires claude's",
        CLAUDE,
        (CancelAsked(), PromptAnswered("cancelled")),
        None,
        1.0,
        "cancelled",
        True,
    ),
    (
        "claude's turn that finished despite a cancel",
        CLAUDE,
        (CancelAsked(), PromptAnswered("end_turn")),
        SPENT,
        1.0,
        OK,
        True,
    ),
]


@pytest.mark.parametrize(
    ("profile", "facts", "usage", "seconds", "ending", "retire"),
    [row[1:] for row in SETTLEMENTS],
    ids=[row[0] for row in SETTLEMENTS],
)
def test_settlement_and_retirement(
    profile: object,
    facts: tuple[Fact, ...],
    usage: UsageRecord | None,
    seconds: float,
    ending: Ending | str,
    retire: bool,
) -> None:
    s = session(PromptSent(), profile=profile)
    for fact in facts or (PromptAnswered("end_turn"),):
        s.receive(fact, 0.5)
    settled, actions = s.settle(usage, seconds)
    assert settled == ending if isinstance(ending, Ending) else settled.outcome == ending
    assert (actions == (Retire(),)) is retire
    assert s.phase == (Phase.RETIRED if retire else Phase.IDLE)


def _after_a_cancel(profile: object = GENERIC) -> Session:
    s = session(PromptSent(), profile=profile)
    s.receive(CancelAsked(), 0.0)
    s.receive(PromptAnswered("cancelled"), 0.5)
    s.settle(None, 0.5)
    s.receive(PromptSent(), 10.0)
    return s


@pytest.mark.parametrize(
    ("facts", "usage", "ended_at", "hollow"),
    [
        ((), None, 11.0, True),  # nothing at all, at once
        ((), ZERO, 12.0, True),  # all-zero usage is nothing
        ((), None, 12.5, False),  # slower than the window: an answer
        ((Text("hi"),), None, 11.0, False),
        ((Text("  "),), None, 11.0, True),  # blank text is no text
        ((ToolCall(),), None, 11.0, False),
        ((), SPENT, 11.0, False),
    ],
)
def test_the_hollow_turn_after_a_cancel(
    facts: tuple[Fact, ...], usage: UsageRecord | None, ended_at: float, hollow: bool
) -> None:
    s = _after_a_cancel()
    for fact in facts:
        s.receive(fact, 10.5)
    s.receive(PromptAnswered("end_turn"), ended_at)
    ending, actions = s.settle(usage, ended_at)
    if hollow:
        assert ending == Ending("error", "failed", "error", native="end_turn", error=HOLLOW_ERROR)
        assert actions == (Retire(),) and s.phase == Phase.RETIRED
    else:
        assert ending == OK and actions == () and s.phase == Phase.IDLE


def test_the_hollow_window_is_the_profiles() -> None:
    s = _after_a_cancel(replace(GENERIC, hollow_window=5.0))
    s.receive(PromptAnswered("end_turn"), 14.0)
    assert s.settle(None, 14.0)[0].outcome == "failed"
    fresh = session(PromptSent())  # no cancel before: never hollow
    fresh.receive(PromptAnswered("end_turn"), 0.1)
    assert fresh.settle(None, 0.1)[0] == OK


def test_a_steer_that_starts_the_agents_own_turn() -> None:
    """Updates after the prompt's answer wait for the steer's answer, then go to the agent's
    own turn, whose usage is split from the prompt's."""
    s = session(PromptSent())
    s.receive(SteerSent(), 1.0)
    assert s.steering and s.own_phase == "pending"
    s.receive(Text("main"), 1.0)  # the prompt still runs: the prompt's
    s.receive(PromptUsage(5, 2, 7, None, None), 2.0)
    s.receive(PromptAnswered("end_turn"), 2.0)
    assert s.receive(Text("own"), 2.5) == ()  # held: where it belongs is not known yet
    assert s.receive(Cost(0.75), 2.5) == ()
    replay = s.receive(SteerAnswered("started_new_turn"), 3.0)
    assert replay == (
        Report(SteerAnswered("started_new_turn")),
        SplitUsage(True),
        Report(OwnTurnBegan()),  # to the prompt's stream; the own turn's facts are not
        SplitUsage(False),
        Count(Cost(0.75)),
    )
    assert s.turn is not None and s.turn.reply == "main" and not s.steering
    s.settle(SPENT, 3.0)
    own = s.begin_own()
    assert own is not None and own.reply == "own" and own.heard
    with pytest.raises(StateError):
        s.receive(PromptSent(), 4.0)  # the own turn is being collected
    s.end_own()
    assert s.begin_own() is None
    s.receive(PromptSent(), 5.0)


def test_text_held_for_a_steers_answer_is_capped_too() -> None:
    s = Session(GENERIC, T, max_reply_bytes=8)
    for fact in (PromptSent(), SteerSent(), PromptAnswered("end_turn")):
        s.receive(fact, 1.0)
    for _ in range(1000):  # a flood while the steer's answer is awaited
        s.receive(Text("0123456789"), 2.0)
    assert [f.text for f in s.held] == ["01234567"]  # type: ignore[attr-defined]
    s.receive(SteerAnswered("started_new_turn"), 3.0)
    s.settle(SPENT, 3.0)
    own = s.begin_own()
    assert own is not None and own.reply == "01234567"
    assert own.dropped == 1000 * 10 - 8


def test_a_steer_answered_otherwise_gives_the_held_updates_to_the_prompt() -> None:
    s = session(PromptSent())
    s.receive(SteerSent(), 1.0)
    s.receive(PromptAnswered("end_turn"), 2.0)
    s.receive(Text(" late"), 2.5)
    assert s.receive(SteerAnswered("injected"), 3.0) == (
        Report(SteerAnswered("injected")),
        Report(Text(" late")),
    )
    assert s.turn is not None and s.turn.reply == " late" and s.own is None
    assert s.begin_own() is None


def test_profiles_choose_the_adapters_behaviour() -> None:
    assert (GOOSE.standing, GOOSE.run_id_steer, GOOSE.usage) == (
        "goose",
        "_goose/unstable/session/steer",
        "cumulative_notification",
    )
    assert CLAUDE.claude_meta and not CLAUDE.survives_cancel
    assert CODEX.survives_cancel and CODEX.retire_after_failure
    # Each continues sessions as it advertises (docs/acp-adapters.md).
    assert all(p.resumes_sessions for p in (GENERIC, GOOSE, CLAUDE, CODEX))


def test_a_reported_model_failure_fails_the_turn_with_its_text_as_the_error() -> None:
    s = session(PromptSent())
    s.receive(Text("upstream 500: overloaded"), 0.5)
    s.receive(ModelFailed(), 0.6)
    assert s.receive(PromptAnswered("end_turn"), 1.0) == (
        EndPrompt(
            Ending("error", "failed", "error", native="end_turn", error="upstream 500: overloaded")
        ),
    )
    cancelled = session(PromptSent(), ModelFailed(), CancelAsked())  # a cancel decides then
    assert cancelled.receive(PromptAnswered("cancelled"), 1.0)[0] == EndPrompt(
        Ending("cancelled", "cancelled", "cancel_response", native="cancelled")
    )


@pytest.mark.parametrize(
    ("fact", "method"),
    [(CumulativeUsage, UsageTracker.observe_cumulative), (PromptUsage, UsageTracker.observe_turn)],
)
def test_a_usage_fact_carries_its_trackers_keywords(fact: type, method: object) -> None:
    """``count_usage`` hands a usage fact's fields to the tracker as keywords: each field is a
    keyword of the method it goes to, so a renamed one fails here and not in a turn."""
    keywords = {
        name
        for name, p in inspect.signature(method).parameters.items()  # type: ignore[arg-type]
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    fields = {f.name for f in msgspec.structs.fields(fact)}
    assert fields and fields <= keywords, fields - keywords


def test_count_usage_gives_the_tracker_every_count_of_a_prompt_fact() -> None:
    tracker = UsageTracker()
    tracker.begin_turn("s")
    count_usage(tracker, "s", PromptUsage(10, 4, 14, 3, 2))
    record = tracker.end_turn("s")
    assert record is not None and record.turn is not None
    turn = record.turn
    assert (turn.output_tokens, turn.total_tokens) == (4, 14)
    assert (turn.cache_read_tokens, turn.cache_write_tokens) == (3, 2)
    assert turn.input_tokens == 10 + 3 + 2  # a metric's input counts its cache subsets
