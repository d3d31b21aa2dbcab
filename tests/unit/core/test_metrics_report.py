"""The owner's metrics report, pure: forgeries ignored for their own reason, sessions, deltas,
totals (``build_report``, ``open_metric``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.event import Event, sign_event
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts
from nostr_buzz.reports.metrics_report import OpenedMetric, build_report, open_metric
from tests.support.metric_scenario import (
    AGENT_A,
    AGENT_B,
    OWNER,
    counts,
    forged_metrics,
    metric,
    scenario,
)

# --- pure rules -------------------------------------------------------------------------------


def opened(events: list[Event]) -> list[OpenedMetric]:
    out = []
    for event in events:
        result = open_metric(OWNER, event)
        assert isinstance(result, OpenedMetric), result
        out.append(result)
    return out


def test_each_forgery_is_ignored_for_its_own_reason() -> None:
    reasons = [open_metric(OWNER, e) for e in forged_metrics()]
    assert reasons == ["not_for_owner", "agent_mismatch", "undecryptable", "invalid_payload"]
    chat = sign_event(AGENT_A, kind=9, content="hi", created_at=1)
    assert open_metric(OWNER, chat) == "wrong_kind"
    with_channel = sign_event(
        AGENT_A,
        kind=44200,
        content="x",
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_A.public_key.hex), ("h", "c")),
        created_at=1,
    )
    assert open_metric(OWNER, with_channel) == "channel_tag"


def test_sessions_are_ordered_by_turn_seq_and_deltas_come_from_cumulative() -> None:
    report = build_report(opened(scenario().valid))
    a1 = [r for r in report.turns if r.session_id == "a1"]
    assert [r.turn_seq for r in a1] == [1, 2, 3]
    first, second, third = a1
    assert (first.input_tokens, first.cost_usd, first.delta_source) == (100, 0.01, "reported")
    assert (second.input_tokens, second.output_tokens, second.total_tokens) == (150, 20, 170)
    assert second.cost_usd == 0.02  # rounded: not 0.019999999999999997
    assert second.delta_source == "cumulative" and second.delta_reliable
    # Input went from 250 down to 200: unknown, never -50, and not the stale report either.
    assert (third.input_tokens, third.output_tokens, third.total_tokens, third.cost_usd) == (
        None,
        None,
        None,
        None,
    )
    assert third.delta_source == "cumulative" and not third.delta_reliable


def test_a_gap_in_turn_seq_falls_back_to_the_reported_turn() -> None:
    def p(seq: int, cum: int, turn: int) -> MetricPayload:
        return MetricPayload(
            harness="goose",
            timestamp=f"2026-12-02T10:00:0{seq}.000Z",
            session_id="s",
            turn_seq=seq,
            turn=counts(turn, 1, None, None),
            cumulative=counts(cum, seq, None, None),
        )

    rows = build_report(opened([metric(AGENT_A, p(1, 10, 10)), metric(AGENT_A, p(3, 50, 15))]))
    assert [(r.turn_seq, r.input_tokens, r.delta_source) for r in rows.turns] == [
        (1, 10, "reported"),
        (3, 15, "reported"),  # 50 − 10 would include the lost turn 2
    ]


def test_manifest_mismatch_is_flagged_not_dropped() -> None:
    report = build_report(opened(scenario().valid))
    flags = {r.turn_seq: r.manifest_valid for r in report.turns if r.session_id == "a1"}
    assert flags == {1: True, 2: False, 3: None}
    assert report.manifest_mismatches == 1
    assert len(report.turns) == 6


def test_totals_per_agent_model_and_utc_day_never_count_null_as_zero() -> None:
    report = build_report(opened(scenario().valid), {"undecryptable": 2, "verification": 0})
    totals = {(t.day, t.agent[:4], t.model): t for t in report.totals}
    a = AGENT_A.public_key.hex[:4]
    b = AGENT_B.public_key.hex[:4]
    assert set(totals) == {
        ("2026-12-02", a, "model-a"),
        ("2026-12-01", b, "model-b"),
        ("2026-12-02", b, "model-b"),
    }
    ta = totals[("2026-12-02", a, "model-a")]
    assert (ta.turns, ta.input_tokens, ta.output_tokens, ta.total_tokens) == (3, 250, 30, 280)
    assert ta.cost_usd == pytest.approx(0.03)
    assert ta.unknown_turns == 1
    late = totals[("2026-12-01", b, "model-b")]  # 23:59:59.999Z is still the 1st (UTC)
    assert (late.turns, late.input_tokens, late.cost_usd) == (1, 1000, 0.5)
    day2 = totals[("2026-12-02", b, "model-b")]
    # One of its turns reported tokens and no cost: its usage is known, its cost not summed.
    assert (day2.turns, day2.input_tokens, day2.cost_usd, day2.unknown_turns) == (2, 2001, 0.25, 0)
    assert report.ignored == {"undecryptable": 2}


def test_a_counter_nobody_reported_totals_to_null() -> None:
    p = MetricPayload(
        harness="x", timestamp="2026-12-02T00:00:00.000Z", turn=counts(5, 5, None, None)
    )
    [total] = build_report(opened([metric(AGENT_A, p)])).totals
    assert total.total_tokens is None and total.cost_usd is None
    # Its input and output are known: its usage is (an unreported total or cost is no unknown).
    assert total.unknown_turns == 0


def test_cache_counters_and_context_occupancy_reach_the_report() -> None:
    def payload(seq: int, turn: TokenCounts | None, used: int | None) -> MetricPayload:
        return MetricPayload(
            harness="claude",
            timestamp=f"2026-12-02T10:00:0{seq}.000Z",
            model="m",
            session_id="s",
            turn_seq=seq,
            turn=turn,
            context_used_tokens=used,
            context_window_tokens=200_000 if used is not None else None,
        )

    cached = TokenCounts(170, 20, 190, 0.01, cache_read_tokens=30, cache_write_tokens=40)
    metrics = [
        payload(1, cached, 171),
        payload(2, cached, 362),
        payload(3, counts(None, None, None, None), 9_000),  # a turn of unknown usage
    ]
    report = build_report(opened([metric(AGENT_A, p) for p in metrics]))
    [total] = report.totals
    assert (total.turns, total.unknown_turns) == (3, 1)
    assert (total.input_tokens, total.cache_read_tokens, total.cache_write_tokens) == (340, 60, 80)
    rows = sorted(report.turns, key=lambda r: r.turn_seq or 0)
    assert [r.cache_read_tokens for r in rows] == [30, 30, None]
    assert [r.context_used_tokens for r in rows] == [171, 362, 9_000]
    assert rows[2].context_window_tokens == 200_000


def test_duplicates_by_id_count_once() -> None:
    metrics = opened(scenario().valid)
    report = build_report(metrics + metrics[:2])
    assert len(report.turns) == len(metrics)


# --- properties of the pure report ------------------------------------------------------------

_cumulative = st.tuples(
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.one_of(st.none(), st.integers(0, 10_000)),
    st.one_of(st.none(), st.integers(0, 10_000).map(lambda c: c / 100)),
)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_cumulative, min_size=1, max_size=8), order=st.randoms())
def test_report_properties(
    values: list[tuple[int, int, int | None, float | None]], order: Any
) -> None:
    metrics = [
        OpenedMetric(
            event_id=f"{seq:064x}",
            agent=AGENT_A.public_key.hex,
            created_at=2_000_000_000 - seq,  # never used for ordering
            payload=MetricPayload(
                harness="goose",
                timestamp=f"2026-12-02T10:00:{seq:02d}.000Z",
                model="m",
                session_id="s",
                turn_seq=seq,
                turn=counts(None, None, None, None),
                cumulative=counts(*value),
                delta_reliable=False,
            ),
        )
        for seq, value in enumerate(values, start=1)
    ]
    shuffled = list(metrics)
    order.shuffle(shuffled)
    report = build_report(shuffled)
    assert report == build_report(metrics)  # input order does not matter
    rows = report.turns
    assert [r.turn_seq for r in rows] == list(range(1, len(values) + 1))
    for row, before, after in zip(rows[1:], values[:-1], values[1:], strict=True):
        counters = (row.input_tokens, row.output_tokens, row.total_tokens, row.cost_usd)
        assert all(v is None or v >= 0 for v in counters)  # never negative
        grew = after[0] >= before[0] and after[1] >= before[1]
        cost_fell = None not in (after[3], before[3]) and after[3] < before[3]  # type: ignore[operator]
        assert row.delta_reliable == (grew and not cost_fell)
        if row.delta_reliable:
            assert (row.input_tokens, row.output_tokens) == (
                after[0] - before[0],
                after[1] - before[1],
            )
    [total] = report.totals
    assert total.turns == len(values)
    known_inputs = [r.input_tokens for r in rows if r.input_tokens is not None]
    assert total.input_tokens == (sum(known_inputs) if known_inputs else None)
    assert total.unknown_turns == sum(
        r.input_tokens is None or r.output_tokens is None for r in rows
    )


def test_a_turns_duration_runs_from_started_at_to_its_timestamp() -> None:
    def turn(started_at: str | None, n: int) -> MetricPayload:
        return MetricPayload(
            harness="goose",
            timestamp=f"2026-12-02T10:00:0{n}.250Z",
            started_at=started_at,
            model="m",
            turn=counts(1, 1, 2, 0.0),
        )

    starts = [
        "2026-12-02T09:58:00.125Z",  # 2 min 0.125 s earlier … plus n seconds
        "2026-12-02T11:59:59+02:00",  # another offset: 1 s before 10:00:00 UTC
        "2026-12-02t09:59:59.9999z",  # lower case, a finer fraction
        "2026-12-02T09:59:60Z",  # a leap second reads as 10:00:00
        "2026-12-02T10:00:09Z",  # later than the end: no duration, never a negative one
        None,
    ]
    report = build_report(opened([metric(AGENT_A, turn(s, n)) for n, s in enumerate(starts)]))
    durations = {r.timestamp[17:19]: r.duration_seconds for r in report.turns}
    assert durations == {
        "00": 120.125,
        "01": 2.25,
        "02": 2.25,  # 0.2501 s after a second short of 10:00:00, plus 2 s
        "03": 3.25,
        "04": None,
        "05": None,
    }
