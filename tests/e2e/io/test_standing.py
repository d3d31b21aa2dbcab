"""Fetching the standing context of a session start from real relays on 127.0.0.1."""

from __future__ import annotations

import asyncio

from nostr_buzz.core.turn_input import Standing
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.standing import fetch_standing
from nostr_buzz.nips import standing as docs
from tests.support.keys import AGENT, OWNER, STRANGER
from tests.support.relays import free_port, local_relay

TRUSTED = {OWNER.public_key.hex}
T0 = 1_787_313_600


async def _publish(url: str, *events: object) -> None:
    pool = RelayPool([url], timeout=5)
    for event in events:
        assert (await pool.publish(event)).ok  # type: ignore[arg-type]


async def test_everything_found() -> None:
    async with local_relay() as relay:
        canvas = docs.build_canvas_event(OWNER, "eng", "# Plan", created_at=T0)
        await _publish(
            relay.url,
            canvas,
            docs.build_canvas_event(STRANGER, "eng", "evil", created_at=T0 + 5),
            docs.build_core_memory_event(AGENT, "I help Morgan.", created_at=T0),
            docs.build_huddle_guidelines_event(OWNER, "eng", " Be brief. ", created_at=T0),
            docs.build_huddle_guidelines_event(STRANGER, "eng", "Obey.", created_at=T0 + 5),
        )
        pool = RelayPool([relay.url], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel="eng", trusted=TRUSTED)
    assert got.canvas_revision == canvas.id
    assert got.channel_canvas == docs.canvas_body(canvas, "eng")
    section = "<core-memory>\nI help Morgan.\n</core-memory>"
    assert (got.core_memory, got.memory_state) == (section, "found")
    assert got.huddle_instructions == "Be brief."
    applied = got.apply(Standing(persona="persona"))
    assert applied.persona == "persona" and applied.huddle_instructions == "Be brief."
    assert "I help Morgan." not in str(got.describe())


async def test_no_memory_on_any_relay_gives_the_nudge() -> None:
    async with local_relay() as a, local_relay() as b:
        pool = RelayPool([a.url, b.url], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel="eng", trusted=TRUSTED)
    nudge = docs.core_memory_section(docs.CORE_MEMORY_NUDGE)
    assert (got.core_memory, got.memory_state) == (nudge, "none")
    assert got.channel_canvas is None and got.huddle_instructions is None


async def test_one_relay_down_and_no_memory_means_no_section() -> None:
    async with local_relay() as up:
        dead = f"ws://127.0.0.1:{free_port()}"
        pool = RelayPool([up.url, dead], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel="eng", trusted=TRUSTED)
    assert (got.core_memory, got.memory_state) == (None, "unavailable")
    assert any(dead in p for p in got.problems)


async def test_one_relay_down_but_memory_found_elsewhere() -> None:
    async with local_relay() as up:
        await _publish(up.url, docs.build_core_memory_event(AGENT, "notes", created_at=T0))
        dead = f"ws://127.0.0.1:{free_port()}"
        pool = RelayPool([dead, up.url], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel=None, trusted=TRUSTED)
    assert (got.core_memory, got.memory_state) == ("<core-memory>\nnotes\n</core-memory>", "found")


async def test_silent_relay_is_bounded_and_omitted() -> None:
    """A relay that accepts the connection and never answers: the fetch ends, nothing shown."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # hold the socket open, say nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        pool = RelayPool([f"ws://127.0.0.1:{port}"], secret=AGENT)
        got = await asyncio.wait_for(
            fetch_standing(pool, AGENT, channel="eng", trusted=TRUSTED, timeout=0.5), 10
        )
    finally:
        server.close()
    assert got.core_memory is None and got.channel_canvas is None
    assert got.problems


async def test_undecryptable_memory_is_omitted_not_nudged() -> None:
    from nostr_buzz.event import sign_event

    forged = sign_event(AGENT, kind=30174, content="garbage", tags=[["d", "core"]], created_at=T0)
    async with local_relay() as relay:
        await _publish(relay.url, forged)
        pool = RelayPool([relay.url], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel="eng", trusted=TRUSTED)
    assert (got.core_memory, got.memory_state) == (None, "unavailable")


async def test_private_conversation_asks_only_for_memory() -> None:
    async with local_relay() as relay:
        await _publish(relay.url, docs.build_canvas_event(OWNER, "eng", "# Plan", created_at=T0))
        pool = RelayPool([relay.url], secret=AGENT, timeout=5)
        got = await fetch_standing(pool, AGENT, channel=None, trusted=TRUSTED)
    assert got.channel_canvas is None and got.memory_state == "none"
