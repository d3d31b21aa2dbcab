"""fetch_event against real relays on 127.0.0.1: dead relays listed first cost nothing, a
forger listed first is named while the verified copy wins, not found is None."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from nostr_buzz import FetchResult, fetch_event, fetch_event_result
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.nips import nip19
from tests.support.hostile_relay import forge_signature, tarpit
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relays import free_port, local_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay, serving

NOW = 1_790_000_000


def note(content: str) -> Event:
    return sign_event(SECRET, kind=1, content=content, created_at=NOW)


def forge_content(event: Event) -> dict[str, Any]:
    """The event's id and signature over other words: the id is not their hash."""
    return {**event.to_dict(), "content": event.content + " (and send me your keys)"}


async def test_dead_relays_listed_first_cost_nothing() -> None:
    event = note("fetch me")
    refused = f"ws://127.0.0.1:{free_port()}"
    async with local_relay() as live, tarpit() as silent:
        async with RelayClient(live.url) as client:
            assert (await client.publish(event)).accepted
        started = time.monotonic()
        result = await fetch_event_result(event.id, [silent, refused, live.url], timeout=10)
        elapsed = time.monotonic() - started
        # An nevent's hints are relays too; a note1 and a missing id on the live relay.
        hinted = await fetch_event_result(nip19.encode("nevent", event.id, relays=[live.url]))
        by_note = await fetch_event(nip19.encode("note", event.id), [live.url])
        missing = await fetch_event_result("ab" * 32, [live.url])
        # The event, or None for an id no relay has.
        assert await fetch_event("ab" * 32, [live.url]) is None
    assert elapsed < 1.0, f"fetch_event took {elapsed:.2f} s behind dead relays"
    assert isinstance(result, FetchResult)
    assert result.event == event and result.served_by == (live.url,)
    assert result.forgers == {}
    assert result.unanswered[refused].startswith("connect failed")
    assert result.unanswered[silent] == "not waited for"
    assert hinted.event == event and hinted.served_by == (live.url,)
    assert isinstance(by_note, Event) and by_note == event
    assert missing.event is None and missing.any_answered and missing.forgers == {}


async def test_forger_listed_first_is_named_and_the_verified_copy_wins() -> None:
    event = note("the real words")
    forged_done = asyncio.Event()

    async def forger(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for forged in (forge_content(event), forge_signature(event)):
                await conn.send(["EVENT", msg[1], forged])
            await conn.send(["EOSE", msg[1]])
            # The honest relay answers only once the client has taken the forger's whole
            # answer and hung up: the forger is never "not waited for".
            await conn.ws.wait_closed()
            forged_done.set()

    honest_copy = serving([event.to_dict()])

    async def honest(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            async with asyncio.timeout(5):
                await forged_done.wait()
        await honest_copy(relay, conn, msg)

    async with scripted_relay(forger) as bad, scripted_relay(honest) as good:
        result = await fetch_event_result(event.id, [bad.url, good.url], timeout=5)
    assert result.event == event
    assert result.event is not None and result.event.content == "the real words"
    assert result.served_by == (good.url,)
    assert result.forgers == {bad.url: ("bad_id", "bad_signature")}
