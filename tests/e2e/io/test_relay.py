"""RelayClient against a scripted hostile relay and against nostr-sdk's LocalRelay."""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc

import pytest

from nostr_buzz.errors import BuzzError, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.relay import MAX_REJECTED_KEPT, RelayClient
from nostr_buzz.keys import SecretKey
from tests.support.hostile_relay import hostile_relay, tarpit
from tests.support.relays import free_port, local_relay, start_relay
from tests.support.waits import wait_until

SECRET = SecretKey.from_str("67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa")
NOW = 1_790_000_000


def note(content: str = "hello", created_at: int = NOW, secret: SecretKey = SECRET) -> Event:
    return sign_event(secret, kind=1, content=content, created_at=created_at)


def elapsed_since(start: float) -> float:
    return asyncio.get_running_loop().time() - start


def now() -> float:
    return asyncio.get_running_loop().time()


def assert_no_tasks_left() -> None:
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == []


# --- hostile relay: forged and wrong events are never returned -------------------------------


async def test_event_served_under_a_different_id_is_rejected() -> None:
    real, squatter = note("real"), note("squatter")
    async with hostile_relay("wrong_id", [squatter]) as relay, RelayClient(relay.url) as c:
        result = await c.query({"ids": [real.id]}, timeout=2)
    assert result.events == []
    assert result.rejected == ["bad_id"]
    assert result.finished and result.error is None


async def test_forged_signature_is_rejected() -> None:
    ev = note()
    async with hostile_relay("forged_sig", [ev]) as relay, RelayClient(relay.url) as c:
        result = await c.query({"ids": [ev.id]}, timeout=2)
    assert result.events == []
    assert result.rejected == ["bad_signature"]


async def test_valid_event_that_was_not_asked_for_is_rejected() -> None:
    wanted = note()
    async with hostile_relay("other_event") as relay, RelayClient(relay.url) as c:
        result = await c.query({"ids": [wanted.id]}, timeout=2)
    assert result.events == []
    assert result.rejected == ["does not match filter"]


async def test_mixed_lies_leave_only_the_real_event_once() -> None:
    ev = note("the real one")
    async with hostile_relay("mixed", [ev]) as relay, RelayClient(relay.url) as c:
        result = await c.query({"ids": [ev.id]}, timeout=2)
    assert [e.to_json() for e in result.events] == [ev.to_json()]
    assert result.rejected == ["bad_signature", "does not match filter"]
    # not JSON, an object, another subscription, an unknown type
    assert result.malformed_frames == 4
    assert result.finished


async def test_ok_with_empty_id_is_matched_to_the_pending_publish() -> None:
    ev = note()
    async with hostile_relay("ok_empty_id") as relay, RelayClient(relay.url, timeout=5) as c:
        start = now()
        verdict = await c.publish(ev)
        assert elapsed_since(start) < 1.0  # answered, not timed out
    assert not verdict.accepted and not verdict.ok
    assert verdict.prefix == "blocked:"
    assert verdict.event_id == ev.id
    assert verdict.message == "blocked: you are not welcome"


async def test_auth_challenge_never_acknowledged_query_fails_once_retried() -> None:
    async with (
        hostile_relay("auth_never_ack") as relay,
        RelayClient(relay.url, secret=SECRET, timeout=3) as c,
    ):
        start = now()
        result = await c.query({"kinds": [1]})
        assert elapsed_since(start) < 2.0  # AUTH OK wait is short; no hang
    assert not result.finished
    assert result.error is not None and result.error.startswith("closed: auth-required:")
    kinds = [m[0] for m in relay.received]
    assert kinds.count("REQ") == 2  # the refused request is re-sent exactly once
    auth = Event.from_dict(next(m[1] for m in relay.received if m[0] == "AUTH"))
    assert auth.kind == 22242 and auth.pubkey == SECRET.public_key.hex
    assert ("relay", relay.url) in auth.tags
    assert ("challenge", "challenge-that-goes-nowhere") in auth.tags


async def test_auth_never_acknowledged_publish_reports_auth_required() -> None:
    ev = note()
    async with (
        hostile_relay("auth_never_ack") as relay,
        RelayClient(relay.url, secret=SECRET, timeout=3) as c,
    ):
        verdict = await c.publish(ev)
    assert verdict.prefix == "auth-required:" and not verdict.accepted
    assert [m[0] for m in relay.received].count("EVENT") == 2


async def test_auth_required_without_a_key_says_so_and_never_signs() -> None:
    async with hostile_relay("auth_never_ack") as relay, RelayClient(relay.url, timeout=2) as c:
        result = await c.query({"kinds": [1]})
    assert (
        result.error
        == "closed: auth-required: prove who you are (no key configured to authenticate)"
    )
    assert [m[0] for m in relay.received] == ["REQ"]


async def test_no_auth_for_relays_marked_auth_false() -> None:
    async with (
        hostile_relay("auth_never_ack") as relay,
        RelayClient(relay.url, secret=SECRET, auth=False, timeout=2) as c,
    ):
        result = await c.query({"kinds": [1]})
    assert result.error is not None and "authentication disabled" in result.error
    assert "AUTH" not in [m[0] for m in relay.received]


async def test_connection_dropped_mid_query_is_not_a_finished_query() -> None:
    ev = note()
    async with hostile_relay("drop_mid_query", [ev]) as relay, RelayClient(relay.url) as c:
        start = now()
        result = await c.query({"kinds": [1]}, timeout=3)
        assert elapsed_since(start) < 1.0
    assert not result.finished
    assert result.error is not None and result.error.startswith("connection lost:")
    assert [e.id for e in result.events] == [ev.id]  # what arrived intact is still verified data


async def test_endless_garbage_stream_ends_at_timeout_with_bounded_memory() -> None:
    ev = note()
    async with hostile_relay("endless_garbage", [ev]) as relay:
        tracemalloc.start()
        try:
            async with RelayClient(relay.url) as c:
                start = now()
                result = await c.query({"ids": [ev.id]}, timeout=1.0)
                took = elapsed_since(start)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert took < 3.0  # bounded by the timeout, with slack for a loaded machine
    assert result.error == "timeout" and not result.finished
    assert result.events == []
    assert result.rejected_count > 100
    assert len(result.rejected) == MAX_REJECTED_KEPT
    assert result.malformed_frames > 100
    assert relay.frames_sent > 1000
    # client and server together, for thousands of frames: far below what buffering them takes
    assert peak < 8_000_000, peak


async def test_endless_valid_stream_stops_at_the_event_cap() -> None:
    async with (
        hostile_relay("endless_valid") as relay,
        RelayClient(relay.url, max_events=200) as c,
    ):
        start = now()
        result = await c.query({"kinds": [1]}, timeout=5)
        assert elapsed_since(start) < 4
    assert len(result.events) == 200
    assert len({e.id for e in result.events}) == 200
    assert result.error == "too many events: stopped after 200 events"
    assert not result.finished


async def test_frame_over_the_size_limit_drops_the_connection() -> None:
    async with hostile_relay("huge_frame") as relay, RelayClient(relay.url) as c:
        result = await c.query({"kinds": [1]}, timeout=2)
    assert result.error == "connection lost: frame too large"


async def test_silent_relay_costs_at_most_the_timeout() -> None:
    async with hostile_relay("silent") as relay, RelayClient(relay.url, timeout=0.5) as c:
        start = now()
        result = await c.query({"kinds": [1]})
        verdict = await c.publish(note())
        assert elapsed_since(start) < 1.5
    assert result.error == "timeout" and not result.finished
    assert verdict.prefix == "error:" and verdict.message == "timeout: no OK from relay"


async def test_relay_that_never_completes_the_handshake_times_out() -> None:
    async with tarpit() as url:
        c = RelayClient(url, timeout=0.5)
        start = now()
        result = await c.query({"kinds": [1]})
        verdict = await c.publish(note())
        took = elapsed_since(start)
        await c.close()
    assert took < 1.5
    assert result.error == "connect failed: timeout"
    assert verdict.message == "connect failed: timeout" and verdict.prefix == "error:"


async def test_refused_connection_is_data_not_an_exception() -> None:
    async with RelayClient(f"ws://127.0.0.1:{free_port()}", timeout=1) as c:
        result = await c.query({"kinds": [1]})
        verdict = await c.publish(note())
    assert result.error == "connect failed: connection refused"
    assert verdict.message == "connect failed: connection refused"


@pytest.mark.parametrize(
    "url", ["http://relay.example", "relay.example", "", "ws://", "wss://h:99999"]
)
def test_bad_urls_raise_a_buzz_error(url: str) -> None:
    with pytest.raises(RelayError) as info:
        RelayClient(url)
    assert isinstance(info.value, BuzzError)


async def test_close_leaves_no_task_running() -> None:
    ev = note()
    async with hostile_relay("honest", [ev]) as relay:
        c = RelayClient(relay.url, timeout=2)
        await c.connect()
        result = await c.query({"ids": [ev.id]})
        await c.publish(ev)
        await c.close()
        await c.close()  # twice is fine
    assert result.finished and [e.id for e in result.events] == [ev.id]
    assert_no_tasks_left()


# --- LocalRelay ------------------------------------------------------------------------------

TRICKY = 'quote " backslash \\ slash / <tag> \u2028 \u00e9 \U0001f600 \n\t\x01 end'


async def test_publish_and_query_round_trip_keeps_canonical_bytes() -> None:
    ev = sign_event(
        SECRET, kind=9, content=TRICKY, tags=[["h", "room"], ["t", "ü/<x>"]], created_at=NOW
    )
    async with local_relay() as relay, RelayClient(relay.url, timeout=2) as c:
        verdict = await c.publish(ev)
        again = await c.publish(ev)
        by_id = await c.query({"ids": [ev.id]})
        by_tag = await c.query({"kinds": [9], "#h": ["room"]})
        none = await c.query({"kinds": [9], "#h": ["other"]})
    assert verdict.accepted and verdict.prefix is None and not verdict.duplicate
    assert again.duplicate and again.ok
    for result in (by_id, by_tag):
        assert result.finished and result.error is None and result.rejected == []
        assert [e.to_json() for e in result.events] == [ev.to_json()]
    assert none.finished and none.events == []


async def test_bulk_publish_with_a_raised_rate_limit_is_all_accepted() -> None:
    events = [note(f"bulk {i}", created_at=NOW + i) for i in range(150)]
    async with local_relay(notes_per_minute=10_000) as relay, RelayClient(relay.url) as c:
        verdicts = [await c.publish(ev) for ev in events]
        result = await c.query({"authors": [SECRET.public_key.hex], "limit": 500})
    assert all(v.accepted for v in verdicts)
    assert {e.id for e in result.events} == {e.id for e in events}


async def test_rate_limited_verdicts_carry_the_prefix() -> None:
    events = [note(f"burst {i}", created_at=NOW + i) for i in range(8)]
    async with local_relay(notes_per_minute=3) as relay, RelayClient(relay.url) as c:
        verdicts = [await c.publish(ev) for ev in events]
    refused = [v for v in verdicts if not v.accepted]
    assert refused, "the relay should have rate-limited a burst"
    assert all(v.prefix == "rate-limited:" for v in refused)


async def test_subscription_survives_a_restart_and_delivers_outage_events_once(tmp_path) -> None:
    db = tmp_path / "relay.lmdb"
    relay = await start_relay(db_path=db)
    sub_client = RelayClient(relay.url, timeout=1)
    received: asyncio.Queue[Event] = asyncio.Queue()

    async def consume() -> None:
        async for ev in sub_client.subscribe(
            {"authors": [SECRET.public_key.hex]}, reconnect_delay=0.5
        ):
            received.put_nowait(ev)

    consumer = asyncio.create_task(consume())
    try:
        first = note("before the outage", created_at=NOW)
        async with RelayClient(relay.url) as pub:
            assert (await pub.publish(first)).accepted
        assert (await asyncio.wait_for(received.get(), 2)).id == first.id

        relay.stop()
        # The subscriber has noticed and failed one reconnect: it is now backing off (1 s).
        await wait_until(lambda: sub_client.last_error == "connection refused", 2)
        relay = await start_relay(port=relay.port, database=relay.database)
        # Same second as `first`: re-opening with since=NOW re-serves `first`, which must be
        # de-duplicated.
        during = [note("during the outage", created_at=NOW), note("also", created_at=NOW + 1)]
        async with RelayClient(relay.url) as pub:
            # the store kept `first`, so the re-opened subscription (since=NOW) re-serves it
            assert [e.id for e in (await pub.query({"ids": [first.id]})).events] == [first.id]
            for ev in during:
                assert (await pub.publish(ev)).accepted
            got = [await asyncio.wait_for(received.get(), 3) for _ in during]
            assert sub_client.connections == 2
            marker = note("after reconnect", created_at=NOW + 2)
            assert (await pub.publish(marker)).accepted
            assert (await asyncio.wait_for(received.get(), 2)).id == marker.id
        assert sorted(e.id for e in got) == sorted(e.id for e in during)
        assert received.empty()  # `first` was not delivered twice
    finally:
        await sub_client.close()
        await asyncio.wait_for(consumer, 2)
        relay.stop()


async def test_live_subscription_skips_forged_events() -> None:
    ev = note()
    async with hostile_relay("mixed", [ev]) as relay:
        c = RelayClient(relay.url, timeout=1)
        got: list[Event] = []
        async with contextlib.aclosing(c.subscribe({"ids": [ev.id]})) as stream:
            async for e in stream:
                got.append(e)
                break
        await c.close()
    assert [e.id for e in got] == [ev.id]
    assert c.rejected_count == 2


async def test_live_subscription_to_a_relay_that_keeps_dropping_is_bounded_and_deduplicated() -> (
    None
):
    ev = note()
    async with hostile_relay("drop_mid_query", [ev]) as relay:
        c = RelayClient(relay.url, timeout=1)
        got: list[str] = []
        async with asyncio.timeout(5):
            async for e in c.subscribe({"kinds": [1]}, reconnect_delay=0.01, max_failures=3):
                got.append(e.id)
        await c.close()
    assert got == [ev.id]  # served on every connection, yielded once
    assert relay.connections == 4
    assert c.last_error == "gave up after 3 reconnects: connection dropped"
