"""The bot on relays as they are (docs/cli.md, "Kept connections"): a silent and a refusing
read relay cost a turn at most the grace period (a read of state waits for the silent one once,
then names it as unconfirmed), and the bot's relay connections are kept from turn to turn.
Real LocalRelay, the real demo agent, real misbehaving relays on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.keys import SecretKey
from tests.support.bot_world import WAIT, Recorder, World
from tests.support.relays import counting_proxy, free_port
from tests.support.scripted_relay import scripted_relay


async def _turn_times(world: World, config: PluginConfig) -> tuple[float, float, Recorder]:
    """Seconds from publishing to the reply: a top-level mention (a new session), then a
    reply in its thread (history, profiles, channel metadata, standing context)."""
    rec = Recorder()
    plugin = BuzzPlugin(config, on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    times = []
    try:
        root = world.say("start a thread")
        for count, message in enumerate((root, world.say("a follow-up", reply_to=root)), 1):
            began = time.monotonic()
            await world.publish(message)
            await rec.kind("reply_published", count)
            times.append(time.monotonic() - began)
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
    return times[0], times[1], rec


async def test_a_silent_and_a_refusing_read_relay_cost_a_thread_reply_under_a_second(
    world: World,
) -> None:
    async with scripted_relay() as silent:  # accepts the connection, never answers
        refusing = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
        plain = replace(world, agent=SecretKey.generate(), tmp=world.tmp / "plain")
        _, plain_thread, _ = await _turn_times(plain, plain.config(relay_timeout=5.0))
        hostile = replace(world, agent=SecretKey.generate(), tmp=world.tmp / "hostile")
        relays = (world.relay.url, silent.url, refusing)
        config = hostile.config(relay_timeout=5.0, read_relays=relays)
        _, hostile_thread, rec = await _turn_times(hostile, config)
    assert hostile_thread - plain_thread < 1.0, (plain_thread, hostile_thread)
    # Each is named in a diagnostic, and skipped while it backs off.
    backing_off: dict[str, list[str]] = {}
    for record in rec.of("relay_backing_off"):
        backing_off.setdefault(record.payload["relay"], []).append(record.payload["reason"])
    assert backing_off[silent.url][0].startswith("left behind: no answer within 0.3 s")
    assert "connection refused" in backing_off[refusing][0]
    # A read of state (a relay list, the standing context) waited for the silent relay once,
    # never again: later reads name it as unconfirmed instead.
    assert backing_off[silent.url].count("timeout") == 1
    unconfirmed = [r.payload["relays"] for r in rec.of("state_unconfirmed")]
    assert len(unconfirmed) >= 2 and all(silent.url in relays for relays in unconfirmed)
    # The silent relay was asked (its REQs are recorded), never waited for.
    assert silent.frames("REQ")


async def test_twenty_turns_after_warm_up_open_no_new_relay_connection(world: World) -> None:
    async with counting_proxy(world.relay.url) as proxy:
        config = world.config(read_relays=(proxy.url,), write_relays=(proxy.url,))
        rec = Recorder()
        plugin = BuzzPlugin(config, on_diagnostic=rec)
        runner = asyncio.create_task(plugin.run())
        try:
            root = world.say("warm up")
            await world.publish(root)
            await rec.kind("reply_published")
            await rec.kind("metric_published")
            warm = proxy.accepted
            for turn in range(20):
                await world.publish(world.say(f"turn {turn}", reply_to=root))
                await rec.kind("reply_published", turn + 2)
            await rec.kind("metric_published", 21)
            assert proxy.accepted == warm, (warm, proxy.accepted)
        finally:
            plugin.stop()
            await asyncio.wait_for(runner, WAIT)
    assert warm == 1  # one connection, shared by subscription, queries and publishes
