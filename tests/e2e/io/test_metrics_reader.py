"""The owner's metrics reader against real relays on 127.0.0.1 (``fetch_metrics``,
``read_metrics``): dedupe, paging, NIP-42, forged signatures, unreachable relays."""

from __future__ import annotations

from calendar import timegm

from nostr_buzz.io.metrics_reader import fetch_metrics, read_metrics
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips.nip_am import MetricPayload
from tests.support.hostile_relay import hostile_relay
from tests.support.metric_scenario import (
    AGENT_A,
    AGENT_B,
    OWNER,
    counts,
    metric,
    publish_all,
    scenario,
)
from tests.support.relays import free_port, local_relay


async def test_reader_dedupes_across_relays_and_counts_what_it_ignored() -> None:
    world = scenario()
    async with local_relay() as one, local_relay() as two:
        await publish_all(one.url, world.all)
        await publish_all(two.url, world.valid[:3] + world.forged)
        report, fetch = await read_metrics(OWNER.bech32, [one.url, two.url], timeout=5)
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
