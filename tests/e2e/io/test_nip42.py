"""NIP-42 against LocalRelay in READ and WRITE modes (the AUTH event and relay URL comparison,
pure, are in tests/unit/nips/test_nip42.py)."""

from __future__ import annotations

import asyncio
import contextlib

import nostr_sdk
from msgspec.structs import replace

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.io.sdk_signer import SdkSigner
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relays import local_relay
from tests.support.signers import Forger

OTHER = SecretKey.generate()
NOW = 1_790_000_000


def note(content: str = "hello", secret: SecretKey = SECRET) -> Event:
    return sign_event(secret, kind=1, content=content, created_at=NOW)


# --- LocalRelay, READ mode: reading needs AUTH -------------------------------------------------


async def test_read_mode_query_succeeds_after_auth_with_the_configured_key() -> None:
    ev = note()
    async with local_relay(auth="read") as relay:
        async with RelayClient(relay.url, timeout=2) as writer:
            assert (await writer.publish(ev)).accepted  # writing is open in READ mode
        async with RelayClient(relay.url, secret=SECRET, timeout=2) as reader:
            result = await reader.query({"ids": [ev.id]})
            assert reader.authenticated
    assert result.finished and result.error is None
    assert [e.to_json() for e in result.events] == [ev.to_json()]


async def test_read_mode_without_a_key_is_reported_clearly() -> None:
    async with local_relay(auth="read") as relay, RelayClient(relay.url, timeout=2) as c:
        result = await c.query({"kinds": [1]})
    assert not result.finished
    assert (
        result.error == "closed: auth-required: you must auth (no key configured to authenticate)"
    )


# --- LocalRelay, WRITE mode: publishing needs AUTH ---------------------------------------------


async def test_write_mode_publish_succeeds_after_auth_with_the_configured_key() -> None:
    ev = note()
    async with local_relay(auth="write") as relay:
        async with RelayClient(relay.url, secret=SECRET, timeout=2) as c:
            verdict = await c.publish(ev)
            assert c.authenticated
        async with RelayClient(relay.url, timeout=2) as reader:  # reading is open in WRITE mode
            result = await reader.query({"ids": [ev.id]})
    assert verdict.accepted and verdict.prefix is None
    assert [e.id for e in result.events] == [ev.id]


async def test_write_mode_without_a_key_is_reported_clearly() -> None:
    async with local_relay(auth="write") as relay, RelayClient(relay.url, timeout=2) as c:
        verdict = await c.publish(note())
    assert not verdict.accepted and verdict.prefix == "auth-required:"
    assert verdict.message == "auth-required: you must auth (no key configured to authenticate)"


async def test_both_modes_one_auth_serves_publish_and_query() -> None:
    ev = note()
    async with (
        local_relay(auth="both") as relay,
        RelayClient(relay.url, secret=SECRET, timeout=2) as c,
    ):
        verdict = await c.publish(ev)
        result = await c.query({"ids": [ev.id]})
    assert verdict.accepted
    assert [e.id for e in result.events] == [ev.id]


async def test_key_refused_by_the_write_policy_is_reported_as_blocked() -> None:
    allowed = {SECRET.public_key.hex}
    async with local_relay(auth="write", allowed_authors=allowed) as relay:
        async with RelayClient(relay.url, secret=OTHER, timeout=2) as wrong:
            refused = await wrong.publish(note("from the wrong key", secret=OTHER))
            assert wrong.authenticated  # AUTH itself worked; the key is simply not allowed
        async with RelayClient(relay.url, secret=SECRET, timeout=2) as right:
            accepted = await right.publish(note("from the right key"))
    assert not refused.accepted and refused.prefix == "blocked:"
    assert refused.message == "blocked: this key may not write here"
    assert accepted.accepted


async def test_relay_url_mismatch_is_reported_clearly() -> None:
    # The relay knows itself as ws://127.0.0.1:PORT; reached as localhost, the AUTH event names
    # another URL and the relay refuses it.
    async with local_relay(auth="write") as relay:
        url = relay.url.replace("127.0.0.1", "localhost")
        async with RelayClient(url, secret=SECRET, timeout=2) as c:
            verdict = await c.publish(note())
            assert not c.authenticated
    assert not verdict.accepted and verdict.prefix == "auth-required:"
    assert "AUTH refused: auth-required: invalid authentication event" in verdict.message


async def test_relay_url_mismatch_on_read_is_reported_clearly() -> None:
    async with local_relay(auth="read") as relay:
        url = relay.url.replace("127.0.0.1", "localhost")
        async with RelayClient(url, secret=SECRET, timeout=2) as c:
            result = await c.query({"kinds": [1]})
    assert result.error is not None and result.error.startswith("closed: auth-required:")
    assert "AUTH refused: auth-required: invalid authentication event" in result.error


async def test_read_mode_live_subscription_authenticates_and_delivers() -> None:
    first, second = note("first"), sign_event(SECRET, kind=1, content="second", created_at=NOW + 1)
    async with local_relay(auth="read") as relay:
        async with RelayClient(relay.url, timeout=2) as writer:
            assert (await writer.publish(first)).accepted
        reader = RelayClient(relay.url, secret=SECRET, timeout=2)
        got: list[str] = []
        async with contextlib.aclosing(reader.subscribe({"authors": [SECRET.public_key.hex]})) as s:
            async with asyncio.timeout(3):
                async for ev in s:
                    got.append(ev.id)
                    if len(got) == 1:
                        async with RelayClient(relay.url, timeout=2) as writer:
                            assert (await writer.publish(second)).accepted
                    else:
                        break
        assert reader.authenticated
        await reader.close()
    assert got == [first.id, second.id]


# --- through a signer: the pool holds no secret key -------------------------------------------


async def test_a_nostr_sdk_signer_authenticates_a_pool_that_holds_no_secret_key() -> None:
    ev = note()
    signer = await SdkSigner.connect(nostr_sdk.Keys.parse(SECRET.hex))
    assert not isinstance(signer, LocalSigner) and signer.public_key == SECRET.public_key
    async with local_relay(auth="both") as relay:
        pool = RelayPool([relay.url], signer=signer, timeout=2)
        published = await pool.publish(ev)
        result = await pool.query({"ids": [ev.id]})
        async with RelayClient(relay.url, signer=signer, timeout=2) as client:
            assert (await client.query({"ids": [ev.id]})).events and client.authenticated
    assert published.ok and [e.id for e in result.events] == [ev.id]
    assert not any(isinstance(v, SecretKey) for v in vars(pool).values())


async def test_a_signer_that_signs_another_auth_event_is_refused_and_nothing_is_sent() -> None:
    forger = Forger(SECRET, lambda t: replace(t, tags=(("challenge", "chosen-by-the-signer"),)))
    async with local_relay(auth="both") as relay:
        async with RelayClient(relay.url, signer=forger, timeout=2) as c:
            verdict = await c.publish(note())
            assert not c.authenticated
        async with RelayClient(relay.url, secret=SECRET, timeout=2) as honest:
            stored = await honest.query({"authors": [SECRET.public_key.hex]})
    assert forger.forged == 1
    assert not verdict.accepted and verdict.prefix == "auth-required:"
    assert "the signer signed a different event (tags differ)" in verdict.message
    assert stored.finished and stored.events == []
