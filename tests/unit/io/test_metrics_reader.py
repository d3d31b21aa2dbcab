"""The owner's metrics reader: pure report rules, then real relays on 127.0.0.1.

``scenario()`` (also used by ``test_cli_metrics``) is a small world: two agents, three
sessions over two days, created_at deliberately out of turn order, a decreasing cumulative
counter, a manifest with a wrong hash, and four forged metrics that must be ignored and counted.
"""

from __future__ import annotations

from calendar import timegm
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.core.manifest import Layer, Manifest, manifest_from_layers
from nostr_buzz.core.metrics_report import OpenedMetric, build_report, open_metric
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.metrics_reader import fetch_metrics, read_metrics
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event
from tests.support.hostile_relay import hostile_relay
from tests.support.relays import free_port, local_relay

OWNER = SecretKey.from_str("0e" * 32)
OTHER_OWNER = SecretKey.from_str("0f" * 32)
AGENT_A = SecretKey.from_str("a1" * 32)
AGENT_B = SecretKey.from_str("b2" * 32)

LAYER = Layer(0, "system", "global", "harness", "v1", "host", "static", 40, False)
GOOD_MANIFEST = manifest_from_layers([LAYER])
TAMPERED_MANIFEST = Manifest(1, "sha256:" + "0" * 64, (LAYER,))


def counts(i: int | None, o: int | None, t: int | None, c: float | None) -> TokenCounts:
    return TokenCounts(i, o, t, c)


def metric(agent: SecretKey, payload: MetricPayload, owner: SecretKey = OWNER) -> Event:
    return build_metric_event(agent, owner.public_key, payload)


@dataclass
class Scenario:
    valid: list[Event]
    forged: list[Event]
    elsewhere: list[Event]  # for another owner: relays never return them for our #p

    @property
    def all(self) -> list[Event]:
        return self.valid + self.forged + self.elsewhere


def forged_metrics() -> list[Event]:
    p = MetricPayload(harness="goose", timestamp="2026-12-02T09:00:00.000Z", model="m")
    honest = metric(AGENT_A, p)
    two_owners = sign_event(
        AGENT_A,
        kind=44200,
        content=honest.content,
        tags=(
            ("p", OWNER.public_key.hex),
            ("p", OTHER_OWNER.public_key.hex),
            ("agent", AGENT_A.public_key.hex),
        ),
        created_at=honest.created_at,
    )
    impersonating = sign_event(
        AGENT_A,
        kind=44200,
        content=honest.content,
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_B.public_key.hex)),
        created_at=honest.created_at + 1,
    )
    for_someone_else = metric(AGENT_A, p, owner=OTHER_OWNER)
    undecryptable = sign_event(
        AGENT_A,
        kind=44200,
        content=for_someone_else.content,
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_A.public_key.hex)),
        created_at=honest.created_at + 2,
    )
    key = nip44.conversation_key(AGENT_A, OWNER.public_key)
    not_a_payload = sign_event(
        AGENT_A,
        kind=44200,
        content=nip44.encrypt('{"harness":"","timestamp":"nope"}', key),
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_A.public_key.hex)),
        created_at=honest.created_at + 3,
    )
    return [two_owners, impersonating, undecryptable, not_a_payload]


def scenario() -> Scenario:
    # Agent A, session a1 (goose-style running totals).  Timestamps run backwards while
    # turnSeq runs forwards, so created_at order is the reverse of turn order.
    a1 = [
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T12:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=1,
            turn=counts(100, 10, 110, 0.01),
            cumulative=counts(100, 10, 110, 0.01),
            context_manifest=GOOD_MANIFEST,
        ),
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T11:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=2,
            turn=counts(None, None, None, None),  # the publisher could not tell …
            cumulative=counts(250, 30, 280, 0.03),  # … but the reader can
            delta_reliable=False,
            context_manifest=TAMPERED_MANIFEST,
        ),
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T10:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=3,
            turn=counts(7, 7, 7, 0.7),  # stale report; the counters went down: unknown
            cumulative=counts(200, 40, 240, 0.04),
        ),
    ]
    # Agent B: per-turn (standard) usage over two days, one turn without a cost.
    b = [
        MetricPayload(
            harness="codex",
            timestamp="2026-12-01T23:59:59.999Z",
            model="model-b",
            session_id="b1",
            turn_seq=1,
            turn=counts(1000, 100, 1100, 0.5),
        ),
        MetricPayload(
            harness="codex",
            timestamp="2026-12-02T00:00:00.000Z",
            model="model-b",
            session_id="b1",
            turn_seq=2,
            turn=counts(2000, 200, 2200, None),
        ),
        MetricPayload(
            harness="codex",
            timestamp="2026-12-02T08:00:00.000Z",
            model="model-b",
            turn=counts(1, 2, 3, 0.25),  # no session: reported as is
        ),
    ]
    valid = [metric(AGENT_A, p) for p in a1] + [metric(AGENT_B, p) for p in b]
    elsewhere = [metric(AGENT_A, a1[0], owner=OTHER_OWNER)]
    return Scenario(valid, forged_metrics(), elsewhere)


async def publish_all(url: str, events: list[Event]) -> None:
    pool = RelayPool([url], timeout=5)
    for event in events:
        assert (await pool.publish(event)).ok


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
    assert (day2.turns, day2.input_tokens, day2.cost_usd, day2.unknown_turns) == (2, 2001, 0.25, 1)
    assert report.ignored == {"undecryptable": 2}


def test_a_counter_nobody_reported_totals_to_null() -> None:
    p = MetricPayload(
        harness="x", timestamp="2026-12-02T00:00:00.000Z", turn=counts(5, 5, None, None)
    )
    [total] = build_report(opened([metric(AGENT_A, p)])).totals
    assert total.total_tokens is None and total.cost_usd is None and total.unknown_turns == 1


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


# --- against relays ---------------------------------------------------------------------------


async def test_reader_dedupes_across_relays_and_counts_what_it_ignored() -> None:
    world = scenario()
    async with local_relay() as one, local_relay() as two:
        await publish_all(one.url, world.all)
        await publish_all(two.url, world.valid[:3] + world.forged)
        report, fetch = await read_metrics(OWNER, [one.url, two.url], timeout=5)
    assert len(report.turns) == len(world.valid)
    assert {r.event_id for r in report.turns} == {e.id for e in world.valid}
    assert report.ignored == {
        "not_for_owner": 1,
        "agent_mismatch": 1,
        "undecryptable": 1,
        "invalid_payload": 1,
    }
    assert fetch.relays[one.url].events == len(world.valid) + len(world.forged)
    assert all(r.finished and r.error is None for r in fetch.relays.values())


async def test_since_and_until_select_by_created_at() -> None:
    world = scenario()
    async with local_relay() as relay:
        await publish_all(relay.url, world.valid)
        # created_at of 2026-12-02T10:00:00Z … 11:00:00Z, both ends inclusive.
        report, _ = await read_metrics(
            OWNER,
            [relay.url],
            since=timegm((2026, 12, 2, 10, 0, 0)),
            until=timegm((2026, 12, 2, 11, 0, 0)),
            timeout=5,
        )
    assert sorted(r.timestamp for r in report.turns) == [
        "2026-12-02T10:00:00.000Z",
        "2026-12-02T11:00:00.000Z",
    ]


async def test_pages_with_until_past_the_page_limit() -> None:
    # 23 metrics, several sharing a second, read 5 at a time.
    events = [
        metric(
            AGENT_A,
            MetricPayload(
                harness="goose",
                timestamp=f"2026-12-02T10:00:{i // 3:02d}.{i % 3:03d}Z",
                session_id="p",
                turn_seq=i + 1,
                turn=counts(i, 0, None, None),
            ),
        )
        for i in range(23)
    ]
    async with local_relay() as relay:
        await publish_all(relay.url, events)
        fetch = await fetch_metrics(OWNER, [relay.url], page_limit=5, timeout=5)
    assert sorted(m.payload.turn_seq or 0 for m in fetch.metrics) == list(range(1, 24))
    assert fetch.relays[relay.url].pages >= 5


async def test_more_than_local_relays_500_per_query() -> None:
    events = [
        metric(
            AGENT_B,
            MetricPayload(
                harness="goose",
                timestamp=f"2026-12-02T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                turn=counts(1, 1, 2, None),
            ),
        )
        for i in range(520)
    ]
    async with local_relay() as relay:
        await publish_all(relay.url, events)
        report, fetch = await read_metrics(OWNER, [relay.url], timeout=10)
    assert len(report.turns) == 520
    [total] = report.totals
    assert total.input_tokens == 520
    assert fetch.relays[relay.url].pages == 3  # 500, 21 (one repeated), then nothing new


async def test_nip42_read_relay_is_answered_with_the_owners_key() -> None:
    world = scenario()
    async with local_relay(auth="read") as relay:
        writer = RelayPool([relay.url], secret=AGENT_A, timeout=5)
        for event in world.valid:
            assert (await writer.publish(event)).ok
        report, fetch = await read_metrics(OWNER, [relay.url], timeout=5)
    assert len(report.turns) == len(world.valid)
    assert fetch.relays[relay.url].finished


async def test_forged_signatures_are_counted_as_verification_failures() -> None:
    world = scenario()
    async with hostile_relay("forged_sig", stored=world.valid[:2]) as liar, local_relay() as ok:
        await publish_all(ok.url, world.valid)
        report, fetch = await read_metrics(OWNER, [liar.url, ok.url], timeout=5)
    assert len(report.turns) == len(world.valid)
    assert report.ignored == {"verification": 2}
    assert fetch.relays[liar.url].rejected == 2


async def test_unreachable_relays_are_reported_not_raised() -> None:
    dead = f"ws://127.0.0.1:{free_port()}"
    report, fetch = await read_metrics(OWNER, [dead], timeout=2)
    assert not fetch.any_finished and report.turns == ()
    assert "connect failed" in (fetch.relays[dead].error or "")


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
        any(v is None for v in (r.input_tokens, r.output_tokens, r.total_tokens, r.cost_usd))
        for r in rows
    )
