"""RelayPool on relays as they are (docs/cli.md, "Kept connections"): the first good answer
then a grace period, one kept connection per relay (AUTH once, a cap on concurrent REQs, idle
ones closed) and the remembered health of a relay that failed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.io.connections import MAX_REQS_PER_CONNECTION
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from tests.e2e.io.test_pool import note, now
from tests.support.hostile_relay import hostile_relay
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relays import free_port, local_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay
from tests.support.waits import wait_for


def _authenticating(authed: set[Conn]) -> Any:
    """A relay that challenges each connection, refuses REQs and EVENTs until it has AUTH and
    then answers them (EOSE, OK); a REQ's sub id is remembered to check they are distinct."""

    async def on_connect(relay: ScriptedRelay, conn: Conn) -> None:
        await conn.send(["AUTH", "challenge"])

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "AUTH":
            authed.add(conn)
            await conn.send(["OK", msg[1]["id"], True, ""])
        elif msg[0] == "REQ":
            if conn not in authed:
                await conn.send(["CLOSED", msg[1], "auth-required: who are you"])
            else:
                await conn.send(["EOSE", msg[1]])
        elif msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], True, ""])

    return on_connect, script


async def test_a_pool_made_by_using_shares_the_connections_and_the_trust_of_its_own() -> None:
    ev = note("behind auth")
    async with local_relay(auth="read") as own, local_relay(auth="read") as theirs:
        # READ mode: writing is open, reading needs AUTH.
        assert (await RelayPool([own.url, theirs.url], timeout=3.0).publish(ev, min_ok=2)).ok
        async with RelayPool([own.url], secret=SECRET, timeout=3.0) as pool:
            with pytest.raises(RelayError):
                pool.using(["https://not-a-relay"])
            view = pool.using([own.url, theirs.url])
            first = await view.query({"ids": [ev.id]})
            assert set(pool.open_relays) == {own.url, theirs.url}  # kept by the pool
            # Trust given through a pool made by using is the pool's, for every such pool.
            view.trust([theirs.url])
            second = await pool.using([theirs.url]).query({"ids": [ev.id]})
            await view.close()  # only the pool that keeps the connections closes them
            assert set(pool.open_relays) == {own.url, theirs.url}
        assert pool.open_relays == [] and view.open_relays == []
    assert view.urls == [own.url, theirs.url] and pool.urls == [own.url]
    assert first.per_relay[own.url].finished  # the pool's signer answered its own relay
    untrusted = first.per_relay[theirs.url]
    assert not untrusted.finished  # someone else's relay: never answered NIP-42
    assert untrusted.error is not None and "authentication disabled" in untrusted.error
    assert second.per_relay[theirs.url].finished
    assert [e.id for e in second.events] == [ev.id]


async def test_a_kept_connection_serves_queries_and_publishes_with_one_auth() -> None:
    authed: set[Conn] = set()
    on_connect, script = _authenticating(authed)
    async with scripted_relay(script, on_connect) as relay:
        async with RelayPool([relay.url], secret=SECRET, timeout=3.0) as pool:
            results = await asyncio.gather(
                *(pool.query({"kinds": [1], "limit": i}) for i in (1, 2, 3))
            )
            published = await pool.publish(note("kept"))
            again = await pool.query({"kinds": [1]})
            assert pool.open_relays == [relay.url]
        assert pool.open_relays == []
    assert all(r.per_relay[relay.url].finished for r in [*results, again])
    assert published.ok
    assert relay.connections == 1
    assert len(relay.frames("AUTH")) == 1
    sub_ids = [frame[1] for frame in relay.frames("REQ")]
    assert len(set(sub_ids)) == len(sub_ids)  # concurrent REQs never share an id


async def test_a_connection_runs_a_capped_number_of_reqs_and_queues_the_rest() -> None:
    queries = MAX_REQS_PER_CONNECTION + 4
    async with (
        scripted_relay() as relay,  # never answers: every REQ waits for its timeout
        RelayPool([relay.url], timeout=0.5, grace=None) as pool,
    ):
        results = await asyncio.gather(*(pool.query({"limit": i}) for i in range(queries)))
    assert all(r.per_relay[relay.url].error is not None for r in results)
    kinds = [frame[0] for frame in relay.received]
    first_close = kinds.index("CLOSE")
    assert kinds[:first_close].count("REQ") == MAX_REQS_PER_CONNECTION
    assert kinds.count("REQ") == queries and relay.connections == 1


async def test_a_failed_relay_is_skipped_until_its_backoff_ends_and_named() -> None:
    refusing = f"ws://127.0.0.1:{free_port()}"
    told: list[tuple[str, str]] = []
    async with (
        local_relay() as good,
        hostile_relay("silent") as silent,
        RelayPool([good.url, silent.url, refusing], timeout=5.0) as pool,
    ):
        pool.on_backoff = lambda url, why, seconds: told.append((url, why))
        first = await pool.query({"kinds": [1]})
        start = now()
        second = await pool.query({"kinds": [1]})
        second_took = now() - start
    assert first.per_relay[refusing].error == "connect failed: connection refused"
    assert first.per_relay[silent.url].error is not None
    assert first.per_relay[silent.url].error.startswith("left behind")
    for url in (silent.url, refusing):
        error = second.per_relay[url].error
        assert error is not None and error.startswith("skipped: backing off for "), error
    # Nothing to wait for: the good relay's answer is the whole result.
    assert second_took < 0.25, second_took
    assert sorted(url for url, _ in told) == sorted([silent.url, refusing])


async def test_an_idle_connection_is_closed_and_reopened_on_next_use() -> None:
    async with (
        local_relay() as good,
        RelayPool([good.url], timeout=3.0, idle_timeout=0.2) as pool,
    ):
        await pool.query({"kinds": [1]})
        assert pool.open_relays == [good.url]
        await wait_for(lambda: not pool.open_relays, "the idle connection closed", 5.0)
        again = await pool.query({"kinds": [1]})
        assert again.per_relay[good.url].finished
        assert pool.open_relays == [good.url]


async def test_a_relay_that_goes_on_sending_after_close_is_cut_off() -> None:
    """The attacker keeps a kept connection busy: it answers no REQ, and floods each one once
    it is told to CLOSE it."""

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "CLOSE":
            for _ in range(200):
                await conn.send(["EVENT", msg[1], {"id": "0" * 64, "content": "x" * 1000}])

    cut: list[str] = []
    async with scripted_relay(script) as relay:
        client = RelayClient(
            relay.url, timeout=0.3, max_query_bytes=64 << 10, on_cut_off=lambda u, w: cut.append(w)
        )
        try:
            result = await client.query({"kinds": [1]})
            assert result.error == "timeout"
            await wait_for(lambda: cut, "the relay cut off")
            assert not client.connected
        finally:
            await client.close()
    assert cut == [
        "cut off: the relay sent more than 0.0625 MiB of events for a REQ it was told to CLOSE"
    ]
