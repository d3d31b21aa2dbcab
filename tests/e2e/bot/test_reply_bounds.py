"""A reply is bounded on the wire: a relay whose NIP-11 limits cannot hold a reasonable part is
skipped for the reply, not flooded with tiny parts; a relay that drops the connection on a
frame too large for it gets the reply once, in parts, not again on every reconnect.

Real relays on 127.0.0.1 (nostr-sdk's LocalRelay and scripted relays that play the small or
lying relay), a real bot (BuzzPlugin) and a real scripted ACP agent process.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nostr_buzz.bot.outputs import PART_FLOOR
from nostr_buzz.nips import nip10
from tests.support.bot_world import Recorder, World, serving
from tests.support.scripted_agent import USAGE, Scripted, chunk
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay


def kind_9_frames(relay: ScriptedRelay) -> list[dict[str, Any]]:
    return [m[1] for m in relay.frames("EVENT") if m[1].get("kind") == 9]


async def test_a_relay_announcing_a_one_byte_message_limit_is_skipped_not_flooded(
    world: World,
) -> None:
    async def lenient(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        # It announces a limit of one byte, yet takes whatever it is sent: every part counts.
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], True, ""])
        elif msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])

    text = "\n\n".join(f"paragraph {i}: " + "word " * 400 for i in range(10))  # ~20 kB
    agent = Scripted(world.tmp, {"turns": [{"updates": [chunk(text)], "usage": USAGE}]})
    document = {"name": "tiny", "limitation": {"max_message_length": 1}}
    rec = Recorder()
    async with (
        scripted_relay(lenient, document=document) as tiny,
        serving(
            world,
            rec,
            agent_args=agent.args,
            write_relays=(world.relay.url, tiny.url),
        ),
    ):
        asked = world.message(world.owner, "write me twenty kilobytes")
        await world.publish(asked)
        published = await rec.kind("reply_published")
        await rec.kind("metric_published")
        skipped = rec.of("reply_relay_skipped")
    flooded = kind_9_frames(tiny)
    assert len(flooded) == 0, f"{len(flooded)} parts of the reply went to the tiny relay"
    assert skipped and skipped[0].payload == {"relays": [tiny.url], "partFloor": PART_FLOOR}
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert [r.id for r in replies] == [published.payload["eventId"]]
    [reply] = replies
    assert reply.content == text and nip10.thread_ref(reply).root == asked.id
    assert published.payload["relays"] == [world.relay.url]


async def test_a_reply_that_makes_the_relay_drop_the_connection_is_sent_once_in_parts(
    world: World,
) -> None:
    """A relay that drops the connection on a frame over 100 kB (as nostr-sdk's relay does
    past a few MB) while the bot reads and writes there: the large answer is sent once, then
    its parts; never again on each reconnect."""
    big_sends: list[int] = []
    accepted: dict[str, str] = {}

    async def dropping(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])
        elif msg[0] == "EVENT":
            size = len(json.dumps(msg))
            if size > 100_000:
                big_sends.append(size)
                conn.ws.transport.abort()  # no OK, no close frame: the connection is gone
                return
            accepted[msg[1]["id"]] = msg[1]["content"] if msg[1]["kind"] == 9 else ""
            await conn.send(["OK", msg[1]["id"], True, ""])

    text = ("a long line of the answer " * 40 + "\n") * 2_000  # ~2 MB
    agent = Scripted(world.tmp, {"turns": [{"updates": [chunk(text)], "usage": USAGE}]})
    rec = Recorder()
    async with (
        scripted_relay(dropping) as small,
        serving(
            world,
            rec,
            agent_args=agent.args,
            read_relays=(world.relay.url, small.url),
            write_relays=(small.url,),
        ),
    ):
        await world.publish(world.message(world.owner, "tell me everything"))
        await rec.kind("turn_completed")

        def parts() -> list[str]:
            return [c for c in accepted.values() if c.startswith("[")]

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            parts() and len(parts()) == int(parts()[0].split("/", 1)[1].split("]", 1)[0])
        ):
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # reconnects would re-send it meanwhile
    print(f"large sends: {len(big_sends)}; parts accepted: {len(parts())}")
    assert len(big_sends) <= 1, f"the large reply was sent {len(big_sends)} times"
    total = int(parts()[0].split("/", 1)[1].split("]", 1)[0])
    assert sorted(p.split("\n", 1)[0] for p in parts()) == sorted(
        f"[{k}/{total}]" for k in range(1, total + 1)
    )
    assert total <= 20  # the capped reply (256 KiB) in parts of 16 KiB
    cut = rec.of("reply_cut")
    assert len(cut) == 1 and cut[0].payload["droppedBytes"] > 1_500_000
    assert rec.of("reply_split")


async def test_a_long_private_answer_reaches_its_reader_in_parts_that_fit(world: World) -> None:
    """A private answer larger than a relay takes in one gift wrap (nostr-sdk's relay: 64 KiB)
    goes as ordered kind 14 parts, each in wraps that fit, once."""
    from nostr_buzz.nips import nip17, nip59

    owner, bot = world.owner.public_key.hex, world.agent.public_key.hex
    text = "\n\n".join(f"paragraph {i}: " + "secret word " * 900 for i in range(10))  # ~110 kB
    agent = Scripted(world.tmp, {"turns": [{"updates": [chunk(text)], "usage": USAGE}]})
    rec = Recorder()
    async with serving(world, rec, agent_args=agent.args):
        await rec.kind("dm_relays_published")
        now = int(time.time())
        question = nip17.message(owner, [bot], "privately: everything", created_at=now)
        await world.publish(
            nip59.wrap_seal(nip59.seal(world.owner, bot, question, created_at=now), bot, now=now)
        )
        first = await rec.kind("reply_published")
        await rec.kind("metric_published")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            wraps = await world.query({"kinds": [1059], "#p": [owner]})
            rumors = [nip59.open_gift_wrap(world.owner, w).rumor for w in wraps]
            if rumors and len(rumors) >= int(rumors[0].content[1:].split("]", 1)[0].split("/")[1]):
                break
            await asyncio.sleep(0.2)
    assert first.payload["private"] is True
    ordered = sorted(rumors, key=lambda r: r.created_at)
    total = len(ordered)
    assert total >= 2
    assert [r.content.split("\n", 1)[0] for r in ordered] == [
        f"[{k}/{total}]" for k in range(1, total + 1)
    ]
    assert "".join(r.content.split("\n", 1)[1] for r in ordered) == text
    assert all(r.tag_values("e") == [question.id] for r in ordered)
    assert not rec.of("outbox_given_up")
