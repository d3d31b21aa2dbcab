"""One private message must not make the bot write to the world (docs/bot.md, "Delivery").

Real LocalRelay, the real demo ACP agent, and scripted relays on 127.0.0.1 that count every
connection: a stranger's kind 14 naming 300 people, whose kind 10050s (and the stranger's
own) list hundreds of loopback relays, is answered to the stranger alone and opens no
connection to any relay the bot is not configured with; a room the owner is in gets the
answer, each member at no more than three of their DM relays; an answer that no relay takes is
given up after ``[outbox] give_up_after`` and never sent again.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from tests.e2e.bot.test_private import running
from tests.support.bot_world import Recorder, World
from tests.support.relays import free_port
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay


async def _accept(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
    """A relay that takes every event and has none."""
    if msg[0] == "EVENT":
        await conn.send(["OK", msg[1]["id"], True, ""])
    elif msg[0] == "REQ":
        await conn.send(["EOSE", msg[1]])


async def _refuse(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
    """A relay that refuses every event."""
    if msg[0] == "EVENT":
        await conn.send(["OK", msg[1]["id"], False, "blocked: not on this relay"])
    elif msg[0] == "REQ":
        await conn.send(["EOSE", msg[1]])


@asynccontextmanager
async def relays(count: int) -> AsyncIterator[list[ScriptedRelay]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(scripted_relay(_accept)) for _ in range(count)]


def wrapped_to(relay: ScriptedRelay, pubkey: str) -> list[dict[str, Any]]:
    """The gift wraps addressed to ``pubkey`` that ``relay`` was sent."""
    return [
        f[1]
        for f in relay.frames("EVENT")
        if f[1].get("kind") == nip59.GIFT_WRAP_KIND and ["p", pubkey] in f[1].get("tags", [])
    ]


def private_message(sender: SecretKey, agent: SecretKey, room: list[str], text: str) -> Event:
    """The wrap a client sends the agent for a kind 14 to ``room`` (the agent included)."""
    rumor = nip17.message(sender.public_key.hex, room, text, created_at=int(time.time()))
    return nip59.gift_wrap(sender, agent.public_key, rumor, now=int(time.time()))


def opened(secret: SecretKey, wraps: list[Event]) -> list[list[str]]:
    """The ``p`` values of each answer ``secret`` can open."""
    return [nip17.receivers(nip59.open_gift_wrap(secret, w).rumor) for w in wraps]


@pytest.mark.parametrize("gate", ["anyone", "allowlist"])
async def test_a_stranger_naming_300_people_gets_the_only_answer_and_no_stray_connection(
    world: World, gate: str
) -> None:
    stranger = SecretKey.generate()
    named = [SecretKey.generate() for _ in range(300)]
    agent = world.agent.public_key.hex
    async with relays(6) as attackers:
        # About 200 local URLs the bot is not configured with: six relays that count
        # connections, then closed ports and other local names.
        urls = [r.url for r in attackers] + [
            f"ws://{host}:{free_port()}"
            for host in ("127.0.0.1", "localhost", "127.0.0.2", "[::1]")
            for _ in range(48)
        ]
        urls += ["ws://10.0.0.1", "ws://192.168.1.1", "ws://169.254.169.254", "ws://2130706433"]
        now = int(time.time())
        await world.publish(
            *(nip17.dm_relay_list(k, urls, created_at=now) for k in [stranger, *named[:20]])
        )
        rec = Recorder()
        allow = frozenset({stranger.public_key.hex})
        async with running(world, rec, gate=gate, allowlist=allow):
            room = [agent, *(k.public_key.hex for k in named)]
            await world.publish(private_message(stranger, world.agent, room, "hello all 300"))
            replied = await rec.kind("reply_published")
            await rec.kind("metric_published")
        [narrowed] = rec.of("private_room_narrowed")
        assert narrowed.payload["reason"] == "owner_not_in_room"
        assert narrowed.payload["room"] == 302 and narrowed.payload["maxRecipients"] == 10
        # One answer, to the stranger, naming only the stranger.
        assert len(rec.of("reply_published")) == 1 and not rec.of("reply_failed")
        to_stranger = await world.query({"kinds": [1059], "#p": [stranger.public_key.hex]})
        assert opened(stranger, to_stranger) == [[stranger.public_key.hex]]
        assert nip59.open_gift_wrap(stranger, to_stranger[0]).rumor.id == replied.payload["eventId"]
        hexes = [k.public_key.hex for k in named]
        assert await world.query({"kinds": [1059], "#p": hexes}) == []
        # Not one connection to a relay the stranger's (or anyone's) kind 10050 listed.
        assert [r.connections for r in attackers] == [0] * 6


async def test_a_room_the_owner_is_in_is_answered_each_member_at_three_dm_relays(
    world: World,
) -> None:
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    alice, bob, carol = world.human, SecretKey.generate(), SecretKey.generate()
    async with relays(5) as configured, relays(2) as strays:
        # Alice's list: two loopback relays the bot does not know, then five it writes to.
        listed = [*(r.url for r in strays), *(r.url for r in configured)]
        await world.publish(nip17.dm_relay_list(alice, listed, created_at=int(time.time())))
        rec = Recorder()
        write = (world.relay.url, *(r.url for r in configured))
        async with running(world, rec, write_relays=write, max_recipients=3):
            room = [agent, alice.public_key.hex, bob.public_key.hex]
            await world.publish(private_message(world.owner, world.agent, room, "team sync"))
            await rec.kind("reply_published", 3)
            await rec.kind("metric_published")
            # One member too many for max_recipients = 3: the owner alone is answered.
            room.append(carol.public_key.hex)
            await world.publish(private_message(world.owner, world.agent, room, "bigger"))
            await rec.kind("private_room_narrowed")
            await rec.kind("reply_published", 4)
            await rec.kind("metric_published", 2)
        assert [r.payload["reason"] for r in rec.of("private_room_narrowed")] == ["room_too_large"]
        members = sorted([owner, alice.public_key.hex, bob.public_key.hex])
        # Alice's answer went to the first three relays of her list that the bot may use, and
        # nowhere else; the strays she listed first were never contacted.
        assert [len(wrapped_to(r, alice.public_key.hex)) for r in configured] == [1, 1, 1, 0, 0]
        assert [r.connections for r in strays] == [0, 0]
        assert await world.query({"kinds": [1059], "#p": [alice.public_key.hex]}) == []
        [to_alice] = [Event.from_dict(w) for w in wrapped_to(configured[0], alice.public_key.hex)]
        assert [sorted(p) for p in opened(alice, [to_alice])] == [members]
        # Bob has no kind 10050: the write relays, all of them.
        to_bob = await world.query({"kinds": [1059], "#p": [bob.public_key.hex]})
        assert [sorted(p) for p in opened(bob, to_bob)] == [members]
        assert all(len(wrapped_to(r, bob.public_key.hex)) == 1 for r in configured)
        # Carol, the member too many, got nothing; the owner got both answers.
        assert await world.query({"kinds": [1059], "#p": [carol.public_key.hex]}) == []
        to_owner = await world.query({"kinds": [1059], "#p": [owner]})
        assert sorted(len(p) for p in opened(world.owner, to_owner)) == [1, 3]


async def test_an_answer_no_relay_takes_is_given_up_after_the_bound_and_never_sent_again(
    world: World,
) -> None:
    rec = Recorder()
    async with scripted_relay(_refuse) as refusing:
        config = dict(write_relays=(refusing.url,), give_up_after=2.0, relay_timeout=1.0)
        async with running(world, rec, **config) as plugin:
            asked = world.say("status?")
            await world.publish(asked)
            await rec.kind("reply_failed")
            given_up = await rec.kind("outbox_given_up", 2)
            records = rec.of("outbox_given_up")
            assert plugin.store is not None and plugin.delivery is not None
            assert plugin.store.outbox.pending_count() == 0
            sent = len(refusing.frames("EVENT"))
            # A flush now (and the retry loop's) sends nothing: the entries are gone.
            assert await plugin.delivery.publisher.flush() == []
            assert len(refusing.frames("EVENT")) == sent
        assert given_up is records[1]
        kinds = sorted(r.payload["kind"] for r in records)
        assert kinds[0] == 9  # the reply (and the metric)
        for record in records:
            assert record.payload["giveUpAfter"] == 2.0
            assert "blocked: not on this relay" in record.payload["error"]
            assert record.payload["attempts"] >= 1
        reply_id = next(r.payload["eventId"] for r in records if r.payload["kind"] == 9)
        assert all(f[1]["id"] != reply_id for f in refusing.frames("EVENT")[sent:])
