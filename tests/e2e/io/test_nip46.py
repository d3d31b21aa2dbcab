"""Nip46Signer against real bunkers on a real relay: NDK's NDKNip46Backend (an implementation
that is not ours) and a hostile bunker written in tests/support/bunkers.py.  The URI and
message codecs, pure, are in tests/unit/nips/test_nip46.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from nostr_buzz.event import Event
from nostr_buzz.io.nip46 import Nip46Signer
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.signer import SignerError, template
from tests.support.bunkers import APPROVAL_URL, HostileBunker, ndk_bunker
from tests.support.relays import local_relay


def note(content: str = "signed far away") -> object:
    return template(kind=1, content=content, tags=[["t", "nip46"]], created_at=int(time.time()))


async def test_ndk_bunker_signs_encrypts_and_decrypts_for_the_key_it_holds() -> None:
    user = SecretKey.generate()
    peer = SecretKey.generate()
    client = SecretKey.generate()  # kept, as a bot keeps it in its state directory
    async with local_relay() as relay, ndk_bunker([relay.url], user) as bunker:
        async with await Nip46Signer.connect(bunker.uri, timeout=10, client_secret=client) as s:
            assert s.public_key == user.public_key
            unsigned = note()
            event = await s.sign_event(unsigned)
            assert isinstance(event, Event) and event.pubkey == user.public_key.hex
            assert (event.kind, event.content, event.tags) == (1, unsigned.content, unsigned.tags)
            sealed = await s.nip44_encrypt(peer.public_key, "for the peer")
            conversation = nip44.conversation_key(peer, user.public_key)
            assert nip44.decrypt(sealed, conversation) == "for the peer"
            back = nip44.encrypt("for the user", conversation)
            assert await s.nip44_decrypt(peer.public_key, back) == "for the user"
            await s.ping()
            assert bunker.secret not in repr(s)
        assert bunker.answered("connect") == 1
        # The bunker remembers the client key: a restarted client that kept it is taken back
        # without the connection secret, which NIP-46 makes single-use...
        async with await Nip46Signer.connect(bunker.uri, timeout=10, client_secret=client) as s:
            assert (await s.sign_event(note("again"))).content == "again"
        # ...and a new client with the used secret is turned away.
        with pytest.raises(SignerError, match="refused connect") as caught:
            await Nip46Signer.connect(bunker.uri, timeout=10)
        assert bunker.secret not in str(caught.value)


async def test_a_bunker_that_stops_answering_is_a_signer_error_within_the_timeout() -> None:
    user = SecretKey.generate()
    async with local_relay() as relay, ndk_bunker([relay.url], user) as bunker:
        signer = await Nip46Signer.connect(bunker.uri, timeout=1.5)
        try:
            bunker.stop_answering()
            began = time.monotonic()
            with pytest.raises(SignerError) as caught:
                await signer.sign_event(note())
            took = time.monotonic() - began
        finally:
            await signer.close()
    assert 1.4 < took < 3.0
    message = str(caught.value)
    assert "did not answer sign_event within 1.5 s" in message and relay.url in message
    assert bunker.secret not in message


async def test_a_bunker_that_signs_a_different_event_is_refused() -> None:
    async with (
        local_relay() as relay,
        HostileBunker(relay.url, mode="tamper") as bunker,
        await Nip46Signer.connect(bunker.uri, timeout=5) as signer,
    ):
        # The user key is not the remote-signer key: get_public_key told us which.
        assert signer.public_key == bunker.user.public_key != bunker.remote.public_key
        with pytest.raises(SignerError, match="signed a different event"):
            await signer.sign_event(note())


async def test_answers_from_a_third_key_are_ignored() -> None:
    async with (
        local_relay() as relay,
        HostileBunker(relay.url, mode="impostor") as bunker,
        await Nip46Signer.connect(bunker.uri, timeout=5) as signer,
    ):
        unsigned = note()
        event = await signer.sign_event(unsigned)
        assert event.content == unsigned.content and event.pubkey == bunker.user.public_key.hex
    assert bunker.requests.count("sign_event") == 1
    assert bunker.forged_sent == len(bunker.requests)  # each request had a forged answer first


async def test_no_reachable_relay_is_a_signer_error_naming_it() -> None:
    async with local_relay() as relay:
        url = relay.url
    uri = f"bunker://{SecretKey.generate().public_key.hex}?relay={url}&secret=s3cr3t-value"
    with pytest.raises(SignerError) as caught:
        await asyncio.wait_for(Nip46Signer.connect(uri, timeout=1), 5)
    assert url in str(caught.value) and "s3cr3t-value" not in str(caught.value)


async def test_the_bunker_and_the_client_authenticate_to_a_relay_that_requires_nip42() -> None:
    # Reading only: NDK's bunker does not publish again after AUTH (tests/agents/nip46_bunker.mjs).
    user = SecretKey.generate()
    async with (
        local_relay(auth="read") as relay,
        ndk_bunker([relay.url], user) as bunker,
        await Nip46Signer.connect(bunker.uri, timeout=10) as signer,
    ):
        assert (await signer.sign_event(note("behind auth"))).pubkey == user.public_key.hex


async def test_an_auth_challenge_is_told_and_the_answer_that_follows_is_used() -> None:
    asked: list[str] = []
    async with (
        local_relay() as relay,
        HostileBunker(relay.url, mode="approval") as bunker,
        await Nip46Signer.connect(bunker.uri, timeout=5, on_auth_url=asked.append) as signer,
    ):
        assert (await signer.sign_event(note("approved"))).content == "approved"
    assert asked == [APPROVAL_URL]


async def test_a_refusal_is_a_signer_error_on_one_short_line() -> None:
    async with (
        local_relay() as relay,
        HostileBunker(relay.url, mode="refuse") as bunker,
        await Nip46Signer.connect(bunker.uri, timeout=5) as signer,
    ):
        with pytest.raises(SignerError, match="refused sign_event: no way") as caught:
            await signer.sign_event(note())
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
