"""The pure budget ledger: UTC periods, caps, deduplicated spend, decisions, notices once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nostr_buzz.core.budget import (
    BudgetLedger,
    Caps,
    Spend,
    parse_cap_value,
    period_bounds,
    period_key,
)


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


NOW = at("2026-12-04T18:30:00")  # a Friday


@pytest.mark.parametrize(
    ("period", "start", "end", "key"),
    [
        ("day", "2026-12-04T00:00:00", "2026-12-05T00:00:00", "day:2026-12-04"),
        ("week", "2026-11-30T00:00:00", "2026-12-07T00:00:00", "week:2026-W49"),
        ("month", "2026-12-01T00:00:00", "2027-01-01T00:00:00", "month:2026-12"),
    ],
)
def test_periods_are_utc_days_iso_weeks_and_months(
    period: str, start: str, end: str, key: str
) -> None:
    assert period_bounds(period, NOW) == (at(start), at(end))  # type: ignore[arg-type]
    assert period_key(period, NOW) == key  # type: ignore[arg-type]
    # The period's first second belongs to it; its end belongs to the next.
    assert period_bounds(period, at(start)) == (at(start), at(end))  # type: ignore[arg-type]
    assert period_bounds(period, at(end))[0] == at(end)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("caps", "spends", "decision", "over"),
    [
        (Caps(), [(1.0, 10)], "run", []),
        (Caps(daily_usd=0.05), [(0.02, 10), (0.02, 10)], "warn", []),  # 0.04 < 0.05
        (Caps(daily_usd=0.04), [(0.02, 10), (0.02, 10)], "warn", ["daily_usd"]),  # reached
        (Caps(daily_usd=0.0, action="stop"), [], "stop", ["daily_usd"]),  # 0 runs nothing
        # A turn of unknown cost counts against the token caps only.
        (Caps(daily_usd=0.01, action="stop"), [(None, 500)], "run", []),
        (Caps(daily_tokens=500, action="stop"), [(None, 500)], "stop", ["daily_tokens"]),
        (Caps(daily_tokens=500, action="stop"), [(None, None)], "run", []),
        (Caps(weekly_usd=1, monthly_usd=1, action="stop"), [(1.0, 0)], "stop",
         ["weekly_usd", "monthly_usd"]),
    ],
)  # fmt: skip
def test_the_decision_compares_the_periods_spend_with_each_cap(
    caps: Caps,
    spends: list[tuple[float | None, int | None]],
    decision: str,
    over: list[str],
) -> None:
    ledger = BudgetLedger(caps)
    for n, (cost, tokens) in enumerate(spends):
        ledger.add(Spend(f"m{n}", NOW - 60, cost, tokens, f"t{n}"))
    result = ledger.decide(NOW)
    assert [o.cap for o in result.over] == over
    assert result.action == (decision if over else "run")


def test_spend_counts_once_by_metric_id_or_turn_id_and_only_in_its_period() -> None:
    ledger = BudgetLedger(Caps(daily_usd=0.05, monthly_usd=0.1, action="stop"))
    assert ledger.add(Spend("m1", NOW - 60, 0.03, None, "t1"))
    assert not ledger.add(Spend("m1", NOW - 60, 0.03, None, "t1"))  # the same metric again
    assert not ledger.add(Spend("other-id", NOW - 60, 0.03, None, "t1"))  # the same turn
    assert ledger.add(Spend("m0", at("2026-12-03T23:59:59"), 0.04, None, "t0"))  # yesterday
    assert ledger.spent("daily_usd", NOW) == pytest.approx(0.03)
    assert ledger.spent("monthly_usd", NOW) == pytest.approx(0.07)
    assert ledger.decide(NOW).action == "run"
    ledger.add(Spend("m2", NOW, 0.02, None, "t2"))
    stop = ledger.decide(NOW)
    assert stop.action == "stop" and stop.until == at("2026-12-05T00:00:00")
    assert stop.period == "daily_usd@day:2026-12-04"
    # The next day the daily cap has rolled over.
    assert ledger.decide(at("2026-12-05T00:00:00")).action == "run"
    assert ledger.add(Spend("old", at("2026-11-29T12:00:00"), 9.0, None, "t-old"))  # last week
    assert ledger.spent("monthly_usd", NOW) == pytest.approx(0.09)
    assert ledger.forget_before(NOW) == ["old"]  # before this week and this month
    assert ledger.spent("monthly_usd", NOW) == pytest.approx(0.09)
    assert ledger.add(Spend("again", NOW, 0.0, None, "t-old"))  # its turn id is forgotten too


def test_a_notice_is_given_once_per_name_and_a_raised_cap_runs_again() -> None:
    ledger = BudgetLedger(Caps(daily_usd=0.01, action="stop"), notified={"warn:old": NOW + 60})
    ledger.add(Spend("m1", NOW, 0.02, 100, "t1"))
    name = ledger.decide(NOW).period
    assert ledger.first_notice(name, NOW + 60) and not ledger.first_notice(name, NOW + 60)
    assert not ledger.first_notice("warn:old", NOW + 60)
    ledger.forget_before(NOW + 60)  # their period is over: told again in the next one
    assert ledger.first_notice("warn:old", NOW + 120)
    ledger.caps = ledger.caps.with_cap("daily_usd", 1)
    assert ledger.decide(NOW).action == "run"
    ledger.caps = ledger.caps.with_cap("daily_usd", None)
    assert not ledger.caps.active


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [("daily_usd", "20", 20.0), ("daily_usd", "0.5", 0.5), ("weekly_usd", "off", None),
     ("daily_tokens", "1000", 1000.0)],
)  # fmt: skip
def test_cap_values_from_the_owner(name: str, text: str, value: float | None) -> None:
    assert parse_cap_value(name, text) == value


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [("yearly_usd", "1", "unknown budget cap"), ("daily_usd", "-1", ">= 0"),
     ("daily_usd", "nan", "finite"), ("daily_usd", "lots", "a number"),
     ("daily_tokens", "1.5", "whole")],
)  # fmt: skip
def test_bad_cap_values_say_what_was_wrong(name: str, text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_cap_value(name, text)


def test_periods_agree_with_the_calendar_over_years() -> None:
    day = at("1999-12-25T12:00:00")
    for _ in range(3000):  # about eight years, leap days and ISO week 53s included
        when = datetime.fromtimestamp(day, UTC)
        year, week, weekday = when.isocalendar()
        assert period_key("week", day) == f"week:{year}-W{week:02d}"
        assert period_key("day", day) == f"day:{when:%Y-%m-%d}"
        start, end = period_bounds("month", day)
        assert datetime.fromtimestamp(start, UTC).day == 1 and start <= day < end
        assert datetime.fromtimestamp(end, UTC).day == 1 and end - start <= 31 * 86400
        assert (
            period_bounds("week", day)[0] == at(f"{when:%Y-%m-%d}T00:00:00") - (weekday - 1) * 86400
        )
        day += 86400
