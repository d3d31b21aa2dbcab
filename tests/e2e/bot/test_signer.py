"""The bot with no secret key in its process: every signature, encryption, decryption and NIP-42
answer goes through ``PluginConfig.signer`` (here nostr-sdk's ``Keys`` behind
:class:`~nostr_buzz.io.sdk_signer.SdkSigner`: the test holds the key, the bot does not).

A real LocalRelay that requires AUTH for reading and writing, the real demo ACP agent; a kind 9
mention and a NIP-17 private message are answered.  A signer that signs something else than it
is asked is refused: the bot publishes nothing it did not mean.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import fields
from typing import Any

import nostr_sdk
from msgspec.structs import replace

from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.sdk_signer import SdkSigner
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from nostr_buzz.signer import EventTemplate, Signer
from tests.e2e.bot.test_private import running
from tests.support.bot_world import Recorder, World
from tests.support.relays import local_relay
from tests.support.signers import Forger


def keyless(world: World, signer: Signer) -> dict[str, Any]:
    """The config changes of a bot that holds no secret key, only ``signer``."""
    config = world.config(agent_secret=None, signer=signer)
    assert not any(isinstance(getattr(config, f.name), SecretKey) for f in fields(config))
    return {"agent_secret": None, "signer": signer}


@asynccontextmanager
async def auth_world(world: World) -> AsyncIterator[World]:
    """``world`` on a relay that answers nobody who has not authenticated (NIP-42)."""
    async with local_relay(auth="both") as relay:
        yield World(relay, world.owner, world.agent, world.human, world.tmp)


def as_owner(world: World) -> RelayPool:
    return RelayPool([world.relay.url], secret=world.owner, timeout=3.0)


async def test_a_bot_whose_key_is_in_a_signer_answers_a_mention_and_a_private_message(
    world: World,
) -> None:
    rec = Recorder()
    signer = await SdkSigner.connect(nostr_sdk.Keys.parse(world.agent.hex))
    agent, owner = world.agent.public_key.hex, world.owner.public_key.hex
    async with auth_world(world) as w:
        pool = as_owner(w)
        async with running(w, rec, **keyless(w, signer)):
            await rec.kind("dm_relays_published")  # signed through the signer, AUTH to write
            mention = w.say("hello from the channel")
            assert (await pool.publish(mention)).ok
            public = await rec.kind("reply_published")
            rumor = nip17.message(owner, [agent], "a private question", created_at=w.clock + 1)
            [(_, wrap), _] = nip17.wrap_for_room(w.owner, rumor, now=w.clock + 1)
            assert (await pool.publish(wrap)).ok
            private = await rec.kind("reply_published", 2)
            await rec.kind("metric_published", 2)
        answers = (await pool.query({"kinds": [9], "authors": [agent]})).events
        wraps = (await pool.query({"kinds": [1059], "#p": [owner]})).events
        metrics = (await pool.query({"kinds": [METRIC_KIND], "authors": [agent]})).events
    [answer] = answers
    assert answer.id == public.payload["eventId"] and mention.id in answer.tag_values("e")
    assert "hello from the channel" in answer.content
    [opened] = [nip59.open_gift_wrap(w.owner, x) for x in wraps if x.id == private.payload["wrap"]]
    assert opened.sender == agent and "a private question" in opened.rumor.content
    assert ["e", rumor.id] in map(list, opened.rumor.tags)
    payloads = [open_metric_event(w.owner, m) for m in metrics]
    assert sorted(p.triggering_event_ids for p in payloads) == sorted([(mention.id,), (rumor.id,)])
    reasons = {r.payload["reason"] for r in rec.of("event_rejected")}
    assert not {r for r in reasons if r.startswith("gift_wrap_")}  # every wrap opened


def forge_all_but_auth(asked: EventTemplate) -> EventTemplate:
    """Honest for NIP-42; every other event comes back with content of the forger's choosing."""
    return asked if asked.kind == 22242 else replace(asked, content="send 1 BTC to the forger")


async def test_a_signer_that_signs_another_reply_is_refused_and_nothing_is_published(
    world: World,
) -> None:
    rec = Recorder()
    forger = Forger(world.agent, forge_all_but_auth)
    async with auth_world(world) as w:
        pool = as_owner(w)
        async with running(w, rec, **keyless(w, forger)):
            failed = await rec.kind("dm_relays_failed")
            assert (await pool.publish(w.say("answer me"))).ok
            turn_failed = await rec.kind("turn_failed")
        published: Any = (await pool.query({"authors": [w.agent.public_key.hex]})).events
    assert forger.forged >= 2
    assert "the signer signed a different event (content differ)" in failed.payload["error"]
    assert "SignerError" in str(turn_failed.payload)
    assert published == [] and rec.of("reply_published") == []
