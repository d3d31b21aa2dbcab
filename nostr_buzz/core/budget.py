"""Budgets: what the agent may spend per UTC day, week and month (docs/bot.md, "Budgets").

Pure: the clock is passed in (Unix seconds, read as UTC).  A :class:`BudgetLedger` holds the
caps, the spend it was told about (each turn once, whichever of its metric id or turn id names
it: the bot's own settled turns and the metrics other shards of the same agent key published)
and which notices were already given in which period; :meth:`BudgetLedger.decide` says whether
the next turn runs.

* **Periods.** A day starts at 00:00 UTC, a week on Monday 00:00 UTC (ISO weeks), a month on
  its first day at 00:00 UTC.
* **Caps.** ``daily_usd``, ``weekly_usd`` and ``monthly_usd`` sum the turns' known costs;
  ``daily_tokens`` sums the turns' tokens (``totalTokens``, else input + output), those whose
  cost is unknown included: a turn that reported neither a cost nor tokens counts nothing.
  A cap is over once the period's spend has reached it (a cap of 0 runs nothing).
* **Decision.** ``run`` when no cap is over; else the configured ``action``: ``warn`` (the
  turn runs, the owner is told once per period) or ``stop`` (the turn does not run until the
  latest of the over caps' periods ends, or the owner raises the cap).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal, get_args

from nostr_buzz.core.choices import CHOICES, BudgetAction, check_choice

__all__ = [
    "CAP_NAMES",
    "PERIODS",
    "Action",
    "BudgetDecision",
    "BudgetLedger",
    "CapName",
    "Caps",
    "Over",
    "Period",
    "Spend",
    "kept_since",
    "parse_cap_value",
    "period_bounds",
    "period_key",
    "with_owner_note",
    "with_owner_notes",
]

#: ``[budget] action`` (:mod:`nostr_buzz.core.choices`).
Action = BudgetAction
Period = Literal["day", "week", "month"]
CapName = Literal["daily_usd", "weekly_usd", "monthly_usd", "daily_tokens"]
CAP_NAMES: Final[tuple[CapName, ...]] = get_args(CapName)
PERIODS: Final[Mapping[CapName, Period]] = {
    "daily_usd": "day",
    "weekly_usd": "week",
    "monthly_usd": "month",
    "daily_tokens": "day",
}


_DAY: Final = 86_400


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """The (year, month, day) of a count of days since 1970-01-01."""
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day


def _monday(days: int) -> int:
    return days - (days + 3) % 7  # 1970-01-01 was a Thursday


def period_bounds(period: Period, now: float) -> tuple[float, float]:
    """The UTC period holding ``now``: its start (inclusive) and end (exclusive), Unix seconds."""
    days = math.floor(now / _DAY)
    if period == "day":
        first, after = days, days + 1
    elif period == "week":
        first = _monday(days)
        after = first + 7
    else:
        year, month, _ = _civil_from_days(days)
        first = _days_from_civil(year, month, 1)
        after = _days_from_civil(year + month // 12, month % 12 + 1, 1)
    return float(first * _DAY), float(after * _DAY)


def period_key(period: Period, now: float) -> str:
    """A name for the period holding ``now``: ``day:2026-12-04``, ``week:2026-W49``,
    ``month:2026-12``."""
    days = math.floor(now / _DAY)
    year, month, day = _civil_from_days(days)
    if period == "day":
        return f"day:{year:04d}-{month:02d}-{day:02d}"
    if period == "week":
        thursday = _monday(days) + 3  # an ISO week belongs to the year of its Thursday
        iso_year = _civil_from_days(thursday)[0]
        week = (thursday - _days_from_civil(iso_year, 1, 1)) // 7 + 1
        return f"week:{iso_year:04d}-W{week:02d}"
    return f"month:{year:04d}-{month:02d}"


def kept_since(now: float) -> float:
    """The start of the earliest period holding ``now`` (its week's or its month's): spend
    before it counts against no cap."""
    return min(period_bounds("week", now)[0], period_bounds("month", now)[0])


def parse_cap_value(name: str, text: str) -> float | None:
    """The value of ``!budget NAME TEXT``: a non-negative number (whole for ``daily_tokens``),
    or None for ``off``; ValueError says what was wrong."""
    if name not in CAP_NAMES:
        raise ValueError(
            f"unknown budget cap {name[:40]!r}: expected one of {', '.join(CAP_NAMES)}"
        )
    if text.lower() in ("off", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: expected a number or 'off', got {text[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {text[:40]!r}")
    if name == "daily_tokens" and value != int(value):
        raise ValueError(f"{name}: expected a whole number of tokens, got {text[:40]!r}")
    return value


@dataclass(frozen=True)
class Caps:
    """The caps (None: no cap) and what being over one does."""

    daily_usd: float | None = None
    weekly_usd: float | None = None
    monthly_usd: float | None = None
    daily_tokens: int | None = None
    action: Action = "warn"

    def __post_init__(self) -> None:
        # An unknown action would be neither "stop" nor "warn": over a cap, turns would run.
        check_choice(self.action, CHOICES["budget.action"], "Caps action")

    def value(self, name: CapName) -> float | None:
        cap: float | None = getattr(self, name)
        return cap

    def with_cap(self, name: CapName, value: float | None) -> Caps:
        if name == "daily_tokens":
            return replace(self, daily_tokens=None if value is None else int(value))
        if name == "daily_usd":
            return replace(self, daily_usd=value)
        if name == "weekly_usd":
            return replace(self, weekly_usd=value)
        return replace(self, monthly_usd=value)

    @property
    def active(self) -> bool:
        return any(self.value(name) is not None for name in CAP_NAMES)

    def earliest_start(self, now: float) -> float | None:
        """Where the longest active period starts (None: no cap)."""
        starts = [period_bounds(PERIODS[n], now)[0] for n in CAP_NAMES if self.value(n) is not None]
        return min(starts) if starts else None


@dataclass(frozen=True)
class Spend:
    """One turn's spend: ``key`` names it (a metric id), ``turn_id`` too when known."""

    key: str
    at: float  # when it was spent (Unix seconds)
    cost_usd: float | None
    tokens: int | None
    turn_id: str | None = None


@dataclass(frozen=True)
class Over:
    """A cap the period's spend has reached."""

    cap: CapName
    limit: float
    spent: float
    period: str  # period_key
    until: float  # the period's end


@dataclass(frozen=True)
class BudgetDecision:
    action: Literal["run", "warn", "stop"]
    over: tuple[Over, ...] = ()

    @property
    def until(self) -> float | None:
        """When every over cap's period has ended (None: nothing is over)."""
        return max((o.until for o in self.over), default=None)

    @property
    def period(self) -> str:
        """The over caps and their periods, as one name (notices are given once per name)."""
        return ",".join(f"{o.cap}@{o.period}" for o in self.over)


@dataclass
class BudgetLedger:
    """Caps, the spend of recent periods (deduplicated) and the notices given."""

    caps: Caps
    _spends: dict[str, Spend] = field(default_factory=dict)
    _turns: set[str] = field(default_factory=set)
    #: The notices given (names like ``warn:<period>``) and when their period ends (Unix
    #: seconds), restored from the state database.
    notified: dict[str, float] = field(default_factory=dict)

    def add(self, spend: Spend) -> bool:
        """Count ``spend`` unless a spend with its key or its turn id is counted already."""
        if spend.key in self._spends or (
            spend.turn_id is not None and spend.turn_id in self._turns
        ):
            return False
        self._spends[spend.key] = spend
        if spend.turn_id is not None:
            self._turns.add(spend.turn_id)
        return True

    def knows(self, key: str) -> bool:
        return key in self._spends

    def add_all(self, spends: Iterable[Spend]) -> int:
        return sum(self.add(s) for s in spends)

    def spent(self, cap: CapName, now: float) -> float:
        """What counts against ``cap`` in its period holding ``now``."""
        start, end = period_bounds(PERIODS[cap], now)
        total = 0.0
        for s in self._spends.values():
            if start <= s.at < end:
                amount = s.tokens if cap == "daily_tokens" else s.cost_usd
                total += amount or 0
        return total

    def decide(self, now: float) -> BudgetDecision:
        over: list[Over] = []
        for cap in CAP_NAMES:
            limit = self.caps.value(cap)
            if limit is None:
                continue
            spent = self.spent(cap, now)
            if spent >= limit:
                period = PERIODS[cap]
                end = period_bounds(period, now)[1]
                over.append(Over(cap, limit, spent, period_key(period, now), end))
        if not over:
            return BudgetDecision("run")
        return BudgetDecision(self.caps.action, tuple(over))

    def first_notice(self, name: str, until: float) -> bool:
        """True the first time ``name`` (e.g. ``warn:<period>``) is asked about; it is
        remembered until ``until`` (its period's end)."""
        if name in self.notified:
            return False
        self.notified[name] = until
        return True

    def forget_before(self, now: float) -> list[str]:
        """Drop what no period holding ``now`` needs: spend from before the current week and
        month (:func:`kept_since`) and notices whose period has ended; the spend keys dropped."""
        start = kept_since(now)
        old = [k for k, s in self._spends.items() if s.at < start]
        for key in old:
            turn = self._spends.pop(key).turn_id
            self._turns.discard(turn or "")
        for name in [n for n, until in self.notified.items() if until <= now]:
            del self.notified[name]
        return old


def with_owner_note(caps: Caps, name: str, text: str) -> Caps:
    """``caps`` with one cap (or the action) set as the owner's ``!budget`` stored it
    (``name`` a cap or ``action``); ValueError when the text is not one."""
    if name == "action":
        if text not in ("warn", "stop"):
            raise ValueError(f"action: expected warn or stop, got {text[:20]!r}")
        return replace(caps, action="warn" if text == "warn" else "stop")
    value = parse_cap_value(name, text)
    cap: CapName = next(c for c in CAP_NAMES if c == name)
    return caps.with_cap(cap, value)


def with_owner_notes(caps: Caps, notes: Mapping[str, str]) -> Caps:
    """``caps`` with every stored owner's ``!budget`` applied (an unreadable one is skipped)."""
    for name, text in notes.items():
        with contextlib.suppress(ValueError, StopIteration):
            caps = with_owner_note(caps, name, text)
    return caps
