"""The bot's own relay lists leave a host's alone (bot/own_lists.py, docs/bot.md "Its own relay
lists"): the agent's key is a host bot's, whose kind 10002 and 10050 (published first, with
nostr-sdk) name relays of its own.  Real relays on 127.0.0.1, the real demo agent.

- ``merge`` (the default): the host's lists keep every tag, and gain the bot's relays; a later
  start with fewer relays takes back only what the bot had added.
- ``publish``: a list the bot did not make stays as it is; ``leave``: nothing is published.
- A plugin fed by its host (``start`` and ``handle_event``, no ``run``) publishes nothing: it
  listens on no relay of its own.
- A write relay that does not answer (silent, or down): a newer list may be there, so none is
  published.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nostr_sdk
import pytest

from nostr_buzz.bot.plugin import BuzzPlugin
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip17, nip65
from tests.support.bot_world import Recorder, World, serving
from tests.support.cli import dead_url
from tests.support.hostile_relay import hostile_relay
from tests.support.relays import local_relay

LISTS = (nip65.KIND, nip17.DM_RELAYS_KIND)
HOST_RELAYS = [("r", "wss://host.example/"), ("r", "wss://inbox.example/", "read")]
HOST_DM = [("relay", "wss://host-dm.example/")]


async def host_publishes(world: World, relays: list[tuple[str, ...]]) -> dict[int, Event]:
    """The host's own lists, signed with the agent's key by nostr-sdk: ``relays`` (its kind
    10002, which also names the world's relay, for reading only) and its kind 10050."""
    keys = nostr_sdk.Keys.parse(world.agent.hex)
    at = nostr_sdk.Timestamp.from_secs(world.clock)
    built = {
        nip65.KIND: [*relays, ("r", world.relay.url, "read")],
        nip17.DM_RELAYS_KIND: HOST_DM,
    }
    lists = {}
    for kind, tags in built.items():
        sdk_tags = [nostr_sdk.Tag.parse(list(t)) for t in tags]
        builder = nostr_sdk.EventBuilder(nostr_sdk.Kind(kind), "").tags(sdk_tags)
        signed = builder.custom_created_at(at).finalize(keys)
        lists[kind] = Event.from_json(signed.as_json())
    await world.publish(*lists.values())
    return lists


async def current(world: World) -> dict[int, Event]:
    """The agent's newest list of each kind on the world's relay."""
    flt = {"authors": [world.agent.public_key.hex], "kinds": list(LISTS)}
    found = (await RelayPool([world.relay.url], timeout=3.0).query_state(flt)).events
    return {e.kind: e for e in found}


async def start_and_stop(world: World, **changes: Any) -> Recorder:
    """The bot listening (``run``) until its lists were dealt with."""
    rec = Recorder()
    async with serving(world, rec, **changes):
        await rec.wait(
            lambda r: all(
                any(x.kind.startswith(name) for x in r.records)
                for name in ("relay_list_", "dm_relays_")
            ),
            what="both lists dealt with",
        )
    return rec


def tags(event: Event) -> list[tuple[str, ...]]:
    return list(event.tags)


async def test_a_hosts_lists_survive_the_plugins_start_and_gain_its_relays(world: World) -> None:
    host = await host_publishes(world, HOST_RELAYS)
    async with local_relay() as other:
        both = (world.relay.url, other.url)
        rec = await start_and_stop(world, read_relays=both, write_relays=both)
        assert rec.of("relay_list_published") and rec.of("dm_relays_published")
        merged = await current(world)
        assert tags(merged[nip65.KIND]) == [
            *host[nip65.KIND].tags,
            ("r", world.relay.url, "write"),  # the host's names it for reading only
            ("r", other.url),
        ]
        assert tags(merged[nip17.DM_RELAYS_KIND]) == [
            *HOST_DM,
            ("relay", world.relay.url),
            ("relay", other.url),
        ]
        assert all(merged[k].created_at > host[k].created_at for k in LISTS)
    # Started again on the world's relay only: the other relay it had added is taken back.
    await start_and_stop(world)
    again = await current(world)
    assert tags(again[nip65.KIND]) == [*host[nip65.KIND].tags, ("r", world.relay.url, "write")]
    assert tags(again[nip17.DM_RELAYS_KIND]) == [*HOST_DM, ("relay", world.relay.url)]
    # And once more, unchanged: nothing is published, the lists are kept as they are.
    rec = await start_and_stop(world)
    assert [r.payload["reason"] for r in rec.of("relay_list_kept")] == ["unchanged"]
    assert (await current(world)) == again


async def test_publish_keeps_a_list_the_bot_did_not_make_and_leave_publishes_none(
    world: World,
) -> None:
    host = await host_publishes(world, HOST_RELAYS)
    rec = await start_and_stop(world, relay_lists="publish")
    assert [r.payload for r in rec.of("relay_list_kept")] == [
        {"reason": "not_the_bots", "eventId": host[nip65.KIND].id}
    ]
    assert [r.payload["reason"] for r in rec.of("dm_relays_kept")] == ["not_the_bots"]
    rec = await start_and_stop(world, relay_lists="leave")
    assert [r.payload["reason"] for r in rec.of("relay_list_kept")] == ["leave"]
    assert not rec.of("relay_list_published") and not rec.of("dm_relays_published")
    assert {k: e.id for k, e in (await current(world)).items()} == {
        k: e.id for k, e in host.items()
    }


async def test_publish_replaces_the_list_the_bot_made_itself(world: World) -> None:
    await start_and_stop(world, relay_lists="publish")  # none yet: its own is published
    first = await current(world)
    async with local_relay() as other:
        both = (world.relay.url, other.url)
        rec = await start_and_stop(world, relay_lists="publish", read_relays=both)
    assert rec.of("relay_list_published") and rec.of("dm_relays_published")
    replaced = await current(world)
    assert tags(replaced[nip17.DM_RELAYS_KIND]) == [
        ("relay", world.relay.url),
        ("relay", other.url),
    ]
    assert replaced[nip65.KIND].id != first[nip65.KIND].id


async def test_a_plugin_fed_by_its_host_publishes_no_list(world: World) -> None:
    host = await host_publishes(world, HOST_RELAYS)
    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec) as plugin:
        assert await plugin.handle_event(world.say("hello"))
        await rec.kind("reply_published")
    assert not [r for r in rec.records if "relay" in r.kind and "list" in r.kind]
    assert {k: e.id for k, e in (await current(world)).items()} == {
        k: e.id for k, e in host.items()
    }


@asynccontextmanager
async def unanswering(how: str) -> AsyncIterator[str]:
    """A write relay that gives no answer: ``silent`` accepts the WebSocket and says nothing;
    ``down`` is a port where nothing listens, so every connection is refused.  (A relay just
    stopped will not do: its listener may still accept for a moment.)"""
    if how == "silent":
        async with hostile_relay("silent") as relay:
            yield relay.url
        return
    yield dead_url()


@pytest.mark.parametrize("how", ["silent", "down"])
async def test_no_list_is_published_over_one_an_unanswering_relay_may_hold(
    world: World, how: str
) -> None:
    host = await host_publishes(world, HOST_RELAYS)
    async with unanswering(how) as url:
        rec = await start_and_stop(world, write_relays=(world.relay.url, url))
    failed = rec.of("relay_list_failed") + rec.of("dm_relays_failed")
    assert len(failed) == 2
    assert all("could not be read" in r.payload["error"] for r in failed)
    assert {k: e.id for k, e in (await current(world)).items()} == {
        k: e.id for k, e in host.items()
    }
