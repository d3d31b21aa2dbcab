"""The bench's WAN (tests/support/wan.py) is what it says: every byte 20 ms late each way, a
certificate the client must verify, connections counted, and bad relays that misbehave as
named.  Without these the WAN row of ``make bench`` would measure something else."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from nostr_buzz import sign_event
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import SecretKey
from tests.support.relays import local_relay
from tests.support.wan import make_ca, wan


async def test_a_relay_across_the_wan_costs_a_round_trip_per_exchange(tmp_path: Path) -> None:
    secret = SecretKey.generate()
    async with local_relay() as relay, wan(tmp_path) as net:
        site = await net.relay(relay.url)
        for url in (site.wss, site.ws):
            async with RelayClient(url, timeout=5.0) as client:
                assert await client.connect() is None
                event = sign_event(secret, kind=1, content="x", tags=[], created_at=1)
                started = time.perf_counter()
                assert (await client.publish(event)).accepted
                assert time.perf_counter() - started >= 0.040  # there and back, 20 ms each
                started = time.perf_counter()
                result = await client.query({"ids": [event.id]})
                assert result.finished and [e.id for e in result.events] == [event.id]
                assert time.perf_counter() - started >= 0.040
            assert net.accepted([url]) == 1  # one connection for all of it
        assert net.accepted([site.wss, site.ws]) == 2


async def test_the_certificate_is_verified_and_only_the_test_ca_vouches(tmp_path: Path) -> None:
    async with local_relay() as relay, wan(tmp_path) as net:
        site = await net.relay(relay.url)
        (tmp_path / "other").mkdir()
        other_ca, _ = make_ca(tmp_path / "other")  # another CA vouches for nothing here
        with pytest.raises(ssl.SSLCertVerificationError):
            async with connect(site.wss, ssl=ssl.create_default_context(cafile=other_ca)):
                pass
        named = ssl.create_default_context(cafile=tmp_path / "ca.pem")
        async with connect(site.wss.replace("127.0.0.1", "localhost"), ssl=named, open_timeout=5):
            pass
    assert not list(tmp_path.glob("*key*")) and not (tmp_path / "server.pem").exists()


async def test_the_bad_relays_refuse_stay_silent_and_answer_late(tmp_path: Path) -> None:
    async with wan(tmp_path) as net:
        refusing = await net.refusing()
        silent = await net.silent_relay()
        slow = await net.slow_relay(after=0.3)
        async with RelayClient(refusing.wss, timeout=2.0) as client:
            assert await client.connect() is not None
        assert net.accepted([refusing.wss]) >= 1  # it was reached, and closed on the client
        async with RelayClient(silent.wss, timeout=0.5) as client:
            assert await client.connect() is None  # the handshake completes
            result = await client.query({"kinds": [1]})
            assert not result.finished and result.error is not None  # no EOSE ever
        async with RelayClient(slow.wss, timeout=5.0) as client:
            assert await client.connect() is None
            started = time.perf_counter()
            assert (await client.query({"kinds": [1]})).finished
            assert time.perf_counter() - started >= 0.3
