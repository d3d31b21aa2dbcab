"""MetricPublisher against real relays on 127.0.0.1: outbox first, retries, restarts, NIP-42."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from nostr_buzz.event import Event
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, open_metric_event
from tests.support.cli import dead_url
from tests.support.hostile_relay import hostile_relay
from tests.support.keys import AGENT, OWNER
from tests.support.relays import free_port, local_relay, start_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay

#: A jitter source that always draws the middle of its range (no jitter).
MIDPOINT = SimpleNamespace(uniform=lambda a, b: (a + b) / 2)


def payload(seq: int = 1) -> MetricPayload:
    return MetricPayload(
        harness="goose",
        timestamp=f"2026-12-02T10:00:{seq:02d}.000Z",
        model="model-x",
        session_id="s1",
        turn_seq=seq,
        turn=TokenCounts(100, 10, 110, 0.5),
    )


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def publisher(
    path: Path, relays: list[str], reports: list[PublishReport] | None = None, **kw: object
) -> MetricPublisher:
    sink = reports.append if reports is not None else None
    return MetricPublisher(
        AGENT,
        OWNER.public_key,
        path,
        relays,
        timeout=2.0,
        rng=MIDPOINT,
        on_report=sink,
        **kw,  # type: ignore[arg-type]
    )


async def stored_on(url: str, event_id: str) -> Event | None:
    result = await RelayPool([url], timeout=3).query({"ids": [event_id]})
    return next((e for e in result.events if e.id == event_id), None)


@asynccontextmanager
async def duplicate_relay() -> AsyncIterator[str]:
    """A relay that answers every EVENT with ``OK false "duplicate: …"``."""

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            msg = json.loads(raw)
            if msg[0] == "EVENT":
                await ws.send(json.dumps(["OK", msg[1]["id"], False, "duplicate: have it"]))

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


async def test_one_relay_down_one_accepting_delivers_and_keeps_it_for_the_other(
    tmp_path: Path,
) -> None:
    reports: list[PublishReport] = []
    dead = dead_url()
    async with local_relay() as relay:
        pub = publisher(tmp_path / "outbox.db", [relay.url, dead], reports)
        event = (await pub.publish(payload())).event
        assert event is not None
        await pub.drain()
        assert reports[0].delivered and reports[0].stored
        assert reports[0].verdicts[relay.url].accepted
        # The down relay is still owed the metric: its own record, its own retry.
        assert pub.pending_count() == 1
        entry = pub.outbox.get(event.id)
        assert entry is not None
        records = {r.relay: r for r in entry.relay_records}
        assert records[relay.url].state == "accepted"
        assert records[dead].state == "failing" and "connect failed" in (
            records[dead].last_error or ""
        )
        assert reports[-1].waiting == (dead,)
        served = await stored_on(relay.url, event.id)
        assert served == event
        assert open_metric_event(OWNER, served) == payload()
        pub.close()


async def test_all_down_keeps_the_metric_and_resends_after_the_relays_return(
    tmp_path: Path,
) -> None:
    clock = Clock()
    reports: list[PublishReport] = []
    ports = [free_port(), free_port()]
    urls = [f"ws://127.0.0.1:{p}" for p in ports]
    pub = publisher(tmp_path / "outbox.db", urls, reports, clock=clock)
    event = (await pub.publish(payload())).event
    assert event is not None
    [first] = reports
    assert not first.delivered and first.stored and first.attempts == 1
    assert first.next_attempt == clock.now + 5.0
    assert first.error is not None and "connect failed" in first.error
    assert pub.pending_count() == 1
    entry = pub.outbox.get(event.id)
    assert entry is not None and entry.last_error == first.error

    relays = [await start_relay(port=p) for p in ports]
    try:
        clock.now += 4.9
        assert await pub.flush() == []  # not due yet
        clock.now += 0.1
        [retry] = await pub.flush()
        assert retry.delivered and retry.attempts == 2
        await pub.drain()
        assert pub.pending_count() == 0
        for url in urls:  # sent to every write relay, not just enough of them
            assert await stored_on(url, event.id) == event
    finally:
        for r in relays:
            r.stop()
        pub.close()


async def test_a_new_publisher_on_the_same_outbox_resends_after_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state" / "outbox.db"
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    before = publisher(path, [url], clock=Clock(0.0))
    events = [(await before.publish(payload(seq))).event for seq in (1, 2, 3)]
    assert before.pending_count() == 3
    before.close()  # the process ends with three metrics undelivered

    async with local_relay(port=port):
        reports: list[PublishReport] = []
        after = publisher(path, [url], reports, clock=Clock(3_600.0))
        assert after.pending_count() == 3
        assert all(r.delivered for r in await after.flush())
        assert after.pending_count() == 0
        for event in events:
            assert event is not None and await stored_on(url, event.id) == event
        assert {r.event_id for r in reports} == {e.id for e in events if e is not None}
        after.close()


async def test_duplicate_answers_count_as_delivered(tmp_path: Path) -> None:
    async with duplicate_relay() as url:
        reports: list[PublishReport] = []
        pub = publisher(tmp_path / "o.db", [url], reports)
        assert (await pub.publish(payload())).stored
        [report] = reports
        verdict = report.verdicts[url]
        assert not verdict.accepted and verdict.duplicate
        assert report.delivered and pub.pending_count() == 0
        pub.close()


async def test_relays_that_took_the_event_add_up_towards_min_ok(tmp_path: Path) -> None:
    clock = Clock()
    port = free_port()
    async with local_relay() as up:
        reports: list[PublishReport] = []
        late = f"ws://127.0.0.1:{port}"
        pub = publisher(tmp_path / "o.db", [up.url, late], reports, min_ok=2, clock=clock)
        event = (await pub.publish(payload())).event
        assert event is not None and not reports[-1].delivered
        assert pub.pending_count() == 1
        async with local_relay(port=port):
            clock.now += 60
            [retry] = await pub.flush()
        assert retry.delivered  # up (first attempt) + late (second attempt) = 2
        assert pub.pending_count() == 0
        pub.close()


async def test_nip42_write_relay_gets_auth_with_the_agent_key(tmp_path: Path) -> None:
    async with local_relay(auth="write") as relay:
        reports: list[PublishReport] = []
        pub = publisher(tmp_path / "o.db", [relay.url], reports)
        event = (await pub.publish(payload())).event
        assert event is not None
        assert reports[-1].delivered, reports[-1]
        assert await stored_on(relay.url, event.id) == event  # reading is open in WRITE mode
        pub.close()


async def test_a_relay_refusing_for_auth_without_success_keeps_the_metric(tmp_path: Path) -> None:
    async with local_relay(auth="write", allowed_authors={"00" * 32}) as relay:
        reports: list[PublishReport] = []
        pub = publisher(tmp_path / "o.db", [relay.url], reports)
        await pub.publish(payload())
        assert not reports[-1].delivered
        assert reports[-1].error is not None and "blocked:" in reports[-1].error
        assert pub.pending_count() == 1
        pub.close()


async def test_publish_returns_a_receipt_naming_the_relays_that_took_it(tmp_path: Path) -> None:
    reports: list[PublishReport] = []
    async with local_relay() as relay:
        pub = publisher(tmp_path / "o.db", [relay.url, dead_url()], reports)
        receipt = await pub.publish(payload())
        assert isinstance(receipt, PublishReport) and receipt.event is not None
        assert receipt.stored and receipt.delivered and receipt.accepted_by == [relay.url]
        assert reports[0] == receipt
        assert await stored_on(relay.url, receipt.event.id) == receipt.event
        await pub.drain()
        assert pub.pending_count() == 1  # owed to the relay that is down
        pub.close()


async def test_a_silent_relay_never_holds_the_turn_past_the_timeout(tmp_path: Path) -> None:
    async with hostile_relay("silent") as silent:
        reports: list[PublishReport] = []
        pub = MetricPublisher(
            AGENT,
            OWNER.public_key,
            tmp_path / "o.db",
            [silent.url],
            timeout=0.5,
            on_report=reports.append,
        )
        started = time.monotonic()
        assert (await pub.publish(payload())).stored
        assert time.monotonic() - started < 3.0
        assert not reports[-1].delivered and pub.pending_count() == 1
        pub.close()


async def test_a_broken_pool_factory_is_reported_not_raised(tmp_path: Path) -> None:
    def broken() -> RelayPool:
        raise RuntimeError("no network stack today")

    reports: list[PublishReport] = []
    pub = MetricPublisher(
        AGENT, OWNER.public_key, tmp_path / "o.db", broken, on_report=reports.append
    )
    assert (await pub.publish(payload())).stored
    assert reports[-1].stored and not reports[-1].delivered
    assert "no network stack today" in (reports[-1].error or "")
    assert pub.pending_count() == 1
    pub.close()


async def test_run_delivers_what_an_earlier_process_left_and_stops_when_asked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "o.db"
    with Outbox(path) as box:
        left = MetricPublisher(AGENT, OWNER.public_key, box, [dead_url()], timeout=1.0)
        event = (await left.publish(payload())).event
    assert event is not None
    async with local_relay() as relay:
        delivered = asyncio.Event()

        def on_report(report: PublishReport) -> None:
            if report.delivered:
                delivered.set()

        clock = Clock(time.time() + 3_600)  # the entry's backoff has passed
        pub = MetricPublisher(
            AGENT,
            OWNER.public_key,
            path,
            [relay.url],
            timeout=2.0,
            clock=clock,
            on_report=on_report,
        )
        stop = asyncio.Event()
        runner = asyncio.create_task(pub.run(stop, idle=0.2))
        async with asyncio.timeout(10):
            await delivered.wait()
        stop.set()
        async with asyncio.timeout(5):
            await runner
        assert pub.pending_count() == 0
        assert await stored_on(relay.url, event.id) == event
        pub.close()


async def test_a_broken_outbox_still_sends_and_says_it_is_not_durable(tmp_path: Path) -> None:
    async with local_relay() as relay:
        reports: list[PublishReport] = []
        pub = publisher(tmp_path / "o.db", [relay.url], reports)
        pub.outbox.close()  # as if the disk went away
        event = (await pub.publish(payload())).event
        assert event is not None
        [report] = reports
        assert not report.stored and report.delivered
        assert report.error is not None and "outbox" in report.error
        assert await stored_on(relay.url, event.id) == event
        assert pub.pending_count() == -1


async def test_store_commits_before_any_send_so_a_crash_cannot_lose_the_metric(
    tmp_path: Path,
) -> None:
    from nostr_buzz.nips.nip_am import build_metric_event

    path = tmp_path / "outbox.sqlite3"
    event = build_metric_event(AGENT, OWNER.public_key, payload())
    assert publisher(path, [dead_url()]).store(event) is None
    # No send was attempted: a fresh process opening the same file finds the signed event.
    reopened = Outbox(path, rng=MIDPOINT)
    assert [entry.event.id for entry in reopened.entries()] == [event.id]
    report = await publisher(path, [dead_url()]).send_stored(event, None)
    assert report.stored and not report.delivered


async def test_a_retry_goes_only_to_the_relay_that_does_not_have_the_metric(
    tmp_path: Path,
) -> None:
    """Two relays: one takes the metric at once, the other refuses it the first time.  The
    retry sends it to the refusing relay alone; the one that has it never gets it again."""

    async def taking(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], True, ""])

    async def refusing_once(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            first = len(relay.frames("EVENT")) == 1
            await conn.send(["OK", msg[1]["id"], not first, "error: busy" if first else ""])

    clock = Clock()
    reports: list[PublishReport] = []
    async with scripted_relay(taking) as fast, scripted_relay(refusing_once) as busy:
        pub = publisher(tmp_path / "o.db", [fast.url, busy.url], reports, clock=clock)
        event = (await pub.publish(payload())).event
        assert event is not None
        await pub.drain()
        assert reports[0].delivered and pub.pending_count() == 1
        entry = pub.outbox.get(event.id)
        assert entry is not None
        states = {r.relay: r.state for r in entry.relay_records}
        assert states == {fast.url: "accepted", busy.url: "failing"}
        clock.now = entry.next_attempt
        [retry] = await pub.flush()
        await pub.drain()
        assert list(retry.verdicts) == [busy.url] and retry.verdicts[busy.url].accepted
        assert retry.earlier and retry.complete and pub.pending_count() == 0
        assert len(fast.frames("EVENT")) == 1  # never sent again to the relay that had it
        assert len(busy.frames("EVENT")) == 2
        pub.close()
