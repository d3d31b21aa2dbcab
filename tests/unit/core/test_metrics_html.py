"""The usage report as an HTML page, pure (``render_html``, ``charts``): what each chart draws,
that the page is the same for the same report and loads nothing, and that an agent's words are
text, whatever markup they hold (the page in a real browser: tests/e2e/cli/test_metrics_html.py).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.event import Event
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts
from nostr_buzz.reports.metrics_charts import CHART_NAMES, charts, percentile
from nostr_buzz.reports.metrics_html import render_html
from nostr_buzz.reports.metrics_report import MetricsReport, OpenedMetric, build_report, open_metric
from tests.support.hostile_metrics import (
    BIDI,
    HTML_INJECTIONS,
    MINE,
    hostile_metrics,
    html_injection_metrics,
)
from tests.support.metric_scenario import AGENT_A, OWNER, metric, scenario

OWNER_HEX = OWNER.public_key.hex

#: Every element the page itself writes; anything else came from a metric.
PAGE_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "dl", "div", "dt",
    "dd", "section", "figure", "figcaption", "svg", "line", "text", "polyline", "circle",
    "rect", "ul", "li", "span", "table", "thead", "tbody", "tr", "th", "td", "details",
    "summary", "strong",
}  # fmt: skip


class Elements(HTMLParser):
    """Start tags, attributes with ``on…`` handlers, and the text, as a browser's parser sees
    them (close enough for markup: the page has no script or raw-text element of its own)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def report_of(events: list[Event], **kwargs: object) -> MetricsReport:
    opened = [open_metric(OWNER, e) for e in events]
    assert all(isinstance(m, OpenedMetric) for m in opened), opened
    return build_report([m for m in opened if isinstance(m, OpenedMetric)], **kwargs)  # type: ignore[arg-type]


def points(page: str) -> dict[str, tuple[int, int]]:
    """Per chart: the points it declares and the marks drawn in its ``<svg>``."""
    found = {}
    for name, declared, body in re.findall(
        r'<svg class="chart" data-chart="(\w+)" data-points="(\d+)"[^>]*>(.*?)</svg>', page
    ):
        found[name] = (int(declared), body.count('class="point"'))
    return found


def test_each_chart_draws_one_mark_per_known_value() -> None:
    report = report_of(scenario().valid)
    drawn = {c.name: c.points for c in charts(report)}
    # Totals: (A, model-a, 12-02) and (B, model-b) on 12-01 and 12-02; every cost and token
    # count of those groups is partly known.
    assert drawn == {
        "spend": 3,
        "tokens": 3,
        "channels": 1,  # no metric names a channel: one bar, "(no channel)"
        "durations": 0,  # no metric has a startedAt
        "cache": 0,
        "unknown": 3,  # 12-01: known; 12-02: known and unknown
    }
    page = render_html(report, owner=OWNER_HEX)
    assert points(page) == {name: (n, n) for name, n in drawn.items()}
    assert list(points(page)) == list(CHART_NAMES)
    assert page.count("no data") == 2


def test_durations_cache_and_channels_are_drawn_per_day() -> None:
    def turn(n: int, day: int, seconds: int, channel: str | None) -> Event:
        payload = MetricPayload(
            harness="goose",
            timestamp=f"2026-12-0{day}T10:00:{n:02d}.000Z",
            started_at=f"2026-12-0{day}T10:00:{n - seconds:02d}+00:00",
            model="m",
            channel_id=channel,
            turn=TokenCounts(100, 10, 110, 0.1, 25, None),
        )
        return metric(AGENT_A, payload)

    events = [turn(n, 1 + n % 2, n % 7 + 1, f"c{n % 3}") for n in range(10, 40)]
    report = report_of(events)
    by_name = {c.name: c for c in charts(report)}
    assert by_name["durations"].points == 3 * 2  # p50, p90 and p99 on each of two days
    assert [s.name for s in by_name["durations"].series] == ["p50", "p90", "p99"]
    assert by_name["cache"].points == 2  # reads on both days; no turn reported writes
    assert by_name["cache"].series[0].points == ((0, 25.0), (1, 25.0))
    assert by_name["channels"].x_labels == ("c0", "c1", "c2")
    assert by_name["unknown"].points == 2
    page = render_html(report, owner=OWNER_HEX)
    assert all(declared == marks for declared, marks in points(page).values())


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, p) for p in (50, 90, 99, 100)] == [50.0, 90.0, 99.0, 100.0]
    assert percentile([7.0], 99) == 7.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_the_same_report_gives_the_same_page_and_it_loads_nothing() -> None:
    report = report_of(scenario().valid)
    page = render_html(report, owner=OWNER_HEX, since="2026-12-01 00:00:00 UTC", relays=["ws://r"])
    assert page == render_html(
        report, owner=OWNER_HEX, since="2026-12-01 00:00:00 UTC", relays=["ws://r"]
    )
    assert "default-src 'none'" in page
    assert not re.search(r"<script|<link|<img|url\(|https?://|@import", page)
    elements = Elements(page)
    assert set(elements.tags) <= PAGE_TAGS and elements.handlers == []


def test_an_empty_report_is_a_page_with_empty_charts() -> None:
    page = render_html(build_report([]), owner=OWNER_HEX)
    assert points(page) == {name: (0, 0) for name in CHART_NAMES}
    assert page.count("no data") == len(CHART_NAMES)


def test_markup_in_an_agents_words_is_text() -> None:
    """``</svg><script>``, an ``<img onerror>``, ``</table><style>`` and an ``<svg onload>`` in
    a model name, a channel and a session id: no element or handler of theirs, the words shown
    as written, bidirectional controls as escapes."""
    report = report_of(html_injection_metrics())
    page = render_html(report, owner=OWNER_HEX, relays=["ws://x/<script>"])
    elements = Elements(page)
    assert set(elements.tags) <= PAGE_TAGS and elements.handlers == []
    assert elements.tags.count("style") == 1 and elements.tags.count("svg") == len(CHART_NAMES)
    text = "".join(elements.text)
    for words in HTML_INJECTIONS.values():
        assert escaped_bidi(words) in text
    assert BIDI not in text and "gpt\\u202eevil\\u2066" in text
    assert "ws://x/<script>" in text


def escaped_bidi(words: str) -> str:
    return words.replace("\u202e", "\\u202e").replace("\u2066", "\\u2066")


@settings(max_examples=60, deadline=None)
@given(
    model=st.text(max_size=40) | st.sampled_from(list(HTML_INJECTIONS.values())),
    channel=st.text(alphabet="<>/\"'&=; scriptvgonler", max_size=40),
)
def test_no_model_or_channel_name_adds_an_element(model: str, channel: str) -> None:
    payload = MetricPayload(
        harness="goose",
        timestamp="2026-12-02T10:00:00.000Z",
        started_at="2026-12-02T09:59:00.000Z",
        model=model,
        channel_id=channel,
        session_id=channel,
        turn_seq=1,
        turn=TokenCounts(1, 1, 2, 0.5),
    )
    opened = OpenedMetric("ab" * 32, AGENT_A.public_key.hex, 1_796_205_600, payload)
    page = render_html(build_report([opened]), owner=OWNER_HEX)
    elements = Elements(page)
    assert set(elements.tags) <= PAGE_TAGS and elements.handlers == []
    assert elements.tags.count("style") == 1 and elements.tags.count("table") == 6


def test_the_largest_valid_numbers_give_finite_coordinates() -> None:
    """2^53 tokens and 10^6 USD in one turn (tests/support/hostile_metrics.py), a cumulative
    jump, and a turn of cost 0: every coordinate is a number, every point drawn."""
    opened = (open_metric(OWNER, e) for e in hostile_metrics())
    report = build_report(
        [m for m in opened if not isinstance(m, str)], agents=[MINE.public_key.hex]
    )
    page = render_html(report, owner=OWNER_HEX)
    coordinates = re.findall(r' (?:cx|cy|x|y|width|height|points)="([^"]*)"', page)
    assert coordinates and not any(re.search(r"nan|inf|e", c) for c in coordinates)
    assert all(declared == marks > 0 for declared, marks in points(page).values() if declared)
    assert "<dd>18P</dd>" in page and ">20P</text>" in page  # 2^54 tokens, compact


def test_a_long_window_draws_every_day_and_labels_some() -> None:
    def turn(day: int) -> OpenedMetric:
        moment = 1_767_225_600 + day * 86_400  # 2026-01-01T00:00:00Z onwards
        payload = MetricPayload(
            harness="goose",
            timestamp=day_stamp(day),
            model="m",
            turn=TokenCounts(day, 1, day + 1, day / 100),
        )
        return OpenedMetric(f"{day:064x}", AGENT_A.public_key.hex, moment, payload)

    report = build_report([turn(d) for d in range(400)])
    page = render_html(report, owner=OWNER_HEX)
    assert points(page)["spend"] == (400, 400)
    spend = page.split('data-chart="spend"')[1].split("</svg>")[0]
    labels = re.findall(r'text-anchor="middle">(\d\d-\d\d)</text>', spend)
    assert 5 <= len(labels) <= 14  # thinned to fit, first day first
    assert labels[0] == "01-01"


def day_stamp(day: int) -> str:
    """The payload timestamp of midday on the ``day``-th day after 2026-01-01."""
    months = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    year, rest = 2026 + day // 365, day % 365  # 2026 and 2027 are not leap years
    month = 0
    while rest >= months[month]:
        rest -= months[month]
        month += 1
    return f"{year}-{month + 1:02d}-{rest + 1:02d}T12:00:00.000Z"
