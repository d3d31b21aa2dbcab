"""``permissions = "ask"``: the owner approves or denies each tool from any Nostr client.

A real LocalRelay, the bot subscribed to it, the scripted ACP agent (a real subprocess that
asks ``session/request_permission`` and runs the tool only when allowed), and nostr-sdk
(rust-nostr) as the owner's and a stranger's client: the question arrives as a NIP-17 private
message the owner's client opens, and the answers go back as private messages built by it.
"""

from __future__ import annotations

import asyncio
import re
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import nostr_sdk

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17
from tests.support.bot_world import WAIT, Recorder, World, serving
from tests.support.relays import free_port, start_relay
from tests.support.scripted_agent import USAGE, Scripted

ASK_TIMEOUT = 4.0
CODE = re.compile(r"!allow ([0-9A-Z]{6}) ")


def sdk_keys(secret: SecretKey) -> Any:
    return nostr_sdk.Keys.parse(secret.hex)


def running(
    world: World, rec: Recorder, agent: Scripted, **changes: Any
) -> AbstractAsyncContextManager[BuzzPlugin]:
    """The bot under ``permissions = "ask"`` (unless ``changes`` say otherwise) with the
    scripted agent and a short ``ask_timeout``."""
    changes = {"permissions": "ask", "ask_timeout": ASK_TIMEOUT, **changes}
    return serving(world, rec, agent_args=agent.args, **changes)


async def send_dm(world: World, sender: SecretKey, text: str) -> None:
    """A NIP-17 private message to the agent, built by nostr-sdk."""
    to = nostr_sdk.PublicKey.parse(world.agent.public_key.hex)
    wrap = nostr_sdk.nip17_make_private_msg(sdk_keys(sender), to, text)
    await world.publish(Event.from_json(wrap.as_json()))


async def questions(world: World) -> list[str]:
    """The private messages from the agent that the owner's client (nostr-sdk) opens, oldest
    first."""
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    found = []
    for wrap in await world.query({"kinds": [1059], "#p": [owner]}):
        sdk_wrap = nostr_sdk.Event.from_json(wrap.to_json())
        opened = nostr_sdk.UnwrappedGift.from_gift_wrap(sdk_keys(world.owner), sdk_wrap)
        if opened.sender().to_hex() == agent:
            rumor = opened.rumor()
            found.append((rumor.created_at().as_secs(), rumor.content()))
    return [text for _, text in sorted(found)]


async def code_of(world: World, rec: Recorder, count: int) -> tuple[str, str]:
    """The ``count``-th question (its text and code), once the owner's client has it."""
    asked = await rec.kind("permission_asked", count)
    assert asked.payload["sent"] is True  # a relay took the owner's copy before this record
    texts = await questions(world)
    assert len(texts) == count, texts
    match = CODE.search(texts[count - 1])
    assert match is not None, texts[count - 1]
    return texts[count - 1], match.group(1)


def decisions(rec: Recorder) -> list[tuple[str, str, str]]:
    return [
        (r.payload["title"], r.payload["decision"], r.payload["reason"])
        for r in rec.of("permission_decision")
    ]


def refusals(rec: Recorder) -> list[tuple[str, str]]:
    return [(r.payload["reason"], r.payload["verdict"]) for r in rec.of("approval_refused")]


async def test_the_owner_allows_one_tool_denies_another_and_silence_rejects_the_third(
    world: World,
) -> None:
    turns = [{"ask": f"touch {name}", "usage": USAGE} for name in ("a", "b", "c")]
    agent = Scripted(world.tmp, {"turns": turns})
    rec = Recorder()
    stranger = world.human
    async with running(world, rec, agent):
        await world.publish(world.say("please touch a"))
        text, first = await code_of(world, rec, 1)
        assert "Tool: touch a\nKind: execute\nChannel: eng\n" in text
        assert world.owner.public_key.bech32 in text  # who triggered the turn
        # A stranger who learnt the code cannot use it.
        await send_dm(world, stranger, f"!allow {first}")
        await rec.wait(lambda r: refusals(r), WAIT, "the stranger's !allow refused")
        assert refusals(rec) == [("not_owner", "allow")]
        assert rec.of("permission_decision") == []
        await send_dm(world, world.owner, f"!allow {first}")
        await rec.kind("turn_completed", 1)
        # The code worked once: used again (typed in lower case: a message of its own), it
        # decides nothing.
        await send_dm(world, world.owner, f"!allow {first.lower()}")
        await rec.wait(lambda r: len(refusals(r)) == 2, WAIT, "the reused code refused")

        await world.publish(world.say("please touch b"))
        _, second = await code_of(world, rec, 2)
        assert second != first
        await send_dm(world, world.owner, f"!deny {second}")
        await rec.kind("turn_completed", 2)

        await world.publish(world.say("please touch c"))
        await code_of(world, rec, 3)
        await rec.kind("turn_completed", 3, timeout=ASK_TIMEOUT + WAIT)
        metrics = await world.metrics(3)

    assert refusals(rec) == [("not_owner", "allow"), ("code_spent", "allow")]
    assert decisions(rec) == [
        ("touch a", "approved", "owner_allowed"),
        ("touch b", "rejected", "owner_denied"),
        ("touch c", "rejected", "ask_timeout"),
    ]
    assert agent.tools_run() == ["touch a"]
    # Each decision is counted in its turn's metric.
    counts = {m.turn_id: (m.permissions_approved, m.permissions_rejected) for m in metrics}
    turns_ids = [r.turn_id for r in rec.of("permission_decision")]
    assert [counts[t] for t in turns_ids] == [(1, 0), (0, 1), (0, 1)]
    # No code reaches the diagnostics.
    every = repr([r.payload for r in rec.records])
    assert first not in every and second not in every


async def test_under_owner_a_strangers_turn_asks_the_owner_who_answers_in_the_channel(
    world: World,
) -> None:
    agent = Scripted(world.tmp, {"turns": [{"ask": "make deploy", "usage": USAGE}]})
    rec = Recorder()
    human = world.human.public_key.hex
    allowlist = frozenset({human})
    async with running(
        world, rec, agent, permissions="owner", gate="allowlist", allowlist=allowlist
    ):
        await world.publish(world.say("deploy it please", author=world.human))
        text, code = await code_of(world, rec, 1)
        assert world.human.public_key.bech32 in text  # the stranger triggered it
        # The stranger answers in the channel, mentioning the agent: refused, never queued.
        await world.publish(world.say(f"!allow {code}", author=world.human))
        await rec.wait(lambda r: refusals(r), WAIT, "the stranger's !allow refused")
        await world.publish(world.say(f"!allow {code}"))  # the owner, in the channel
        await rec.kind("turn_completed", 1)
    [decision] = rec.of("permission_decision")
    said = decision.payload
    assert (said["decision"], said["reason"], said["part"], said["actor"]) == (
        "approved",
        "owner_allowed",
        "batch",
        human,
    )
    assert refusals(rec) == [("not_owner", "allow")]
    assert agent.tools_run() == ["make deploy"]
    assert len(rec.of("turn_started")) == 1  # no answer became a turn


async def test_the_question_reaches_every_dm_relay_of_the_owner_also_one_down_at_first(
    world: World,
) -> None:
    """The owner's kind 10050 names two relays, one of them down when the bot asks: the owner
    gets the question on the other at once, and the outbox keeps sending it to the one that
    was down until it takes it — counted on that relay itself."""
    port = free_port()
    down = f"ws://127.0.0.1:{port}"
    owner_dm = nip17.dm_relay_list(world.owner, [world.relay.url, down], created_at=world.clock)
    await world.publish(owner_dm)
    agent = Scripted(world.tmp, {"turns": [{"ask": "touch a", "usage": USAGE}]})
    rec = Recorder()
    # The relay that is down is one of the bot's own (a local address is used only then).
    async with running(world, rec, agent, write_relays=(world.relay.url, down)):
        await world.publish(world.say("please touch a"))
        await code_of(world, rec, 1)  # on the relay that is up, at once
        revived = await start_relay(port=port)
        try:
            owner = world.owner.public_key.hex
            deadline = time.monotonic() + 3 * WAIT
            while True:
                async with RelayPool([revived.url], timeout=5.0) as pool:
                    there = (await pool.query({"kinds": [1059], "#p": [owner]})).events
                if there or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert len(there) == 1  # the question, once
            await rec.kind("turn_completed", 1, timeout=ASK_TIMEOUT + WAIT)
        finally:
            revived.stop()
