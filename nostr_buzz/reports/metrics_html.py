"""The owner's usage report as one HTML page (docs/metrics.md, "The report as a page").

:func:`render_html` turns a :class:`~nostr_buzz.reports.metrics_report.MetricsReport` into one
self-contained page: no script, no stylesheet or font to fetch, charts drawn as inline SVG,
and a Content-Security-Policy that forbids loading anything.  The charts come first — spend and
tokens per UTC day for each agent and model, turns per channel, turn duration percentiles per
day, the cache share of the input, turns with unknown usage (their numbers are
:mod:`nostr_buzz.reports.metrics_charts`) — and the tables after them.

Every string of a metric is the sending agent's words (a model name, a channel id): each one is
HTML-escaped, and its hidden characters (controls, bidirectional and zero-width characters) are
shown as ``\\uNNNN`` escapes, as on the terminal.  Each mark of a chart carries
``class="point"`` and each chart's ``<svg>`` its name (``data-chart``) and its number of marks
(``data-points``), so that a reader can count them.

Pure: the same report gives the same bytes (no clock, no randomness).
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from nostr_buzz.reports.metrics_charts import (
    PERCENTILES,
    Chart,
    Series,
    Unit,
    agent_label,
    cache_shares,
    channel_label,
    charts,
    durations_by_day,
    known_sum,
    model_label,
    percentile,
    report_days,
    usage_by_day,
)
from nostr_buzz.reports.metrics_report import MetricsReport, TotalRow, TurnRow
from nostr_buzz.text.unicode import backslash_escape, escape_hidden

__all__ = ["render_html"]

#: Colours that stay apart for colour-blind readers (Okabe and Ito), cycled over series.
_PALETTE: Final = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#666666",
    "#b8a100",
)


# --- text -------------------------------------------------------------------------------------


def _text(value: str) -> str:
    """An agent's words as HTML text or attribute value: hidden characters shown as escapes,
    then ``& < > " '`` escaped."""
    return html.escape(escape_hidden(value, backslash_escape), quote=True)


def _cut(value: str, width: int) -> str:
    return value if len(value) <= width else value[: width - 1] + "…"


def _compact(value: float) -> str:
    for size, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}".removesuffix(".0") + suffix
    return f"{value:.1f}".removesuffix(".0")


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step))) if step > 0 else 0


def _tick(unit: Unit, value: float, step: float) -> str:
    if unit == "usd":
        return f"${value:,.{_decimals(step)}f}"
    if unit == "percent":
        return f"{value:.0f}%"
    if unit == "seconds":
        return _seconds(value)
    return _compact(value)


def _seconds(value: float) -> str:
    if value >= 7200:
        return f"{value / 3600:.1f}".removesuffix(".0") + " h"
    if value >= 120:
        return f"{value / 60:.1f}".removesuffix(".0") + " min"
    return f"{value:.1f}".removesuffix(".0") + " s"


def _value(unit: Unit, value: float) -> str:
    """A value in a chart's tooltip."""
    if unit == "usd":
        return f"${value:,.6f}"
    if unit == "percent":
        return f"{value:.1f}%"
    if unit == "seconds":
        return f"{value:,.3f} s"
    return f"{value:,.0f}"


# --- drawing ----------------------------------------------------------------------------------

_WIDTH: Final = 640
_HEIGHT: Final = 260
_LEFT: Final = 64
_RIGHT: Final = 16
_TOP: Final = 14
_BOTTOM: Final = 40
_BAR_LEFT: Final = 190  # the channels chart: room for a channel's name
_BAR_ROW: Final = 22


def _colour(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def _n(x: float) -> str:
    """A coordinate: one decimal, none when it is 0, and no ``-0``."""
    text = f"{x:.1f}".removesuffix(".0")
    return "0" if text == "-0" else text


def _nice(x: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``x`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(x))
    for f in (1, 2, 5):
        if x <= f * power * (1 + 1e-9):
            return f * power
    return 10 * power


def _scale(chart: Chart) -> tuple[float, float]:
    """The axis's top and its step between grid lines."""
    if chart.unit == "percent":
        return 100.0, 25.0
    if chart.kind == "stacked":
        stacks: defaultdict[int, float] = defaultdict(float)
        for s in chart.series:
            for i, v in s.points:
                stacks[i] += v
        high = max(stacks.values(), default=0.0)
    else:
        high = max((v for s in chart.series for _, v in s.points), default=0.0)
    step = _nice(high / 4) if high > 0 else 1.0
    if chart.unit in ("turns", "tokens"):
        step = max(step, 1.0)
    return step * max(1, math.ceil(high / step - 1e-9)), step


def _grid(chart: Chart, top: float, step: float, along_x: bool, box: tuple[float, ...]) -> str:
    """Grid lines with the value axis's labels (horizontal lines, or vertical for bars)."""
    left, right, upper, lower = box
    parts = []
    for k in range(round(top / step) + 1):
        value = k * step
        label = _text(_tick(chart.unit, value, step))
        if along_x:
            x = left + (right - left) * value / top
            parts.append(
                f'<line class="grid" x1="{_n(x)}" y1="{_n(upper)}" x2="{_n(x)}" y2="{_n(lower)}"/>'
                f'<text x="{_n(x)}" y="{_n(lower + 14)}" text-anchor="middle">{label}</text>'
            )
        else:
            y = lower - (lower - upper) * value / top
            parts.append(
                f'<line class="grid" x1="{_n(left)}" y1="{_n(y)}" x2="{_n(right)}" y2="{_n(y)}"/>'
                f'<text x="{_n(left - 6)}" y="{_n(y + 4)}" text-anchor="end">{label}</text>'
            )
    return "".join(parts)


def _day_labels(labels: Sequence[str], x: Callable[[int], float], width: float) -> str:
    every = max(1, math.ceil(len(labels) / max(1, int(width // 48))))
    y = _HEIGHT - _BOTTOM + 16
    parts = [
        f'<text x="{_n(x(i))}" y="{y}" text-anchor="middle">{_text(label[5:])}</text>'
        for i, label in enumerate(labels)
        if i % every == 0
    ]
    if labels:
        span = labels[0] if len(labels) == 1 else f"{labels[0]} … {labels[-1]}"
        parts.append(
            f'<text class="caption" x="{_n(_LEFT + width / 2)}" y="{_HEIGHT - 6}" '
            f'text-anchor="middle">UTC day, {_text(span)}</text>'
        )
    return "".join(parts)


def _tooltip(chart: Chart, series: Series, i: int, v: float) -> str:
    return (
        f"<title>{_text(series.name)}, {_text(chart.x_labels[i])}: {_value(chart.unit, v)}</title>"
    )


def _svg(chart: Chart, height: int, body: str) -> str:
    return (
        f'<svg class="chart" data-chart="{chart.name}" data-points="{chart.points}" '
        f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="{_text(chart.title)}">'
        f"{body}</svg>"
    )


def _empty(chart: Chart) -> str:
    return _svg(
        chart,
        80,
        f'<text class="empty" x="{_WIDTH // 2}" y="44" text-anchor="middle">no data</text>',
    )


def _line_chart(chart: Chart) -> str:
    top, step = _scale(chart)
    width = _WIDTH - _LEFT - _RIGHT
    lower = _HEIGHT - _BOTTOM
    n = len(chart.x_labels)

    def x(i: int) -> float:
        return _LEFT + width * (i + 0.5) / n

    def y(v: float) -> float:
        return lower - (lower - _TOP) * v / top

    parts = [_grid(chart, top, step, False, (_LEFT, _WIDTH - _RIGHT, _TOP, lower))]
    parts.append(_day_labels(chart.x_labels, x, width))
    for k, series in enumerate(chart.series):
        colour = _colour(k)
        if len(series.points) > 1:
            line = " ".join(f"{_n(x(i))},{_n(y(v))}" for i, v in series.points)
            parts.append(f'<polyline class="line" stroke="{colour}" points="{line}"/>')
        parts.extend(
            f'<circle class="point" cx="{_n(x(i))}" cy="{_n(y(v))}" r="3.5" fill="{colour}">'
            f"{_tooltip(chart, series, i, v)}</circle>"
            for i, v in series.points
        )
    parts.append(
        f'<line class="axis" x1="{_LEFT}" y1="{lower}" x2="{_WIDTH - _RIGHT}" y2="{lower}"/>'
    )
    return _svg(chart, _HEIGHT, "".join(parts))


def _stacked_chart(chart: Chart) -> str:
    top, step = _scale(chart)
    width = _WIDTH - _LEFT - _RIGHT
    lower = _HEIGHT - _BOTTOM
    n = len(chart.x_labels)
    band = width / n

    def x(i: int) -> float:
        return _LEFT + band * (i + 0.5)

    parts = [_grid(chart, top, step, False, (_LEFT, _WIDTH - _RIGHT, _TOP, lower))]
    parts.append(_day_labels(chart.x_labels, x, width))
    base: defaultdict[int, float] = defaultdict(float)
    for k, series in enumerate(chart.series):
        for i, v in series.points:
            h = (lower - _TOP) * v / top
            y = lower - (lower - _TOP) * base[i] / top - h
            base[i] += v
            parts.append(
                f'<rect class="point" x="{_n(x(i) - band * 0.3)}" y="{_n(y)}" '
                f'width="{_n(band * 0.6)}" height="{_n(h)}" fill="{_colour(k)}">'
                f"{_tooltip(chart, series, i, v)}</rect>"
            )
    parts.append(
        f'<line class="axis" x1="{_LEFT}" y1="{lower}" x2="{_WIDTH - _RIGHT}" y2="{lower}"/>'
    )
    return _svg(chart, _HEIGHT, "".join(parts))


def _bar_chart(chart: Chart) -> str:
    top, step = _scale(chart)
    (series,) = chart.series
    lower = _TOP + _BAR_ROW * len(chart.x_labels)
    height = lower + 24
    right = _WIDTH - _RIGHT - 40  # room for the value after the longest bar
    parts = [_grid(chart, top, step, True, (_BAR_LEFT, right, _TOP, lower))]
    for i, v in series.points:
        y = _TOP + _BAR_ROW * i
        w = (right - _BAR_LEFT) * v / top
        label = chart.x_labels[i]
        parts.append(
            f'<text x="{_BAR_LEFT - 6}" y="{_n(y + 15)}" text-anchor="end">'
            f"{_text(_cut(label, 28))}</text>"
            f'<rect class="point" x="{_BAR_LEFT}" y="{_n(y + 4)}" width="{_n(w)}" height="14" '
            f'fill="{_colour(0)}">{_tooltip(chart, series, i, v)}</rect>'
            f'<text x="{_n(_BAR_LEFT + w + 4)}" y="{_n(y + 15)}">{v:.0f}</text>'
        )
    return _svg(chart, height, "".join(parts))


def _legend(chart: Chart) -> str:
    if chart.kind == "bars":
        return ""
    items = "".join(
        f'<li><span class="swatch c{k % len(_PALETTE)}"></span>{_text(s.name)}</li>'
        for k, s in enumerate(chart.series)
    )
    return f'<ul class="legend">{items}</ul>'


def _figure(chart: Chart) -> str:
    if chart.points == 0:
        drawing = _empty(chart)
    elif chart.kind == "line":
        drawing = _line_chart(chart)
    elif chart.kind == "stacked":
        drawing = _stacked_chart(chart)
    else:
        drawing = _bar_chart(chart)
    return (
        f"<figure><figcaption>{_text(chart.title)}</figcaption>{drawing}{_legend(chart)}</figure>"
    )


# --- tables -----------------------------------------------------------------------------------

_UNKNOWN: Final = "—"


def _int(v: int | None) -> str:
    return _UNKNOWN if v is None else f"{v:,}"


def _usd(v: float | None) -> str:
    return _UNKNOWN if v is None else f"{v:,.6f}"


def _secs(v: float | None) -> str:
    return _UNKNOWN if v is None else f"{v:,.3f}"


def _pct(v: float | None) -> str:
    return _UNKNOWN if v is None else f"{v:.1f}%"


def _who(agent: str) -> str:
    return f'<span title="{_text(agent)}">{_text(agent_label(agent))}</span>'


def _usage(r: TurnRow | TotalRow) -> tuple[str, ...]:
    """Input, cache read, cache write, output, total and cost cells."""
    return (
        _int(r.input_tokens),
        _int(r.cache_read_tokens),
        _int(r.cache_write_tokens),
        _int(r.output_tokens),
        _int(r.total_tokens),
        _usd(r.cost_usd),
    )


def _table(
    title: str, header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int]
) -> str:
    """A table of cells that are already HTML (escaped where they hold an agent's words)."""
    right = set(numeric)

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            f'<{tag} class="num">{c}</{tag}>' if i in right else f"<{tag}>{c}</{tag}>"
            for i, c in enumerate(row)
        )

    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return (
        f"<h3>{_text(title)}</h3><table><thead><tr>{cells('th', header)}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _totals_table(report: MetricsReport) -> str:
    header = ("day", "agent", "model", "turns", "input", "cache read", "cache write", "output")
    rows = (
        (
            r.day,
            _who(r.agent),
            _text(model_label(r.model)),
            _int(r.turns),
            *_usage(r),
            _int(r.unknown_turns),
        )
        for r in report.totals
    )
    full = (*header, "total", "cost USD", "usage unknown")
    return _table("Usage per day, agent and model", full, rows, range(3, 11))


def _channels_table(report: MetricsReport) -> str:
    counts = Counter(channel_label(row.channel_id) for row in report.turns)
    total = len(report.turns)
    rows = (
        (_text(name), _int(n), _pct(100 * n / total))
        for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )
    return _table("Turns per channel", ("channel", "turns", "share"), rows, (1, 2))


def _durations_table(report: MetricsReport) -> str:
    by_day = durations_by_day(report.turns)
    every = [v for day in sorted(by_day) for v in by_day[day]]
    rows = [
        (
            day,
            _int(len(values)),
            *(_secs(percentile(values, p)) for p in PERCENTILES),
            _secs(max(values)),
        )
        for day, values in sorted(by_day.items())
    ]
    if every:
        rows.append(
            (
                "all days",
                _int(len(every)),
                *(_secs(percentile(every, p)) for p in PERCENTILES),
                _secs(max(every)),
            )
        )
    header = ("day", "timed turns", *(f"p{p} (s)" for p in PERCENTILES), "longest (s)")
    return _table("Turn duration", header, rows, range(1, 6))


def _cache_table(report: MetricsReport) -> str:
    shares = cache_shares(report.turns)
    rows = (
        (day, _pct(shares.get(("read", day))), _pct(shares.get(("write", day))))
        for day in report_days(report)
    )
    return _table("Cache share of the input", ("day", "cache read", "cache write"), rows, (1, 2))


def _unknown_table(report: MetricsReport) -> str:
    by_day = usage_by_day(report.totals)
    rows = (
        (day, _int(known + unknown), _int(unknown))
        for day, (known, unknown) in sorted(by_day.items())
    )
    return _table("Turns with unknown usage", ("day", "turns", "usage unknown"), rows, (1, 2))


def _ignored_tables(report: MetricsReport) -> str:
    parts = []
    if report.ignored:
        reasons = ((_text(reason), _int(n)) for reason, n in report.ignored.items())
        parts.append(_table("Ignored events", ("reason", "events"), reasons, (1,)))
    if report.unknown_agents:
        rows = (
            (_text(a.agent), _int(a.metrics), _text(a.first_timestamp), _text(a.last_timestamp))
            for a in report.unknown_agents
        )
        header = ("key (not one of your agents)", "metrics", "first", "last")
        parts.append(_table("Metrics from other keys, not counted", header, rows, (1,)))
    return "".join(parts)


def _manifest(valid: bool | None) -> str:
    return "" if valid is None else "ok" if valid else '<strong class="bad">MISMATCH</strong>'


def _turns_table(report: MetricsReport) -> str:
    header = (
        "time (UTC)",
        "agent",
        "model",
        "channel",
        "session",
        "seq",
        "input",
        "cache read",
        "cache write",
        "output",
        "total",
        "cost USD",
        "duration (s)",
        "delta",
        "outcome",
        "manifest",
    )
    rows = (
        (
            _text(r.timestamp.replace("T", " ").rstrip("Z")),
            _who(r.agent),
            _text(model_label(r.model)),
            _text(channel_label(r.channel_id)),
            _text(r.session_id or ""),
            _int(r.turn_seq) if r.turn_seq is not None else "",
            *_usage(r),
            _secs(r.duration_seconds),
            r.delta_source,
            _text(r.outcome or ""),
            _manifest(r.manifest_valid),
        )
        for r in report.turns
    )
    table = _table(f"Turns ({len(report.turns)})", header, rows, range(5, 13))
    return f"<details><summary>every turn</summary>{table}</details>"


# --- the page ---------------------------------------------------------------------------------

_STYLE: Final = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1a1a1a;background:#fff}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}"
    "h3{font-size:15px;margin:22px 0 6px}.meta{color:#555;margin:2px 0}"
    ".summary{display:flex;flex-wrap:wrap;gap:8px 24px;margin:16px 0;padding:0}"
    ".summary div{min-width:96px}.summary dt{color:#555;font-size:12px}"
    ".summary dd{margin:0;font-size:20px;font-weight:600}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:18px;"
    "align-items:start}"
    "figure{margin:0;padding:10px 12px;border:1px solid #ddd;border-radius:6px}"
    "figcaption{font-weight:600;margin-bottom:4px}svg.chart{width:100%;height:auto;display:block}"
    "svg text{font:11px system-ui,sans-serif;fill:#333}svg text.caption{fill:#666}"
    "svg text.empty{font-size:14px;fill:#888}.grid{stroke:#e4e4e4}.axis{stroke:#888}"
    ".line{fill:none;stroke-width:1.8}"
    ".legend{list-style:none;margin:6px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:2px 14px;"
    "font-size:12px}.swatch{display:inline-block;width:10px;height:10px;margin-right:5px;"
    "border-radius:2px}"
    "table{border-collapse:collapse;font-size:12.5px;margin-bottom:6px}"
    "th,td{padding:3px 9px;border-bottom:1px solid #e6e6e6;text-align:left;"
    "overflow-wrap:anywhere;max-width:28em}th{background:#f4f4f4}td.num,th.num{text-align:right;"
    "font-variant-numeric:tabular-nums;white-space:nowrap}.bad{color:#b00020}"
    + "".join(f".c{k}{{background:{c}}}" for k, c in enumerate(_PALETTE))
)

#: Nothing may load: no script, no request; only the page's own style.
_POLICY: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)


def _summary(report: MetricsReport) -> str:
    spend = [r.cost_usd for r in report.totals if r.cost_usd is not None]
    tokens = [known_sum(r.input_tokens, r.output_tokens) for r in report.totals]
    facts = (
        ("turns", _int(len(report.turns))),
        ("days", _int(len(report_days(report)))),
        ("spend (USD)", f"{sum(spend):,.2f}" if spend else _UNKNOWN),
        ("tokens", _compact(sum(t for t in tokens if t is not None)) if any(tokens) else _UNKNOWN),
        ("usage unknown", _int(sum(r.unknown_turns for r in report.totals))),
        ("channels", _int(len({r.channel_id for r in report.turns}))),
        ("ignored events", _int(report.ignored_total)),
        ("manifest mismatches", _int(report.manifest_mismatches)),
        ("from other keys", _int(sum(a.metrics for a in report.unknown_agents))),
    )
    items = "".join(f"<div><dt>{name}</dt><dd>{value}</dd></div>" for name, value in facts)
    return f'<dl class="summary">{items}</dl>'


def render_html(
    report: MetricsReport,
    *,
    owner: str,
    since: str | None = None,
    until: str | None = None,
    relays: Sequence[str] = (),
) -> str:
    """The report as one self-contained HTML page: charts first, then the tables.

    ``owner`` (hex public key), the window (``since`` and ``until`` as the reader should see
    them; None: open) and the relays asked are shown in the heading.  Deterministic: the same
    arguments give the same text.
    """
    figures = "".join(_figure(chart) for chart in charts(report))
    tables = "".join(
        (
            _totals_table(report),
            _channels_table(report),
            _durations_table(report),
            _cache_table(report),
            _unknown_table(report),
            _ignored_tables(report),
            _turns_table(report),
        )
    )
    asked = ", ".join(_text(url) for url in relays) or _UNKNOWN
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>buzz metrics</title><style>{_STYLE}</style></head><body>"
        "<h1>Usage report</h1>"
        f'<p class="meta">owner {_text(owner)}</p>'
        f'<p class="meta">from {_text(since or "the first metric")} to '
        f"{_text(until or 'the last')}; relays {asked}</p>"
        f"{_summary(report)}"
        f'<h2>Charts</h2><section class="charts">{figures}</section>'
        f"<h2>Tables</h2>{tables}"
        "</body></html>\n"
    )
