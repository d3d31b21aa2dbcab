"""UsageTracker: table-driven cases, one per rule of docs/metrics.md "Usage accounting", then
conformance scenarios written from its sentences."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.core.usage import UsageRecord, UsageTracker, checked_counts
from nostr_buzz.nips.nip_am import MAX_TOKENS, TokenCounts

S = "sess-1"
NULLS = TokenCounts(None, None, None, None)


@dataclass(frozen=True)
class End:
    """end_turn(session) must return exactly this (None: no record)."""

    expect: UsageRecord | None
    session: str = S


def rec(turn: TokenCounts, cumulative: TokenCounts | None, reliable: bool, seq: int) -> UsageRecord:
    return UsageRecord(turn, cumulative, reliable, seq)


def tc(
    i: int | None,
    o: int | None,
    t: int | None,
    c: float | None,
    cr: int | None = None,
    cw: int | None = None,
) -> TokenCounts:
    return TokenCounts(i, o, t, c, cache_read_tokens=cr, cache_write_tokens=cw)


def start(session: str = S) -> tuple[str, str, dict[str, Any]]:
    return ("session_started", session, {})


def begin(session: str = S) -> tuple[str, str, dict[str, Any]]:
    return ("begin_turn", session, {})


def cum(session: str = S, **kw: Any) -> tuple[str, str, dict[str, Any]]:
    return ("observe_cumulative", session, kw)


def usage(session: str = S, **kw: Any) -> tuple[str, str, dict[str, Any]]:
    return ("observe_turn", session, kw)


def cost(value: Any, session: str = S) -> tuple[str, str, dict[str, Any]]:
    return ("observe_cost", session, {"cost_usd": value})


Step = tuple[str, str, dict[str, Any]] | End


def run(steps: list[Step]) -> None:
    tracker = UsageTracker()
    for n, step in enumerate(steps):
        if isinstance(step, End):
            got = tracker.end_turn(step.session)
            assert got == step.expect, f"step {n}: end_turn gave {got}, expected {step.expect}"
            if got is not None:
                assert got.turn.input_tokens is None or got.turn.input_tokens >= 0
                assert got.turn.output_tokens is None or got.turn.output_tokens >= 0
        else:
            name, session, kwargs = step
            getattr(tracker, name)(session, **kwargs)


CASES: dict[str, list[Step]] = {
    # --- first-turn reliability ---------------------------------------------------------------
    "created session, cumulative source: first turn reliable from zero": [
        start(),
        begin(),
        cum(
            input_tokens=100,
            output_tokens=20,
            cache_read_tokens=30,
            cache_write_tokens=5,
            total_tokens=155,
            cost_usd=0.25,
        ),
        End(rec(tc(135, 20, 155, 0.25, 30, 5), tc(135, 20, 155, 0.25, 30, 5), True, 1)),
    ],
    "created session, standard source: first turn reliable, cost from zero": [
        start(),
        begin(),
        usage(input_tokens=10, output_tokens=5, total_tokens=15),
        cost(0.5),
        End(rec(tc(10, 5, 15, 0.5), None, True, 1)),
    ],
    # --- mid-session start --------------------------------------------------------------------
    "mid-session start: no baseline, unreliable, then reliable": [
        begin(),
        cum(input_tokens=500, output_tokens=50, total_tokens=550, cost_usd=1.0),
        End(rec(NULLS, tc(500, 50, 550, 1.0), False, 1)),
        begin(),
        cum(input_tokens=600, output_tokens=70, total_tokens=670, cost_usd=1.25),
        End(rec(tc(100, 20, 120, 0.25), tc(600, 70, 670, 1.25), True, 2)),
    ],
    "mid-session start, cache fields are nulled too": [
        begin(),
        cum(input_tokens=10, output_tokens=1, cache_read_tokens=4),
        End(rec(NULLS, tc(14, 1, None, None, 4), False, 1)),
    ],
    "mid-session standard source: cost without a baseline is null, tokens reported": [
        begin(),
        usage(input_tokens=3, output_tokens=4),
        cost(2.0),
        End(rec(tc(3, 4, None, None), None, True, 1)),
        begin(),
        cost(2.5),
        End(rec(tc(None, None, None, 0.5), None, True, 2)),
    ],
    # --- counter decrease ---------------------------------------------------------------------
    "input decrease: unreliable nulls, never negative, new baseline after": [
        start(),
        begin(),
        cum(input_tokens=100, output_tokens=20),
        End(rec(tc(100, 20, None, None), tc(100, 20, None, None), True, 1)),
        begin(),
        cum(input_tokens=40, output_tokens=30),
        End(rec(NULLS, tc(40, 30, None, None), False, 2)),
        begin(),
        cum(input_tokens=45, output_tokens=31),
        End(rec(tc(5, 1, None, None), tc(45, 31, None, None), True, 3)),
    ],
    "output decrease: unreliable": [
        start(),
        begin(),
        cum(input_tokens=100, output_tokens=20),
        End(rec(tc(100, 20, None, None), tc(100, 20, None, None), True, 1)),
        begin(),
        cum(input_tokens=110, output_tokens=19),
        End(rec(NULLS, tc(110, 19, None, None), False, 2)),
    ],
    "folded input decrease (cache read went down more than input rose): unreliable": [
        start(),
        begin(),
        cum(input_tokens=10, output_tokens=1, cache_read_tokens=100),
        End(rec(tc(110, 1, None, None, 100), tc(110, 1, None, None, 100), True, 1)),
        begin(),
        cum(input_tokens=20, output_tokens=2, cache_read_tokens=50),
        End(rec(NULLS, tc(70, 2, None, None, 50), False, 2)),
    ],
    "cost decrease: unreliable": [
        start(),
        begin(),
        cum(input_tokens=1, output_tokens=1, cost_usd=1.0),
        End(rec(tc(1, 1, None, 1.0), tc(1, 1, None, 1.0), True, 1)),
        begin(),
        cum(input_tokens=2, output_tokens=2, cost_usd=0.5),
        End(rec(NULLS, tc(2, 2, None, 0.5), False, 2)),
    ],
    "total and cache decreases are field-local: reliable, those fields null": [
        start(),
        begin(),
        cum(
            input_tokens=10,
            output_tokens=1,
            cache_read_tokens=5,
            cache_write_tokens=5,
            total_tokens=100,
        ),
        End(rec(tc(20, 1, 100, None, 5, 5), tc(20, 1, 100, None, 5, 5), True, 1)),
        begin(),
        cum(
            input_tokens=30,
            output_tokens=2,
            cache_read_tokens=4,
            cache_write_tokens=6,
            total_tokens=50,
        ),
        End(rec(tc(20, 1, None, None, None, 1), tc(40, 2, 50, None, 4, 6), True, 2)),
    ],
    "absent input or output makes the turn unreliable": [
        start(),
        begin(),
        cum(input_tokens=10, total_tokens=10),
        End(rec(NULLS, tc(10, None, 10, None), False, 1)),
        begin(),
        cum(output_tokens=5, total_tokens=15),
        End(rec(NULLS, tc(None, 5, 15, None), False, 2)),
        begin(),
        cum(input_tokens=20, output_tokens=6),  # baseline lacks input: no baseline
        End(rec(NULLS, tc(20, 6, None, None), False, 3)),
        begin(),
        cum(input_tokens=21, output_tokens=8),
        End(rec(tc(1, 2, None, None), tc(21, 8, None, None), True, 4)),
    ],
    "absent cost, or cost without a baseline: only turn cost null": [
        start(),
        begin(),
        cum(input_tokens=10, output_tokens=1),
        End(rec(tc(10, 1, None, None), tc(10, 1, None, None), True, 1)),
        begin(),
        cum(input_tokens=20, output_tokens=2, cost_usd=0.5),  # baseline has no cost
        End(rec(tc(10, 1, None, None), tc(20, 2, None, 0.5), True, 2)),
        begin(),
        cum(input_tokens=30, output_tokens=3, cost_usd=0.75),
        End(rec(tc(10, 1, None, 0.25), tc(30, 3, None, 0.75), True, 3)),
    ],
    "the last cumulative observation replaces earlier ones whole": [
        start(),
        begin(),
        cum(input_tokens=10, output_tokens=1, total_tokens=11, cost_usd=0.5),
        cum(input_tokens=12, output_tokens=2),
        End(rec(tc(12, 2, None, None), tc(12, 2, None, None), True, 1)),
        begin(),
        cum(input_tokens=13, output_tokens=3, total_tokens=16, cost_usd=0.75),
        # the baseline is the last observation whole: it had no total and no cost
        End(rec(tc(1, 1, None, None), tc(13, 3, 16, 0.75), True, 2)),
    ],
    # --- cost-only reporting ------------------------------------------------------------------
    "cost-only standard reporting: record with null token counters": [
        start(),
        begin(),
        cost(0.25),
        End(rec(tc(None, None, None, 0.25), None, True, 1)),
        begin(),
        cost(0.5),
        cost(1.0),  # the last one in the turn counts
        End(rec(tc(None, None, None, 0.75), None, True, 2)),
        begin(),
        cost(0.5),  # decrease: null, never negative
        End(rec(NULLS, None, True, 3)),
    ],
    "cost-only cumulative reporting: unreliable tokens, cumulative cost kept": [
        start(),
        begin(),
        cum(cost_usd=0.5),
        End(rec(NULLS, tc(None, None, None, 0.5), False, 1)),
        begin(),
        cum(cost_usd=0.75),
        End(rec(NULLS, tc(None, None, None, 0.75), False, 2)),
    ],
    # --- notifications outside a turn ---------------------------------------------------------
    "cumulative outside a turn becomes the baseline": [
        cum(input_tokens=100, output_tokens=10, cost_usd=1.0),
        begin(),
        cum(input_tokens=150, output_tokens=30, cost_usd=1.5),
        End(rec(tc(50, 20, None, 0.5), tc(150, 30, None, 1.5), True, 1)),
        cum(input_tokens=400, output_tokens=40, cost_usd=2.0),  # between turns
        begin(),
        cum(input_tokens=410, output_tokens=45, cost_usd=2.25),
        End(rec(tc(10, 5, None, 0.25), tc(410, 45, None, 2.25), True, 2)),
    ],
    "outside observation replaces a created session's zero baseline": [
        start(),
        cum(input_tokens=100, output_tokens=10),
        begin(),
        cum(input_tokens=101, output_tokens=11),
        End(rec(tc(1, 1, None, None), tc(101, 11, None, None), True, 1)),
    ],
    "per-turn usage outside a turn is ignored": [
        start(),
        usage(input_tokens=5, output_tokens=5),
        begin(),
        End(None),
        usage(input_tokens=5, output_tokens=5),
        End(None),
    ],
    "cost outside a turn becomes the cost baseline": [
        cost(1.0),
        begin(),
        usage(input_tokens=1, output_tokens=2, total_tokens=3),
        cost(1.5),
        End(rec(tc(1, 2, 3, 0.5), None, True, 1)),
        cost(2.0),
        begin(),
        cost(2.25),
        End(rec(tc(None, None, None, 0.25), None, True, 2)),
    ],
    "end_turn without a turn, or a turn without usage: no record": [
        start(),
        End(None),
        begin(),
        End(None),
        End(None),
        begin(),
        cum(input_tokens=1, output_tokens=1),
        End(rec(tc(1, 1, None, None), tc(1, 1, None, None), True, 1)),
    ],
    # --- turnSeq ------------------------------------------------------------------------------
    "turn_seq counts returned records per session, from 1": [
        start(),
        start("other"),
        begin(),
        begin("other"),
        cost(0.25),
        End(rec(tc(None, None, None, 0.25), None, True, 1)),
        begin(),
        End(None),  # no usage: no record, no number used
        usage("other", input_tokens=1, output_tokens=1),
        End(rec(tc(1, 1, None, None), None, True, 1), "other"),
        begin(),
        cost(0.5),
        End(rec(tc(None, None, None, 0.25), None, True, 2)),
        begin("other"),
        usage("other", input_tokens=2, output_tokens=1),
        End(rec(tc(2, 1, None, None), None, True, 2), "other"),
    ],
    # --- standard source ----------------------------------------------------------------------
    "standard: last usage of the turn, cache folded, total never derived": [
        start(),
        begin(),
        usage(input_tokens=1, output_tokens=1, total_tokens=2),
        usage(input_tokens=10, output_tokens=4, cache_read_tokens=6, cache_write_tokens=2),
        End(rec(tc(18, 4, None, None, 6, 2), None, True, 1)),
    ],
    "standard: no cost observed means null cost (not zero)": [
        start(),
        begin(),
        usage(input_tokens=10, output_tokens=4, total_tokens=14),
        End(rec(tc(10, 4, 14, None), None, True, 1)),
    ],
    # --- both sources -------------------------------------------------------------------------
    "both sources in a turn: cumulative wins": [
        start(),
        begin(),
        usage(input_tokens=999, output_tokens=999, total_tokens=1998),
        cost(9.0),
        cum(input_tokens=100, output_tokens=10, total_tokens=110, cost_usd=0.5),
        End(rec(tc(100, 10, 110, 0.5), tc(100, 10, 110, 0.5), True, 1)),
        begin(),
        cost(9.5),  # the standard cost baseline still moved to 9.0 in the previous turn
        End(rec(tc(None, None, None, 0.5), None, True, 2)),
    ],
    # --- invalid values count as absent -------------------------------------------------------
    "negative, fractional, boolean and non-finite values count as absent": [
        start(),
        begin(),
        cum(
            input_tokens=-1,
            output_tokens=5,
            total_tokens=2.5,
            cache_read_tokens=True,
            cost_usd=math.nan,
        ),
        End(rec(NULLS, tc(None, 5, None, None), False, 1)),
        begin(),
        usage(input_tokens=4, output_tokens=-2, total_tokens=True),
        cost(math.inf),
        cost(-1.0),
        End(rec(tc(4, None, None, None), None, True, 2)),
        begin(),
        cost(float("nan")),
        usage(input_tokens=-1),  # nothing valid: ignored
        cum(input_tokens=-5),  # nothing valid: ignored
        End(None),
    ],
}


@pytest.mark.parametrize("steps", list(CASES.values()), ids=list(CASES))
def test_usage_table(steps: list[Step]) -> None:
    run(steps)


def test_begin_turn_twice_keeps_the_open_turn() -> None:
    tracker = UsageTracker()
    tracker.session_started(S)
    tracker.begin_turn(S)
    tracker.observe_turn(S, input_tokens=1, output_tokens=1)
    tracker.begin_turn(S)
    assert tracker.in_turn(S)
    record = tracker.end_turn(S)
    assert record == rec(tc(1, 1, None, None), None, True, 1)
    assert not tracker.in_turn(S)


def test_a_turn_without_usage_keeps_the_sequence() -> None:
    tracker = UsageTracker()
    tracker.session_started(S)
    tracker.begin_turn(S)
    assert tracker.end_turn(S) is None
    assert tracker.unknown_turn(S) == 1
    tracker.begin_turn(S)
    tracker.observe_turn(S, input_tokens=3, output_tokens=2)
    assert tracker.end_turn(S) == rec(tc(3, 2, None, None), None, True, 2)


def test_session_started_after_a_notification_keeps_it() -> None:
    tracker = UsageTracker()
    tracker.observe_cumulative(S, input_tokens=50, output_tokens=5)
    tracker.session_started(S)
    tracker.begin_turn(S)
    tracker.observe_cumulative(S, input_tokens=60, output_tokens=6)
    assert tracker.end_turn(S) == rec(tc(10, 1, None, None), tc(60, 6, None, None), True, 1)


counter = st.integers(0, 10_000)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(counter, counter, st.none() | counter), min_size=1, max_size=12))
def test_cumulative_deltas_never_negative_and_seq_monotonic(
    observations: list[tuple[int, int, int | None]],
) -> None:
    tracker = UsageTracker()
    tracker.session_started(S)
    last_in, last_out = 0, 0
    for seq, (inp, out, total) in enumerate(observations, start=1):
        tracker.begin_turn(S)
        tracker.observe_cumulative(S, input_tokens=inp, output_tokens=out, total_tokens=total)
        record = tracker.end_turn(S)
        assert record is not None and record.turn_seq == seq
        for value in (
            record.turn.input_tokens,
            record.turn.output_tokens,
            record.turn.total_tokens,
        ):
            assert value is None or value >= 0
        assert record.delta_reliable == (inp >= last_in and out >= last_out)
        if record.delta_reliable:
            assert record.turn.input_tokens == inp - last_in
            assert record.turn.output_tokens == out - last_out
        else:
            assert record.turn == NULLS
        assert record.cumulative == tc(inp, out, total, None)
        last_in, last_out = inp, out


# =================================================================================================
# Conformance: scenarios written from the sentences of docs/metrics.md "Usage accounting",
# with expected records computed by hand and driven through the tracker's methods directly.
# =================================================================================================


N = None


def same(a: TokenCounts | None, b: TokenCounts | None) -> bool:
    """Field-wise equality with float tolerance on cost."""
    if a is None or b is None:
        return a is b
    for f in (
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ):
        if getattr(a, f) != getattr(b, f):
            return False
    if (a.cost_usd is None) != (b.cost_usd is None):
        return False
    return a.cost_usd is None or math.isclose(a.cost_usd, b.cost_usd or 0.0, abs_tol=1e-12)


def observe_cum(t: UsageTracker, sid: str, **kw: Any) -> None:
    args: dict[str, Any] = {
        "input_tokens": None,
        "output_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "total_tokens": None,
        "cost_usd": None,
    }
    args.update(kw)
    t.observe_cumulative(sid, **args)


def std(t: UsageTracker, sid: str, **kw: Any) -> None:
    args: dict[str, Any] = {
        "input_tokens": None,
        "output_tokens": None,
        "total_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
    }
    args.update(kw)
    t.observe_turn(sid, **args)


def turn_with_cum(t: UsageTracker, sid: str, **kw: Any) -> Any:
    t.begin_turn(sid)
    observe_cum(t, sid, **kw)
    return t.end_turn(sid)


def check(
    rec: Any, *, turn: TokenCounts, cumulative: TokenCounts | None, reliable: bool, seq: int
) -> None:
    assert rec is not None
    assert same(rec.turn, turn), (rec.turn, turn)
    assert same(rec.cumulative, cumulative), (rec.cumulative, cumulative)
    assert rec.delta_reliable is reliable
    assert rec.turn_seq == seq


# ---------------------------------------------------------------------------------------------
# cumulative source


def test_created_session_first_turn_is_reliable_from_zero_baseline() -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(
        t,
        "s",
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=30,
        cache_write_tokens=5,
        total_tokens=155,
        cost_usd=0.5,
    )
    # cumulative.inputTokens folds the cache components in: 100 + 30 + 5
    check(
        rec,
        turn=tc(135, 20, 155, 0.5, 30, 5),
        cumulative=tc(135, 20, 155, 0.5, 30, 5),
        reliable=True,
        seq=1,
    )
    rec2 = turn_with_cum(
        t,
        "s",
        input_tokens=150,
        output_tokens=50,
        cache_read_tokens=40,
        cache_write_tokens=5,
        total_tokens=245,
        cost_usd=0.8,
    )
    check(
        rec2,
        turn=tc(60, 30, 90, 0.3, 10, 0),
        cumulative=tc(195, 50, 245, 0.8, 40, 5),
        reliable=True,
        seq=2,
    )


def test_absent_input_makes_turn_unreliable_even_with_cache_parts() -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(t, "s", output_tokens=10, cache_read_tokens=4, total_tokens=15)
    assert rec is not None
    assert rec.delta_reliable is False
    assert same(rec.turn, NULLS)
    assert rec.cumulative is not None and rec.cumulative.input_tokens is None


def test_folded_input_grows_while_cache_read_decreases_is_field_local() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(
        t, "s", input_tokens=100, output_tokens=10, cache_read_tokens=50, cache_write_tokens=7
    )
    rec = turn_with_cum(
        t, "s", input_tokens=200, output_tokens=11, cache_read_tokens=40, cache_write_tokens=9
    )
    # folded: 157 -> 249 (+92); cache read decreases -> None; cache write +2
    check(
        rec, turn=tc(92, 1, N, N, N, 2), cumulative=tc(249, 11, N, N, 40, 9), reliable=True, seq=2
    )


def test_absent_cost_or_cost_without_baseline_only_nulls_turn_cost() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10, total_tokens=110, cost_usd=0.5)
    # absent cost now
    rec = turn_with_cum(t, "s", input_tokens=120, output_tokens=12, total_tokens=132)
    check(rec, turn=tc(20, 2, 22, N), cumulative=tc(120, 12, 132, N), reliable=True, seq=2)
    # the baseline is the last observation *whole*: it has no cost, so this delta has none
    rec3 = turn_with_cum(t, "s", input_tokens=130, output_tokens=13, total_tokens=143, cost_usd=0.9)
    check(rec3, turn=tc(10, 1, 11, N), cumulative=tc(130, 13, 143, 0.9), reliable=True, seq=3)
    rec4 = turn_with_cum(t, "s", input_tokens=130, output_tokens=13, total_tokens=143, cost_usd=1.0)
    check(rec4, turn=tc(0, 0, 0, 0.1), cumulative=tc(130, 13, 143, 1.0), reliable=True, seq=4)


def test_total_tokens_is_field_local() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10, total_tokens=110)
    rec = turn_with_cum(t, "s", input_tokens=120, output_tokens=12, total_tokens=100)  # decreasing
    check(rec, turn=tc(20, 2, N, N), cumulative=tc(120, 12, 100, N), reliable=True, seq=2)
    rec = turn_with_cum(t, "s", input_tokens=130, output_tokens=13)  # absent
    check(rec, turn=tc(10, 1, N, N), cumulative=tc(130, 13, N, N), reliable=True, seq=3)
    rec = turn_with_cum(t, "s", input_tokens=140, output_tokens=14, total_tokens=500)  # no baseline
    check(rec, turn=tc(10, 1, N, N), cumulative=tc(140, 14, 500, N), reliable=True, seq=4)
    rec = turn_with_cum(t, "s", input_tokens=150, output_tokens=15, total_tokens=520)
    check(rec, turn=tc(10, 1, 20, N), cumulative=tc(150, 15, 520, N), reliable=True, seq=5)


def test_cache_fields_without_baseline_are_none() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10)
    rec = turn_with_cum(
        t, "s", input_tokens=100, output_tokens=10, cache_read_tokens=5, cache_write_tokens=1
    )
    # folded input 100 -> 106
    check(rec, turn=tc(6, 0, N, N), cumulative=tc(106, 10, N, N, 5, 1), reliable=True, seq=2)


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), "10", True])
def test_invalid_token_values_count_as_absent(bad: Any) -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(t, "s", input_tokens=bad, output_tokens=10, total_tokens=bad)
    assert rec is not None
    assert rec.delta_reliable is False
    assert same(rec.turn, NULLS)
    assert rec.cumulative is not None
    assert rec.cumulative.input_tokens is None and rec.cumulative.total_tokens is None
    assert rec.cumulative.output_tokens == 10


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf"), float("-inf"), "0.5", True])
def test_invalid_cost_counts_as_absent(bad: Any) -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(t, "s", input_tokens=10, output_tokens=1, cost_usd=bad)
    check(rec, turn=tc(10, 1, N, N), cumulative=tc(10, 1, N, N), reliable=True, seq=1)


def test_end_turn_without_observation_returns_none_and_does_not_count() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    assert t.end_turn("s") is None
    rec = turn_with_cum(t, "s", input_tokens=5, output_tokens=1)
    check(rec, turn=tc(5, 1, N, N), cumulative=tc(5, 1, N, N), reliable=True, seq=1)


def test_observations_outside_turn_alone_produce_no_record() -> None:
    t = UsageTracker()
    observe_cum(t, "s", input_tokens=5, output_tokens=1)
    t.observe_cost("s", 0.2)
    std(t, "s", input_tokens=5, output_tokens=1, total_tokens=6)
    t.begin_turn("s")
    assert t.end_turn("s") is None


def test_turn_seq_counts_per_session() -> None:
    t = UsageTracker()
    t.session_started("a")
    t.session_started("b")
    seqs = []
    for sid in ("a", "b", "a", "a", "b"):
        rec = turn_with_cum(t, sid, input_tokens=len(seqs) + 1, output_tokens=len(seqs) + 1)
        seqs.append((sid, rec.turn_seq))
    assert seqs == [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2)]


def test_sessions_keep_separate_baselines() -> None:
    t = UsageTracker()
    t.session_started("a")
    observe_cum(t, "b", input_tokens=1000, output_tokens=100)
    rec_a = turn_with_cum(t, "a", input_tokens=10, output_tokens=1)
    check(rec_a, turn=tc(10, 1, N, N), cumulative=tc(10, 1, N, N), reliable=True, seq=1)
    rec_b = turn_with_cum(t, "b", input_tokens=1010, output_tokens=101)
    check(rec_b, turn=tc(10, 1, N, N), cumulative=tc(1010, 101, N, N), reliable=True, seq=1)


def test_keyword_arguments_may_be_left_out() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    t.observe_cumulative("s", input_tokens=3, output_tokens=4)
    rec = t.end_turn("s")
    check(rec, turn=tc(3, 4, N, N), cumulative=tc(3, 4, N, N), reliable=True, seq=1)
    t.begin_turn("s")
    t.observe_turn("s", input_tokens=1)
    rec = t.end_turn("s")
    assert rec is not None and rec.turn.input_tokens == 1


# ---------------------------------------------------------------------------------------------
# standard source


def test_standard_turn_usage_folds_cache_and_keeps_reported_total() -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(
        t,
        "s",
        input_tokens=100,
        output_tokens=20,
        total_tokens=130,
        cache_read_tokens=8,
        cache_write_tokens=2,
    )
    rec = t.end_turn("s")
    check(rec, turn=tc(110, 20, 130, N, 8, 2), cumulative=None, reliable=True, seq=1)


def test_standard_cost_delta_created_session_starts_at_zero() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    std(t, "s", input_tokens=10, output_tokens=2, total_tokens=12)
    t.observe_cost("s", 0.1)
    t.observe_cost("s", 0.25)
    check(t.end_turn("s"), turn=tc(10, 2, 12, 0.25), cumulative=None, reliable=True, seq=1)
    t.begin_turn("s")
    std(t, "s", input_tokens=5, output_tokens=1, total_tokens=6)
    t.observe_cost("s", 0.4)
    check(t.end_turn("s"), turn=tc(5, 1, 6, 0.15), cumulative=None, reliable=True, seq=2)
    # no observe_cost in this turn -> null cost
    t.begin_turn("s")
    std(t, "s", input_tokens=5, output_tokens=1, total_tokens=6)
    check(t.end_turn("s"), turn=tc(5, 1, 6, N), cumulative=None, reliable=True, seq=3)
    # the baseline is still the last cost seen (0.4)
    t.begin_turn("s")
    std(t, "s", input_tokens=5, output_tokens=1, total_tokens=6)
    t.observe_cost("s", 0.5)
    check(t.end_turn("s"), turn=tc(5, 1, 6, 0.1), cumulative=None, reliable=True, seq=4)


def test_standard_cost_outside_turn_is_baseline_even_for_created_session() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.observe_cost("s", 0.3)
    t.begin_turn("s")
    std(t, "s", input_tokens=1, output_tokens=1, total_tokens=2)
    t.observe_cost("s", 0.5)
    check(t.end_turn("s"), turn=tc(1, 1, 2, 0.2), cumulative=None, reliable=True, seq=1)


def test_standard_cost_decrease_is_null() -> None:
    t = UsageTracker()
    t.observe_cost("s", 2.0)
    t.begin_turn("s")
    std(t, "s", input_tokens=1, output_tokens=1, total_tokens=2)
    t.observe_cost("s", 1.0)
    check(t.end_turn("s"), turn=tc(1, 1, 2, N), cumulative=None, reliable=True, seq=1)
    # next turn: baseline is the last observation (1.0)
    t.begin_turn("s")
    t.observe_cost("s", 1.5)
    check(t.end_turn("s"), turn=tc(N, N, N, 0.5), cumulative=None, reliable=True, seq=2)


@pytest.mark.parametrize("bad", [-1, 2.5, "3"])
def test_standard_invalid_values_absent(bad: Any) -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(t, "s", input_tokens=bad, output_tokens=4, total_tokens=bad, cache_read_tokens=bad)
    check(t.end_turn("s"), turn=tc(N, 4, N, N), cumulative=None, reliable=True, seq=1)


def test_standard_invalid_cost_ignored() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    std(t, "s", input_tokens=1, output_tokens=1)
    t.observe_cost("s", float("nan"))
    t.observe_cost("s", -1.0)
    rec = t.end_turn("s")
    assert rec is not None and rec.turn.input_tokens == 1
    # invalid costs are absent: no cost observed in the turn
    assert rec.turn.cost_usd is None


# ---------------------------------------------------------------------------------------------
# both sources


def test_cumulative_source_wins_when_both_observed() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    std(t, "s", input_tokens=999, output_tokens=999, total_tokens=1998)
    observe_cum(t, "s", input_tokens=40, output_tokens=4, total_tokens=44, cost_usd=0.04)
    t.observe_cost("s", 7.0)
    rec = t.end_turn("s")
    check(rec, turn=tc(40, 4, 44, 0.04), cumulative=tc(40, 4, 44, 0.04), reliable=True, seq=1)
    # order does not matter
    t.begin_turn("s")
    observe_cum(t, "s", input_tokens=50, output_tokens=5, total_tokens=55, cost_usd=0.05)
    std(t, "s", input_tokens=1, output_tokens=1, total_tokens=2)
    rec = t.end_turn("s")
    check(rec, turn=tc(10, 1, 11, 0.01), cumulative=tc(50, 5, 55, 0.05), reliable=True, seq=2)


def test_each_source_keeps_its_own_baseline() -> None:
    t = UsageTracker()
    t.session_started("s")
    # turn 1: standard source only, with cost
    t.begin_turn("s")
    std(t, "s", input_tokens=10, output_tokens=1, total_tokens=11)
    t.observe_cost("s", 0.3)
    check(t.end_turn("s"), turn=tc(10, 1, 11, 0.3), cumulative=None, reliable=True, seq=1)
    # turn 2: cumulative source starts from its own zero baseline
    rec = turn_with_cum(t, "s", input_tokens=25, output_tokens=3, total_tokens=28, cost_usd=0.35)
    check(rec, turn=tc(25, 3, 28, 0.35), cumulative=tc(25, 3, 28, 0.35), reliable=True, seq=2)


def test_turn_with_only_invalid_values_observed_nothing() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    observe_cum(t, "s", input_tokens=-1, cost_usd=float("nan"))
    t.observe_cost("s", -2.0)
    assert t.end_turn("s") is None


def test_api_keyword_names() -> None:
    import inspect

    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    t.observe_turn(
        "s",
        input_tokens=1,
        output_tokens=2,
        total_tokens=3,
        cache_read_tokens=None,
        cache_write_tokens=None,
    )
    t.observe_cost("s", cost_usd=0.5)
    check(t.end_turn("s"), turn=tc(1, 2, 3, 0.5), cumulative=None, reliable=True, seq=1)
    params = inspect.signature(UsageTracker.observe_cumulative).parameters
    assert set(params) >= {
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "total_tokens",
        "cost_usd",
    }


def test_counts_reported_whole_keep_only_what_a_metric_can_carry() -> None:
    bad = TokenCounts(
        input_tokens=-1,
        output_tokens=True,  # a bool is not a count
        total_tokens=MAX_TOKENS + 1,
        cost_usd=float("nan"),
        cache_read_tokens="3",  # type: ignore[arg-type]
        cache_write_tokens=0,
    )
    assert checked_counts(bad) == TokenCounts(None, None, None, None, None, 0)
    assert checked_counts(TokenCounts(1, 1, 2, 10**400)).cost_usd is None  # beyond a float
    assert checked_counts(TokenCounts(1, 1, 2, 2e6)).cost_usd is None  # beyond one turn's cap
    assert checked_counts(TokenCounts(1, 2, 3, 0.5)) == TokenCounts(1, 2, 3, 0.5)


def test_the_cache_counters_earlier_names_still_work_with_a_deprecation_warning() -> None:
    def turn(**cache: int) -> UsageRecord | None:
        tracker = UsageTracker()
        tracker.session_started(S)
        tracker.begin_turn(S)
        tracker.observe_turn(S, input_tokens=100, output_tokens=5, **cache)
        return tracker.end_turn(S)

    expected = turn(cache_read_tokens=60, cache_write_tokens=30)
    assert expected is not None and expected.turn.cache_read_tokens == 60
    with pytest.warns(DeprecationWarning) as warned:
        old = turn(cached_read_tokens=60, cached_write_tokens=30)
    assert old == expected
    messages = [str(w.message) for w in warned]
    assert messages == [
        "UsageTracker.observe_turn(cached_read_tokens=…) is deprecated and will be removed in "
        "nostr-buzz 0.2.0: use cache_read_tokens=",
        "UsageTracker.observe_turn(cached_write_tokens=…) is deprecated and will be removed in "
        "nostr-buzz 0.2.0: use cache_write_tokens=",
    ]
    assert all(w.filename == __file__ for w in warned)  # the caller's line is named
    with pytest.raises(TypeError, match="give cache_read_tokens= only"):
        turn(cached_read_tokens=1, cache_read_tokens=1)
