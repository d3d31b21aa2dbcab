"""Listening and replay: paging past a relay's cap, only admissible authors, clock skew both
ways, reconnects.  Real LocalRelays on 127.0.0.1 and the real demo agent."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.bot import replay as replay_module
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from tests.support.bot_world import WAIT, Recorder, World
from tests.support.relays import restart_relay, start_relay


def dated(world: World, author: SecretKey, content: str, created_at: int, channel: str) -> Event:
    tags = [["h", channel], ["p", world.agent.public_key.hex]]
    return sign_event(author, kind=9, content=content, tags=tags, created_at=created_at)


def answered(replies: list[Event], mentions: list[Event]) -> set[str]:
    roots = {tag[1] for r in replies for tag in r.tags if tag[0] == "e"}
    return {m.id for m in mentions} & roots


async def wait_answered(world: World, mentions: list[Event], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
        missing = {m.id for m in mentions} - answered(replies, mentions)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(missing)} of {len(mentions)} mentions unanswered")
        await asyncio.sleep(0.1)


async def test_query_back_pages_past_what_one_query_returns(world: World) -> None:
    base = int(time.time()) - 1_000
    events = [
        sign_event(world.human, kind=9, content=str(i), tags=[], created_at=base + i)
        for i in range(130)
    ]
    await world.publish(*events)
    pool = RelayPool([world.relay.url], timeout=3.0)
    found = await pool.query_back({"kinds": [9]}, since=base + 10, page=25)
    assert sorted(e.created_at for e in found.events) == list(range(base + 10, base + 130))
    assert found.per_relay[world.relay.url].error is None


async def test_query_back_finds_a_second_that_holds_more_than_a_page(world: World) -> None:
    second = int(time.time()) - 100
    crowded = [
        sign_event(
            world.human, kind=9, content=str(i), tags=[["h", f"c{i % 4}"]], created_at=second
        )
        for i in range(60)
    ]
    before = [
        sign_event(world.human, kind=9, content="b", tags=[["h", "c0"]], created_at=second - 5)
    ]
    await world.publish(*crowded, *before)
    pool = RelayPool([world.relay.url], timeout=3.0)
    found = await pool.query_back({"kinds": [9]}, since=second - 10, page=25)
    assert sorted(e.id for e in found.events) == sorted(e.id for e in [*crowded, *before])


async def test_mentions_sent_while_down_are_found_under_a_flood_of_strangers(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_module, "REPLAY_PAGE", 5)  # many pages, however small
    rec = Recorder()
    plugin = BuzzPlugin(world.config(), on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    await rec.kind("replay_completed")
    plugin.stop()
    await asyncio.wait_for(runner, WAIT)

    now = int(time.time())
    owner = [dated(world, world.owner, f"while down {i}", now - 20 + i, f"c{i}") for i in range(12)]
    strangers = [dated(world, SecretKey.generate(), f"spam {i}", now - 5, "c0") for i in range(300)]
    await world.publish(*owner, *strangers)
    rec2 = Recorder()
    plugin2 = BuzzPlugin(world.config(), on_diagnostic=rec2)
    runner2 = asyncio.create_task(plugin2.run())
    try:
        await wait_answered(world, owner, timeout=30)
    finally:
        plugin2.stop()
        await asyncio.wait_for(runner2, WAIT)
    assert rec2.of("event_rejected") == []  # no stranger was even asked for
    started = sorted(i for r in rec2.of("turn_started") for i in r.payload["triggeringEventIds"])
    assert started == sorted(e.id for e in owner)


async def test_skewed_clocks_both_ways_and_a_relay_restart(tmp_path: Path) -> None:
    relay = await start_relay(db_path=tmp_path / "lmdb")
    world = World(relay, *(SecretKey.generate() for _ in range(3)), tmp_path)
    rec = Recorder()
    plugin = BuzzPlugin(world.config(), on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    try:
        await rec.kind("replay_completed")
        now = int(time.time())
        behind = dated(world, world.owner, "my clock is 5 minutes slow", now - 300, "a")
        ahead = dated(world, world.owner, "my clock is a day fast", now + 86_400, "b")
        await world.publish(behind, ahead)
        await wait_answered(world, [behind, ahead])
        assert plugin.position is not None and plugin.position <= time.time()
        relay = await restart_relay(relay)
        world.relay = relay
        await rec.kind("replay_completed", 2)  # the reconnect asked for what was missed
        later = dated(world, world.owner, "after the reconnect", int(time.time()), "c")
        await world.publish(later)
        await wait_answered(world, [behind, ahead, later])
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
        relay.stop()
    started = [i for r in rec.of("turn_started") for i in r.payload["triggeringEventIds"]]
    assert sorted(started) == sorted([behind.id, ahead.id, later.id])  # each exactly once
