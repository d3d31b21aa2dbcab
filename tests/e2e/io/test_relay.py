"""RelayClient against a scripted hostile relay and against nostr-sdk's LocalRelay; then the
conformance cases of docs/cli.md (client, pool, NIP-42, the ``buzz`` conventions)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import MAX_REJECTED_KEPT, RelayClient
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip19
from tests.support.cli import BackgroundLoop
from tests.support.hostile_relay import hostile_relay, tarpit
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relay_cli import buzz, raw, write_toml
from tests.support.relays import free_port, local_relay, start_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay
from tests.support.waits import wait_until

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

        await relay.close()
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


# =================================================================================================
# Conformance: the relay client, the pool, NIP-42 and the buzz conventions (docs/cli.md), and
# docs/events.md's rules on event references and secret-free messages, checked from the text
# against scripted hostile relays.
# =================================================================================================


T = TypeVar("T")
ALICE = SecretKey.from_str("5c" * 32)
MALLORY = SecretKey.from_str("6d" * 32)
WAIT = 20.0
KEYS = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
NOTE = sign_event(ALICE, kind=1, content="héllo / <b> \u2028 ünïcode 🐝", created_at=1_700_000_123)
OTHER = sign_event(MALLORY, kind=1, content="an impostor", created_at=1_700_000_124)


def canonical(event: Event) -> str:
    """docs/events.md's canonical output, written independently of ``Event.to_json``."""
    d = event.to_dict()
    return json.dumps({k: d[k] for k in KEYS}, separators=(",", ":"), ensure_ascii=False)


def wire(event: Event, **changes: Any) -> dict[str, Any]:
    d = dict(event.to_dict())
    d.update(changes)
    return d


def forged_sig(event: Event) -> dict[str, Any]:
    sig = bytearray(bytes.fromhex(event.sig))
    sig[7] ^= 0x10
    return wire(event, sig=sig.hex())


def squatter(event: Event) -> dict[str, Any]:
    """Same id and signature, different content: an event squatting another's id."""
    return wire(event, content=event.content + " (edited by the relay)")


def refused_url() -> str:
    return f"ws://127.0.0.1:{free_port()}"


def clock() -> float:
    return time.monotonic()


# --- scripts ---------------------------------------------------------------------------------


def serving(*events: Any, eose: bool = True, closed: str | None = None, other_sub: bool = False):  # type: ignore[no-untyped-def]
    """A script answering every REQ with ``events`` (Event or wire dict), then EOSE/CLOSED."""

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], True, ""])
            return
        if msg[0] != "REQ":
            return
        sub = "not-" + msg[1] if other_sub else msg[1]
        for ev in events:
            await conn.send(["EVENT", sub, ev.to_dict() if isinstance(ev, Event) else ev])
        if eose:
            await conn.send(["EOSE", msg[1]])
        if closed is not None:
            await conn.send(["CLOSED", msg[1], closed])

    return script


# --- relay client: frames ---------------------------------------------------------------------


async def test_malformed_frames_are_counted_and_never_affect_results() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] != "REQ":
            return
        sub = msg[1]
        await conn.send(["EVENT", "someone-else", NOTE.to_dict()])  # other subscription
        await conn.send(["EVENT", "someone-else", forged_sig(NOTE)])  # not even verified
        await conn.send(["WHATEVER", sub, 1])  # unknown type
        await conn.send({"EVENT": sub})  # not an array
        await conn.send('"EVENT"')  # not an array either
        await conn.send("[1, 2")  # not JSON
        await conn.send(["EOSE", "someone-else"])  # must not end our query
        await conn.send(["CLOSED", "someone-else", "blocked: no"])  # nor this
        await conn.send(["EVENT", sub, NOTE.to_dict()])
        await conn.send(["EOSE", sub])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as client:
        result = await client.query({"ids": [NOTE.id]})
    assert result.finished and result.error is None
    assert [e.id for e in result.events] == [NOTE.id]
    assert result.rejected_count == 0  # frames for other subscriptions are malformed, not failures
    assert result.malformed_frames == 8


async def test_notice_flood_is_harmless() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for i in range(3000):
                await conn.send(["NOTICE", f"spam {i} " + "x" * 100])
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            await conn.send(["EOSE", msg[1]])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as client:
        result = await client.query({"ids": [NOTE.id]})
        assert len(client.notices) <= 100  # bounded memory
    assert result.finished and [e.id for e in result.events] == [NOTE.id]


async def test_huge_frame_fails_that_relay_only_and_quickly() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["NOTICE", "x" * (3 << 20)])
            await conn.send(["EOSE", msg[1]])

    async with scripted_relay(script) as bad, scripted_relay(serving(NOTE)) as good:
        start = clock()
        result = await RelayPool([bad.url, good.url], timeout=5).query({"ids": [NOTE.id]})
        assert clock() - start < 4
    assert [e.id for e in result.events] == [NOTE.id]
    assert not result.per_relay[bad.url].finished and result.per_relay[bad.url].error


async def test_verification_failures_are_dropped_counted_and_named() -> None:
    extra = wire(NOTE, seen_on="wss://elsewhere", relay_note={"a": 1})
    async with (
        scripted_relay(
            serving(forged_sig(NOTE), squatter(NOTE), OTHER, wire(NOTE, id="ab" * 32), extra)
        ) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
    assert result.finished
    assert [canonical(e) for e in result.events] == [canonical(NOTE)]  # the extra-field copy
    assert result.rejected_count == 4
    assert result.rejected[:2] == ["bad_signature", "bad_id"]
    assert "bad_id" in result.rejected[3] or "match" in result.rejected[3]
    assert any("match" in r for r in result.rejected)  # OTHER: valid, not the id asked for


async def test_extra_fields_and_key_order_never_reach_the_canonical_output() -> None:
    d = NOTE.to_dict()
    shuffled = {"sig": d["sig"], "extra": [1, 2], **{k: d[k] for k in reversed(KEYS[:-1])}}
    async with (
        scripted_relay(serving(shuffled)) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
    assert [e.to_json() for e in result.events] == [canonical(NOTE)]


async def test_event_frames_that_are_not_events_are_verification_failures() -> None:
    # "fails Event.from_json for any reason": not an object, missing fields, wrong types.
    junk: list[Any] = [42, "text", None, [NOTE.to_dict()], {"id": NOTE.id}, wire(NOTE, kind="1")]
    async with scripted_relay(serving(*junk)) as relay, RelayClient(relay.url, timeout=5) as c:
        result = await c.query({"ids": [NOTE.id]})
    assert result.finished and result.events == []
    assert result.rejected_count == len(junk)


# --- relay client: ending a query -------------------------------------------------------------


async def test_query_ends_at_eose_without_waiting_for_closed() -> None:
    async with scripted_relay(serving(NOTE)) as relay, RelayClient(relay.url, timeout=8) as c:
        start = clock()
        result = await c.query({"ids": [NOTE.id]})
        assert clock() - start < 2
    assert result.finished and result.error is None


@pytest.mark.parametrize(
    ("reason", "finished"),
    [("", True), ("blocked: not for you", False), ("error: shutting down", False)],
)
async def test_closed_with_empty_reason_is_normal_a_prefixed_one_a_failure(
    reason: str, finished: bool
) -> None:
    async with (
        scripted_relay(serving(NOTE, eose=False, closed=reason)) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        start = clock()
        result = await client.query({"ids": [NOTE.id]})
        assert clock() - start < 2
    assert result.finished is finished
    assert (result.error is None) is finished
    if not finished:
        assert reason in (result.error or "")


async def test_connection_cut_mid_frame_is_a_relay_failure_not_a_crash() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            conn.cut_mid_frame()

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as c:
        start = clock()
        result = await c.query({"ids": [NOTE.id]})
        assert clock() - start < 2
    assert not result.finished and result.error


async def test_an_ids_query_may_end_once_every_id_is_served_without_eose() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])  # and never an EOSE

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=1) as c:
        start = clock()
        early = await c.query({"ids": [NOTE.id]}, end_when_ids_served=True)
        assert clock() - start < 0.9  # well inside the timeout
        waited = await c.query({"ids": [NOTE.id]})  # by default, EOSE or the timeout ends it
    assert early.finished and [e.id for e in early.events] == [NOTE.id]
    assert not waited.finished and waited.error == "timeout"
    assert [e.id for e in waited.events] == [NOTE.id]


async def test_accept_then_silence_costs_at_most_the_timeout() -> None:
    async with tarpit() as url, scripted_relay() as silent:
        start = clock()
        result = await RelayPool([url, silent.url], timeout=1.0).query({"ids": [NOTE.id]})
        took = clock() - start
    assert took < 2.6  # the timeout plus closing the sockets
    assert all(not r.finished and r.error for r in result.per_relay.values())


@pytest.mark.parametrize("url", ["refused", "ws://no-such-host.invalid:7447"])
async def test_unreachable_relay_is_an_error_result_not_an_exception(url: str) -> None:
    target = refused_url() if url == "refused" else url
    result = await RelayPool([target], timeout=2).query({"ids": [NOTE.id]})
    assert not result.per_relay[target].finished and result.per_relay[target].error


# --- publishing ------------------------------------------------------------------------------


async def test_ok_for_another_event_id_is_not_our_verdict() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", OTHER.id, True, ""])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=0.7) as c:
        start = clock()
        verdict = await c.publish(NOTE)
        assert clock() - start < 2
    assert not verdict.accepted and not verdict.ok


@pytest.mark.parametrize(
    ("message", "accepted", "duplicate", "prefix"),
    [
        ("", True, False, None),
        ("duplicate: have it", True, True, "duplicate:"),
        ("pow: difficulty 30", False, False, "pow:"),
        ("rate-limited: slow down", False, False, "rate-limited:"),
        ("restricted: members only", False, False, "restricted:"),
        ("invalid: bad tags", False, False, "invalid:"),
    ],
)
async def test_publish_reports_the_relays_verdict_and_prefix(
    message: str, accepted: bool, duplicate: bool, prefix: str | None
) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], accepted, message])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as c:
        verdict = await c.publish(NOTE)
    assert (verdict.accepted, verdict.duplicate, verdict.prefix) == (accepted, duplicate, prefix)
    assert verdict.ok is accepted


async def test_pool_publish_fans_out_and_reports_each_relay() -> None:
    async def refuse(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "blocked: no"])

    async with scripted_relay(serving()) as yes, scripted_relay(refuse) as no, tarpit() as pit:
        dead = refused_url()
        start = clock()
        result = await RelayPool([yes.url, no.url, pit, dead], timeout=1).publish(NOTE)
        assert clock() - start < 2.6
    assert result.ok and result.accepted == [yes.url]
    assert set(result.failed) == {no.url, pit, dead}
    assert result.verdicts[no.url].prefix == "blocked:"


# --- NIP-42 ------------------------------------------------------------------------------------


def check_auth_event(frame: list[Any], url: str, challenge: str, key: SecretKey) -> None:
    assert frame[0] == "AUTH" and len(frame) == 2
    event = Event.from_dict(frame[1])  # a real, signed event
    assert event.kind == 22242
    assert event.pubkey == key.public_key.hex
    assert ("relay", url) in event.tags and ("challenge", challenge) in event.tags
    assert abs(event.created_at - time.time()) < 600


def auth_gate(*, on_connect: bool, ack: bool, late: bool = False, always: bool = False):  # type: ignore[no-untyped-def]
    """Refuse REQ and EVENT with ``auth-required:`` until an AUTH arrives (``always``: forever)."""
    state = {"authed": False}

    async def connect(relay: ScriptedRelay, conn: Conn) -> None:
        if on_connect:
            await conn.send(["AUTH", "chal-on-connect"])

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "AUTH":
            state["authed"] = True
            if ack:
                await conn.send(["OK", msg[1]["id"], True, ""])
            return
        if not state["authed"] or always:
            if not on_connect and not late:
                await conn.send(["AUTH", "chal-on-demand"])
            if msg[0] == "REQ":
                await conn.send(["CLOSED", msg[1], "auth-required: who are you?"])
            elif msg[0] == "EVENT":
                await conn.send(["OK", msg[1]["id"], False, "auth-required: who are you?"])
            if late:
                await conn.send(["AUTH", "chal-late"])
            return
        await serving(NOTE)(relay, conn, msg)

    return connect, script


@pytest.mark.parametrize(
    ("on_connect", "ack", "late", "challenge"),
    [
        (True, True, False, "chal-on-connect"),
        (False, True, False, "chal-on-demand"),
        (False, True, True, "chal-late"),
        (True, False, False, "chal-on-connect"),  # never acknowledges the AUTH
    ],
)
async def test_auth_required_query_authenticates_once_and_retries(
    on_connect: bool, ack: bool, late: bool, challenge: str
) -> None:
    connect, script = auth_gate(on_connect=on_connect, ack=ack, late=late)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=6) as client,
    ):
        start = clock()
        result = await client.query({"ids": [NOTE.id]})
        assert clock() - start < 3.5  # a missing AUTH OK costs a short wait, not the timeout
    assert result.finished and [e.id for e in result.events] == [NOTE.id]
    assert len(relay.frames("AUTH")) == 1 and len(relay.frames("REQ")) == 2
    check_auth_event(relay.frames("AUTH")[0], relay.url, challenge, ALICE)


async def test_auth_retry_happens_only_once() -> None:
    connect, script = auth_gate(on_connect=True, ack=True, always=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
        verdict = await client.publish(NOTE)
    assert not result.finished and "auth-required:" in (result.error or "")
    assert not verdict.accepted and verdict.prefix == "auth-required:"
    assert len(relay.frames("REQ")) == 2 and len(relay.frames("EVENT")) == 2
    assert len(relay.frames("AUTH")) <= 2  # at most one per refused request


async def test_auth_required_publish_authenticates_and_resends() -> None:
    connect, script = auth_gate(on_connect=False, ack=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        verdict = await client.publish(NOTE)
    assert verdict.accepted
    assert len(relay.frames("EVENT")) == 2 and len(relay.frames("AUTH")) == 1
    check_auth_event(relay.frames("AUTH")[0], relay.url, "chal-on-demand", ALICE)


async def test_no_key_or_a_hint_relay_never_authenticates() -> None:
    connect, script = auth_gate(on_connect=True, ack=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, timeout=3) as client,
    ):
        keyless = await client.query({"ids": [NOTE.id]})
        async with RelayClient(relay.url, secret=ALICE, auth=False, timeout=3) as client:
            hint = await client.query({"ids": [NOTE.id]})
        pooled = await RelayPool([], secret=ALICE, timeout=3).query(
            {"ids": [NOTE.id]}, extra_urls=[relay.url, "https://not-a-relay.example", "nonsense"]
        )
    assert not keyless.finished and not hint.finished
    assert list(pooled.per_relay) == [relay.url]  # non-ws hints skipped
    assert not pooled.per_relay[relay.url].finished
    assert relay.frames("AUTH") == []


async def test_a_challenge_on_connect_alone_triggers_no_auth() -> None:
    async def connect(relay: ScriptedRelay, conn: Conn) -> None:
        await conn.send(["AUTH", "unused"])

    async with (
        scripted_relay(serving(NOTE), connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
        verdict = await client.publish(NOTE)
    assert result.finished and verdict.accepted
    assert relay.frames("AUTH") == []


async def test_live_subscription_resumes_with_since_and_deduplicates() -> None:
    e1, e2, e3 = (sign_event(ALICE, kind=1, content=f"m{i}", created_at=100 * i) for i in (1, 2, 3))

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] != "REQ":
            return
        if relay.connections == 1:
            for ev in (e1, e2):
                await conn.send(["EVENT", msg[1], ev.to_dict()])
            await conn.send(["EOSE", msg[1]])
            conn.cut_mid_frame()
        else:
            for ev in (e2, e3):  # e2 again: a resumed subscription re-serves the last second
                await conn.send(["EVENT", msg[1], ev.to_dict()])
            await conn.send(["EOSE", msg[1]])

    got: list[str] = []
    async with scripted_relay(script) as relay:
        client = RelayClient(relay.url, timeout=5)
        try:
            async with asyncio.timeout(10):
                async for event in client.subscribe({"kinds": [1]}, reconnect_delay=0.05):
                    got.append(event.id)
                    if len(got) == 3:
                        break
        finally:
            await client.close()
    assert got == [e1.id, e2.id, e3.id]
    reqs = relay.frames("REQ")
    assert reqs[0][2] == {"kinds": [1]}
    assert reqs[1][2] == {"kinds": [1], "since": 200}


# --- pool -------------------------------------------------------------------------------------


async def test_pool_merges_duplicates_and_one_dead_relay_never_stalls_the_others() -> None:
    async with (
        scripted_relay(serving(NOTE, OTHER)) as a,
        scripted_relay(serving(OTHER, NOTE)) as b,
        tarpit() as pit,
    ):
        start = clock()
        result = await RelayPool([a.url, b.url, pit], timeout=1).query({"kinds": [1]})
        assert clock() - start < 2.6
    assert sorted(e.id for e in result.events) == sorted([NOTE.id, OTHER.id])
    assert result.per_relay[a.url].finished and result.per_relay[b.url].finished
    assert not result.per_relay[pit].finished


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean(no_ambient_config: None) -> None:
    """No ambient configuration: an empty working directory and no BUZZ_* variables."""


@pytest.fixture(scope="module")
def good(bg: BackgroundLoop) -> ScriptedRelay:
    return bg.relay(serving(NOTE))


@pytest.fixture(scope="module")
def empty(bg: BackgroundLoop) -> ScriptedRelay:
    return bg.relay(serving())


def test_raw_good_and_forger_prints_the_event_and_names_the_forger(
    bg: BackgroundLoop, good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    forger = bg.relay(serving(forged_sig(NOTE)))
    code, out, err = raw(capsys, NOTE.id, forger.url, good.url)
    assert code == 0
    assert out == canonical(NOTE) + "\n"
    assert forger.url in err and good.url not in err


@pytest.mark.parametrize("bad", ["sig", "squat", "other", "extra-under-wrong-id"])
def test_raw_forgers_only_exit_4_naming_each_relay_and_check(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    first = bg.relay(serving(forged_sig(NOTE)))
    served = {
        "sig": forged_sig(NOTE),
        "squat": squatter(NOTE),
        "other": OTHER.to_dict(),
        "extra-under-wrong-id": wire(OTHER, id=NOTE.id, extra=1),
    }[bad]
    second = bg.relay(serving(served))
    code, out, err = raw(capsys, NOTE.id, first.url, second.url)
    assert code == 4 and out == ""
    assert first.url in err and second.url in err
    assert "bad_signature" in err
    expected_check = {
        "sig": "bad_signature",
        "squat": "bad_id",
        "other": "match",
        "extra-under-wrong-id": "bad_id",
    }[bad]
    assert expected_check in err.split(second.url, 1)[1].splitlines()[0]
    assert NOTE.content not in err and OTHER.content not in err  # never the event JSON


def test_raw_event_for_another_subscription_does_not_count(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(NOTE, other_sub=True))
    code, _, _ = raw(capsys, NOTE.id, relay.url)
    assert code == 3


def test_raw_not_found_plus_unreachable_is_3(
    empty: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = raw(capsys, NOTE.id, empty.url, refused_url())
    assert code == 3 and "not found" in err


def test_raw_closed_with_empty_reason_counts_as_finished(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed=""))
    assert raw(capsys, NOTE.id, relay.url)[0] == 3


def test_raw_event_then_dropped_connection_still_counts(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            conn.cut_mid_frame()

    relay = bg.relay(script)
    code, out, _ = raw(capsys, NOTE.id, relay.url, refused_url())
    assert (code, out) == (0, canonical(NOTE) + "\n")


def test_raw_junk_event_frame_alone_is_exit_4(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving("not an event"))
    code, _, err = raw(capsys, NOTE.id, relay.url)
    assert code == 4 and relay.url in err and "malformed" in err


def test_raw_every_relay_refusing_is_2(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed="blocked: go away"))
    code, _, err = raw(capsys, NOTE.id, relay.url, refused_url())
    assert code == 2 and "blocked: go away" in err


def test_raw_all_unreachable_is_2_within_the_timeout(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    pit = bg.tarpit()
    start = clock()
    code, _, err = raw(capsys, NOTE.id, refused_url(), pit, timeout="1")
    assert code == 2 and clock() - start < 3.0
    assert pit in err


def test_raw_closed_after_eose_is_not_waited_for(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    start = clock()
    code, out, err = raw(capsys, NOTE.id, good.url, timeout="8")
    assert code == 0 and out == canonical(NOTE) + "\n"
    assert err == ""  # no progress lines when stderr is not a terminal
    assert clock() - start < 3


def test_raw_uppercase_hex_and_note_are_accepted(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    for ref in (NOTE.id.upper(), f"  {NOTE.id}  ", nip19.encode("note", NOTE.id)):
        code, out, _ = raw(capsys, ref, good.url)
        assert (code, out) == (0, canonical(NOTE) + "\n"), ref
    req = good.frames("REQ")[-1]
    assert req[2] == {"ids": [NOTE.id]}  # lowercased in the filter


def test_raw_nevent_hints_are_used_unauthenticated_and_never_narrow_the_filter(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    connect, script = auth_gate(on_connect=True, ack=True)
    configured = bg.relay(script, connect)  # demands AUTH and gets it: it was listed
    hint = bg.relay(serving(NOTE))
    gated_hint = bg.relay(*auth_gate(on_connect=True, ack=True)[::-1])
    ref = nip19.encode(
        "nevent",
        NOTE.id,
        relays=("https://web.example", hint.url, "not a url", gated_hint.url),
        author=MALLORY.public_key.hex,
        kind=7,
    )
    code, out, _ = buzz(
        capsys,
        "messages", "raw", "--event", ref, "--relay", configured.url,
        "--key", ALICE.hex, "--timeout", "4",
    )  # fmt: skip
    assert code == 0 and out == canonical(NOTE) + "\n"
    assert len(configured.frames("AUTH")) == 1
    assert hint.frames("AUTH") == [] and gated_hint.frames("AUTH") == []
    for relay in (configured, hint, gated_hint):
        for req in relay.frames("REQ"):
            assert req[2:] == [{"ids": [NOTE.id]}]


def test_raw_nevent_hint_alone_needs_no_configured_relay(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = nip19.encode("nevent", NOTE.id, relays=(good.url,))
    code, out, _ = buzz(capsys, "messages", "raw", "--event", ref, "--timeout", "3")
    assert (code, out) == (0, canonical(NOTE) + "\n")
    only_bad_hints = nip19.encode("nevent", NOTE.id, relays=("https://x.example",))
    code, _, err = buzz(capsys, "messages", "raw", "--event", only_bad_hints)
    assert code == 1
    assert "--relay" in err and "BUZZ_RELAYS" in err and "buzz.toml" in err


NSEC = ALICE.bech32


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "0x" + "a" * 62,
        "note1qqqq",
        ALICE.public_key.bech32,  # npub
        ALICE.public_key.hex[:10] + "zz",
        NSEC,
        NSEC.upper(),
        nip19.encode("nprofile", ALICE.public_key.hex, relays=("wss://r.example",)),
        "nevent1" + "q" * 40,
    ],
)
def test_raw_bad_references_are_exit_1(
    ref: str, good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = raw(capsys, ref, good.url)
    assert code == 1
    assert NSEC not in err and NSEC.upper() not in err
    if ref.lower().startswith("nsec1"):
        assert "looks like a secret key" in err


def test_secret_values_are_never_echoed(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value given as the key (valid or not) is never repeated, whatever option carries it.
    for secret in ("deadbeefcafe0123", NSEC[:-1] + "x", ALICE.hex):
        cases = [
            ("messages", "raw", "--event", secret, "--key", secret, "--relay", good.url),
            ("keys", "show", "--key", secret, "--bogus", secret),
            ("messages", "raw", "--event", NOTE.id, "--relay", secret, "--key", secret),
        ]
        for argv in cases:
            code, _, err = buzz(capsys, *argv)
            # A 64-hex key is also a well-formed event id: that raw query runs (and fails).
            assert code in (1, 4) and secret not in err, argv
        monkeypatch.setenv("BUZZ_PRIVATE_KEY", secret)
        code, _, err = buzz(capsys, "messages", "raw", "--event", secret, "--relay", good.url)
        assert code in (1, 4) and secret not in err
        monkeypatch.delenv("BUZZ_PRIVATE_KEY")


# --- configuration precedence ---------------------------------------------------------------


def test_relay_sources_first_wins_never_merged(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flag, env, toml = bg.relay(serving(NOTE)), bg.relay(serving(NOTE)), bg.relay(serving(NOTE))
    write_toml(Path("buzz.toml"), [toml.url])

    def asked() -> list[ScriptedRelay]:
        return [r for r in (flag, env, toml) if r.frames("REQ")]

    def run(*extra: str) -> None:
        for r in (flag, env, toml):
            r.received.clear()
        assert raw(capsys, NOTE.id, *extra)[0] == 0

    monkeypatch.setenv("BUZZ_RELAYS", f" {env.url} ,")
    run(flag.url)
    assert asked() == [flag]
    run()
    assert asked() == [env]
    for blank in ("", "   ", ","):
        monkeypatch.setenv("BUZZ_RELAYS", blank)
        run()
        assert asked() == [toml]


def test_no_relay_anywhere_names_the_three_sources(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_RELAYS", " ")
    write_toml(Path("buzz.toml"), [])
    for argv in (
        ("messages", "raw", "--event", NOTE.id),
        ("messages", "get", "--channel", "general"),
        ("messages", "send", "--channel", "general", "--key", ALICE.hex, "hi"),
    ):
        code, _, err = buzz(capsys, *argv)
        assert code == 1, argv
        assert "--relay" in err and "BUZZ_RELAYS" in err and "buzz.toml" in err, argv


def test_key_sources_first_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [SecretKey.from_str(c * 64) for c in "123"]
    write_toml(Path("buzz.toml"), [], key=keys[2].hex)
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", keys[1].bech32)

    def shown(*extra: str) -> str:
        code, out, _ = buzz(capsys, "keys", "show", "--json", *extra)
        assert code == 0
        hex_key: str = json.loads(out)["hex"]
        return hex_key

    assert shown("--key", keys[0].hex.upper()) == keys[0].public_key.hex
    assert shown() == keys[1].public_key.hex
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "  ")
    assert shown() == keys[2].public_key.hex
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "not a key")
    assert buzz(capsys, "keys", "show")[0] == 1  # a bad env key is not skipped for the file


# --- conventions --------------------------------------------------------------------------------


HELP_PATHS = [
    (),
    ("messages",),
    ("messages", "raw"),
    ("messages", "get"),
    ("messages", "thread"),
    ("messages", "send"),
    ("keys",),
    ("keys", "generate"),
    ("keys", "show"),
    ("relay",),
    ("compile",),
    ("manifest",),
    ("manifest", "diff"),
]


@pytest.mark.parametrize("path", HELP_PATHS)
def test_help_everywhere_is_exit_0(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = buzz(capsys, *path, "--help")
    assert code == 0 and "Usage" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("--bogus",),
        ("messages", "raw", "--bogus", "--event", "a" * 64),
        ("messages", "raw"),  # missing --event
        ("messages", "raw", "--event"),  # missing value
        ("messages", "raw", "--event", "a" * 64, "--timeout", "soon"),
        ("messages", "nosuchcommand"),
        ("keys", "show", "--key"),
        ("relay", "--port", "99999"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "inf"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "nan"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "0"),
        ("messages",),
        (),
    ],
)
def test_usage_errors_are_exit_1_with_empty_stdout(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = buzz(capsys, *argv)
    assert code == 1 and out == ""


async def test_a_single_url_string_is_one_relay() -> None:
    async with scripted_relay(serving(NOTE)) as relay:
        pool = RelayPool(relay.url, timeout=3)
        result = await pool.query({"ids": [NOTE.id]})
    assert pool.urls == [relay.url] and [e.id for e in result.events] == [NOTE.id]


def test_subprocess_raw_prints_utf8_under_the_c_locale(good: ScriptedRelay) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUZZ_", "LC_", "PYTHON"))}
    env.update({"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"})
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "messages", "raw", "--event", NOTE.id,
         "--relay", good.url, "--timeout", "5"],
        capture_output=True, env=env, timeout=WAIT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (canonical(NOTE) + "\n").encode("utf-8")


def test_help_and_version_never_read_configuration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_RELAYS", "http://not-a-relay")
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "garbage-key-value")
    Path("buzz.toml").write_text("this is [not toml", encoding="utf-8")
    for argv in (("messages", "raw", "--help"), ("keys", "show", "--help")):
        assert buzz(capsys, *argv)[0] == 0
    code, out, _ = buzz(capsys, "--version")
    assert code == 0 and out.startswith("buzz ")  # asked-for data goes to stdout


def test_send_refused_everywhere_is_2_with_each_reason(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    async def empty_id(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", "", False, "blocked: not you"])

    async def limited(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "rate-limited: slow down"])

    a, b = bg.relay(empty_id), bg.relay(limited)
    code, _, err = buzz(
        capsys,
        "messages", "send", "--channel", "general", "--key", ALICE.hex,
        "--relay", a.url, "--relay", b.url, "--timeout", "3", "hello",
    )  # fmt: skip
    assert code == 2
    assert "blocked: not you" in err and "rate-limited: slow down" in err
    assert len(a.frames("EVENT")) == 1 and len(b.frames("EVENT")) == 1


async def test_closing_leaves_no_task_running() -> None:
    before = asyncio.all_tasks()

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["NOTICE", "hi"])  # and never EOSE

    async with scripted_relay(script) as relay:
        client = RelayClient(relay.url, timeout=0.3)
        await client.query({"kinds": [1]})
        await client.publish(NOTE)
        await client.close()
        await RelayPool([relay.url, refused_url()], timeout=0.3).query({"kinds": [1]})
    leftover = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
    assert leftover == []


_STALLED_DNS = """
import socket, sys, time
real = socket.getaddrinfo
def stalled(host, *args, **kwargs):
    if host == "stalled-dns.invalid":
        time.sleep(8)  # a DNS server that never answers in time
    return real(host, *args, **kwargs)
socket.getaddrinfo = stalled
from nostr_buzz.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_stalled_dns_lookup_costs_at_most_the_timeout() -> None:
    # Name resolution runs in a thread that cannot be cancelled; the command must not wait for
    # it at exit (docs/cli.md: --timeout bounds connecting plus querying).
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    start = clock()
    proc = subprocess.run(
        [sys.executable, "-c", _STALLED_DNS, "messages", "raw", "--event", NOTE.id,
         "--relay", "ws://stalled-dns.invalid:7447", "--timeout", "1"],
        capture_output=True, env=env, timeout=WAIT, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == b""
    assert clock() - start < 5


def test_relay_text_on_stderr_cannot_drive_the_terminal(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed="blocked: \x1b[2J\nbuzz: all good\r"))
    code, _, err = raw(capsys, NOTE.id, relay.url)
    assert code == 2 and "blocked:" in err
    assert "\x1b" not in err and "\r" not in err and "\nbuzz: all good" not in err


async def test_a_live_subscription_tells_when_its_req_is_in_place() -> None:
    # What a NIP-46 client waits for before it asks: relays keep no ephemeral event, so one
    # published before the REQ is in place would never reach the subscription.
    in_place = asyncio.Event()
    async with local_relay() as relay, RelayClient(relay.url, timeout=2) as client:
        live = client.subscribe({"kinds": [24133]}, on_eose=in_place.set)
        first = asyncio.create_task(anext(live))
        await asyncio.wait_for(in_place.wait(), 5)
        now = int(time.time())
        ephemeral = sign_event(SECRET, kind=24133, content="now", created_at=now)
        assert (await client.publish(ephemeral)).ok
        assert (await asyncio.wait_for(first, 5)).id == ephemeral.id
        await live.aclose()
