"""Independent conformance tests for usage accounting (docs/metrics.md, "Usage accounting").

Each scenario is derived from a sentence of docs/metrics.md; expected records are computed by hand.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from nostr_buzz import UsageTracker
from nostr_buzz.nips.nip_am import TokenCounts

N = None


def tc(
    i: int | None,
    o: int | None,
    t: int | None,
    c: float | None,
    cr: int | None = None,
    cw: int | None = None,
) -> TokenCounts:
    return TokenCounts(
        input_tokens=i,
        output_tokens=o,
        total_tokens=t,
        cost_usd=c,
        cache_read_tokens=cr,
        cache_write_tokens=cw,
    )


NULL = tc(N, N, N, N)


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


def cum(t: UsageTracker, sid: str, **kw: Any) -> None:
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
        "cached_read_tokens": None,
        "cached_write_tokens": None,
    }
    args.update(kw)
    t.observe_turn(sid, **args)


def turn_with_cum(t: UsageTracker, sid: str, **kw: Any) -> Any:
    t.begin_turn(sid)
    cum(t, sid, **kw)
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


def test_no_baseline_mid_session_is_unreliable_then_recovers() -> None:
    t = UsageTracker()
    rec = turn_with_cum(t, "x", input_tokens=100, output_tokens=20, total_tokens=120, cost_usd=1.0)
    check(rec, turn=NULL, cumulative=tc(100, 20, 120, 1.0), reliable=False, seq=1)
    rec2 = turn_with_cum(
        t, "x", input_tokens=110, output_tokens=25, total_tokens=135, cost_usd=1.25
    )
    check(rec2, turn=tc(10, 5, 15, 0.25), cumulative=tc(110, 25, 135, 1.25), reliable=True, seq=2)


def test_unreliable_turn_nulls_cache_fields_too() -> None:
    t = UsageTracker()
    rec = turn_with_cum(
        t, "x", input_tokens=10, output_tokens=1, cache_read_tokens=4, total_tokens=15
    )
    check(rec, turn=NULL, cumulative=tc(14, 1, 15, N, 4), reliable=False, seq=1)


def test_observation_outside_turn_is_the_baseline() -> None:
    t = UsageTracker()
    cum(t, "x", input_tokens=100, output_tokens=10, total_tokens=110, cost_usd=0.1)
    rec = turn_with_cum(t, "x", input_tokens=130, output_tokens=15, total_tokens=145, cost_usd=0.15)
    check(rec, turn=tc(30, 5, 35, 0.05), cumulative=tc(130, 15, 145, 0.15), reliable=True, seq=1)
    # after a turn, a later outside observation advances the baseline again
    cum(t, "x", input_tokens=200, output_tokens=20, total_tokens=220, cost_usd=0.2)
    rec2 = turn_with_cum(t, "x", input_tokens=210, output_tokens=21, total_tokens=231, cost_usd=0.2)
    check(rec2, turn=tc(10, 1, 11, 0.0), cumulative=tc(210, 21, 231, 0.2), reliable=True, seq=2)


def test_last_observation_in_turn_replaces_earlier_ones_whole() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    cum(
        t, "s", input_tokens=10, output_tokens=5, total_tokens=15, cost_usd=0.1, cache_read_tokens=3
    )
    cum(t, "s", input_tokens=20, output_tokens=8)
    rec = t.end_turn("s")
    # the last observation lacks total, cost and cache: absent, not carried over
    check(rec, turn=tc(20, 8, N, N), cumulative=tc(20, 8, N, N), reliable=True, seq=1)


def test_absent_output_makes_turn_unreliable() -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(t, "s", input_tokens=10, total_tokens=15, cost_usd=0.1)
    check(rec, turn=NULL, cumulative=tc(10, N, 15, 0.1), reliable=False, seq=1)


def test_absent_input_makes_turn_unreliable_even_with_cache_parts() -> None:
    t = UsageTracker()
    t.session_started("s")
    rec = turn_with_cum(t, "s", output_tokens=10, cache_read_tokens=4, total_tokens=15)
    assert rec is not None
    assert rec.delta_reliable is False
    assert same(rec.turn, NULL)
    assert rec.cumulative is not None and rec.cumulative.input_tokens is None


def test_decreasing_input_unreliable_never_negative_then_baseline_is_last_observation() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10, total_tokens=110, cost_usd=0.5)
    rec = turn_with_cum(t, "s", input_tokens=90, output_tokens=12, total_tokens=102, cost_usd=0.6)
    check(rec, turn=NULL, cumulative=tc(90, 12, 102, 0.6), reliable=False, seq=2)
    rec3 = turn_with_cum(t, "s", input_tokens=95, output_tokens=13, total_tokens=108, cost_usd=0.7)
    check(rec3, turn=tc(5, 1, 6, 0.1), cumulative=tc(95, 13, 108, 0.7), reliable=True, seq=3)


def test_decrease_judged_on_folded_input() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10, cache_read_tokens=50)
    # raw input grows but folded input (100+50 -> 120+0) decreases
    rec = turn_with_cum(t, "s", input_tokens=120, output_tokens=11, cache_read_tokens=0)
    check(rec, turn=NULL, cumulative=tc(120, 11, N, N, 0), reliable=False, seq=2)


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


def test_decreasing_output_unreliable() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10)
    rec = turn_with_cum(t, "s", input_tokens=101, output_tokens=9)
    check(rec, turn=NULL, cumulative=tc(101, 9, N, N), reliable=False, seq=2)


def test_decreasing_cost_unreliable() -> None:
    t = UsageTracker()
    t.session_started("s")
    turn_with_cum(t, "s", input_tokens=100, output_tokens=10, total_tokens=110, cost_usd=0.5)
    rec = turn_with_cum(t, "s", input_tokens=120, output_tokens=12, total_tokens=132, cost_usd=0.4)
    check(rec, turn=NULL, cumulative=tc(120, 12, 132, 0.4), reliable=False, seq=2)


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
    assert same(rec.turn, NULL)
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
    cum(t, "s", input_tokens=5, output_tokens=1)
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
    cum(t, "b", input_tokens=1000, output_tokens=100)
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
        cached_read_tokens=8,
        cached_write_tokens=2,
    )
    rec = t.end_turn("s")
    check(rec, turn=tc(110, 20, 130, N, 8, 2), cumulative=None, reliable=True, seq=1)


def test_standard_total_never_derived() -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(t, "s", input_tokens=100, output_tokens=20)
    check(t.end_turn("s"), turn=tc(100, 20, N, N), cumulative=None, reliable=True, seq=1)


def test_standard_last_usage_in_turn_wins_whole() -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(t, "s", input_tokens=100, output_tokens=20, total_tokens=120, cached_read_tokens=5)
    std(t, "s", input_tokens=7, output_tokens=3)
    check(t.end_turn("s"), turn=tc(7, 3, N, N), cumulative=None, reliable=True, seq=1)


def test_standard_usage_outside_turn_ignored() -> None:
    t = UsageTracker()
    std(t, "s", input_tokens=100, output_tokens=20, total_tokens=120)
    t.begin_turn("s")
    assert t.end_turn("s") is None
    std(t, "s", input_tokens=100, output_tokens=20, total_tokens=120)
    t.begin_turn("s")
    t.observe_cost("s", 0.5)
    check(t.end_turn("s"), turn=tc(N, N, N, N), cumulative=None, reliable=True, seq=1)


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


def test_standard_cost_without_baseline_is_null_but_reliable() -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(t, "s", input_tokens=10, output_tokens=2, total_tokens=12)
    t.observe_cost("s", 3.0)
    check(t.end_turn("s"), turn=tc(10, 2, 12, N), cumulative=None, reliable=True, seq=1)
    t.begin_turn("s")
    std(t, "s", input_tokens=10, output_tokens=2, total_tokens=12)
    t.observe_cost("s", 3.5)
    check(t.end_turn("s"), turn=tc(10, 2, 12, 0.5), cumulative=None, reliable=True, seq=2)


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


def test_cost_only_turn_returns_record_with_null_tokens() -> None:
    t = UsageTracker()
    t.session_started("s")
    t.begin_turn("s")
    t.observe_cost("s", 0.2)
    check(t.end_turn("s"), turn=tc(N, N, N, 0.2), cumulative=None, reliable=True, seq=1)


@pytest.mark.parametrize("bad", [-1, 2.5, "3"])
def test_standard_invalid_values_absent(bad: Any) -> None:
    t = UsageTracker()
    t.begin_turn("s")
    std(t, "s", input_tokens=bad, output_tokens=4, total_tokens=bad, cached_read_tokens=bad)
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
    cum(t, "s", input_tokens=40, output_tokens=4, total_tokens=44, cost_usd=0.04)
    t.observe_cost("s", 7.0)
    rec = t.end_turn("s")
    check(rec, turn=tc(40, 4, 44, 0.04), cumulative=tc(40, 4, 44, 0.04), reliable=True, seq=1)
    # order does not matter
    t.begin_turn("s")
    cum(t, "s", input_tokens=50, output_tokens=5, total_tokens=55, cost_usd=0.05)
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
    cum(t, "s", input_tokens=-1, cost_usd=float("nan"))
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
        cached_read_tokens=None,
        cached_write_tokens=None,
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
