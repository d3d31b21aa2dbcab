"""What the usage report's charts show, as numbers (docs/metrics.md, "The report as a page").

:func:`charts` reads a :class:`~nostr_buzz.reports.metrics_report.MetricsReport` into the page's
charts: spend and tokens per UTC day for each agent and model, turns per channel, turn duration
percentiles per day, the cache share of the input per day and the turns per day whose usage is
known and unknown.  A value that is unknown is no point, never a zero.  Drawing them is
:mod:`nostr_buzz.reports.metrics_html`.  Pure.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.reports.metrics_report import MetricsReport, TotalRow, TurnRow

__all__ = [
    "CHART_NAMES",
    "MAX_CHANNEL_BARS",
    "PERCENTILES",
    "Chart",
    "Series",
    "Unit",
    "agent_label",
    "cache_shares",
    "channel_label",
    "charts",
    "durations_by_day",
    "known_sum",
    "model_label",
    "percentile",
    "report_days",
    "usage_by_day",
]

Unit = Literal["usd", "tokens", "seconds", "percent", "turns"]
Kind = Literal["line", "stacked", "bars"]

#: The charts of the page, in order (``data-chart`` of each ``<svg>``).
CHART_NAMES: Final = ("spend", "tokens", "channels", "durations", "cache", "unknown")

#: The channels chart shows this many channels; the others are one bar.
MAX_CHANNEL_BARS: Final = 20
#: The duration chart's percentiles.
PERCENTILES: Final = (50, 90, 99)


@dataclass(frozen=True)
class Series:
    """One line (or one layer of bars): ``(x index, value)`` points, in x order."""

    name: str
    points: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Chart:
    """One chart: its name (``data-chart``), title, kind (lines, stacked bars or one bar per
    label), unit, the labels along its x axis (UTC days, or channels) and its series."""

    name: str
    title: str
    kind: Kind
    unit: Unit
    x_labels: tuple[str, ...]
    series: tuple[Series, ...]

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.series)


# --- labels -----------------------------------------------------------------------------------


def agent_label(agent: str) -> str:
    """An agent's key as the page shows it: the first 12 hex digits."""
    return agent[:12] + "…"


def model_label(model: str | None) -> str:
    return "(unknown model)" if model is None else model


def channel_label(channel: str | None) -> str:
    return "(no channel)" if channel is None else channel


# --- the charts' data -------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def report_days(report: MetricsReport) -> tuple[str, ...]:
    """The UTC days that have a turn, in order: the charts' x axis."""
    return tuple(sorted({row.day for row in report.turns}))


def known_sum(*values: int | None) -> int | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _per_model(
    totals: Iterable[TotalRow], index: dict[str, int], value: Callable[[TotalRow], float | None]
) -> tuple[Series, ...]:
    groups: dict[tuple[str, bool, str], list[tuple[int, float]]] = defaultdict(list)
    for row in totals:
        v = value(row)
        key = (row.agent, row.model is not None, row.model or "")
        groups.setdefault(key, [])
        if v is not None:
            groups[key].append((index[row.day], float(v)))
    return tuple(
        Series(
            f"{agent_label(agent)} {model_label(model if known else None)}", tuple(sorted(points))
        )
        for (agent, known, model), points in sorted(groups.items())
    )


def _channel_counts(turns: Iterable[TurnRow]) -> list[tuple[str, int]]:
    counts = Counter(channel_label(row.channel_id) for row in turns)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if len(ordered) > MAX_CHANNEL_BARS:
        rest = ordered[MAX_CHANNEL_BARS - 1 :]
        ordered = ordered[: MAX_CHANNEL_BARS - 1]
        ordered.append((f"({len(rest)} other channels)", sum(n for _, n in rest)))
    return ordered


def durations_by_day(turns: Iterable[TurnRow]) -> dict[str, list[float]]:
    """The known turn durations (seconds) of each day."""
    by_day: dict[str, list[float]] = defaultdict(list)
    for row in turns:
        if row.duration_seconds is not None:
            by_day[row.day].append(row.duration_seconds)
    return by_day


def cache_shares(turns: Iterable[TurnRow]) -> dict[tuple[str, str], float]:
    """Per ``("read" | "write", day)``: that cache figure's share of the input, in percent, over
    the turns that reported both (at most 100: an agent may report more)."""
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in turns:
        if row.input_tokens is None:
            continue
        for part, value in (("read", row.cache_read_tokens), ("write", row.cache_write_tokens)):
            if value is not None:
                sums[(part, row.day)][0] += value
                sums[(part, row.day)][1] += row.input_tokens
    return {key: min(100.0, 100 * part / whole) for key, (part, whole) in sums.items() if whole}


def usage_by_day(totals: Iterable[TotalRow]) -> dict[str, tuple[int, int]]:
    """Per day: turns whose usage is known, turns with an unknown counter."""
    by_day: dict[str, tuple[int, int]] = {}
    for row in totals:
        known, unknown = by_day.get(row.day, (0, 0))
        by_day[row.day] = (known + row.turns - row.unknown_turns, unknown + row.unknown_turns)
    return by_day


def charts(report: MetricsReport) -> tuple[Chart, ...]:
    """The page's charts, in :data:`CHART_NAMES` order."""
    days = report_days(report)
    index = {day: i for i, day in enumerate(days)}
    durations = durations_by_day(report.turns)
    cache = cache_shares(report.turns)
    unknown = usage_by_day(report.totals)
    channels = _channel_counts(report.turns)

    def by_day(values: Mapping[str, float]) -> tuple[tuple[int, float], ...]:
        return tuple((index[d], values[d]) for d in days if d in values)

    def spend(row: TotalRow) -> float | None:
        return row.cost_usd

    def tokens(row: TotalRow) -> float | None:
        return known_sum(row.input_tokens, row.output_tokens)

    percentiles = (
        Series(f"p{p}", by_day({d: percentile(v, p) for d, v in durations.items()}))
        for p in PERCENTILES
    )
    shares = (
        Series(f"cache {part}", by_day({d: v for (kind, d), v in cache.items() if kind == part}))
        for part in ("read", "write")
    )
    known = by_day({d: float(k) for d, (k, _) in unknown.items() if k})
    not_known = by_day({d: float(u) for d, (_, u) in unknown.items() if u})
    bars = Series("turns", tuple((i, float(n)) for i, (_, n) in enumerate(channels)))
    return (
        Chart(
            "spend",
            "Spend per day (USD)",
            "line",
            "usd",
            days,
            _per_model(report.totals, index, spend),
        ),
        Chart(
            "tokens",
            "Tokens per day (input + output)",
            "line",
            "tokens",
            days,
            _per_model(report.totals, index, tokens),
        ),
        Chart(
            "channels", "Turns per channel", "bars", "turns", tuple(n for n, _ in channels), (bars,)
        ),
        Chart(
            "durations",
            "Turn duration per day (percentiles)",
            "line",
            "seconds",
            days,
            tuple(percentiles),
        ),
        Chart("cache", "Cache share of the input per day", "line", "percent", days, tuple(shares)),
        Chart(
            "unknown",
            "Turns per day: usage known and unknown",
            "stacked",
            "turns",
            days,
            (Series("usage known", known), Series("usage unknown", not_known)),
        ),
    )
