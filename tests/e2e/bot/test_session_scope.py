"""``[sessions] scope = "thread"``: each thread of a channel is its own queue key and agent
session, so threads run side by side and the permission rule follows each thread's own
speakers; ``channel`` (the default) keeps one session per channel, as before.

The agent is a real subprocess (tests/support/live_agent.py) that holds each prompt until two
are in flight at once, and asks for a tool named in the prompt; the relay is a real one.
"""

from __future__ import annotations

import json
import sys

import pytest

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.nips import nip10
from tests.support.bot_world import Recorder, World
from tests.support.events import chat
from tests.support.live_agent import LiveAgent


def replies_of(agent: LiveAgent) -> list[str]:
    return [r["sid"] for r in agent.records("session/prompt")]


@pytest.mark.parametrize(("scope", "said"), [("thread", "together"), ("channel", "alone")])
async def test_two_threads_of_one_channel_run_side_by_side_under_thread_scope(
    world: World, scope: str, said: str
) -> None:
    agent = LiveAgent(world.tmp, {"hold": 2, "hold_for": 3})
    rec = Recorder()
    config = world.config(agent_command=sys.executable, agent_args=agent.args, session_scope=scope)
    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        first, second = world.say("build the site"), world.say("write the notes")
        await bot.handle_event(first)
        await bot.handle_event(second)
        await rec.kind("turn_completed", 2, timeout=30)
        replies = await world.metrics(2)
    prompted = replies_of(agent)
    answers = [r.payload["outcome"] for r in rec.of("turn_completed")]
    assert answers == ["success", "success"]
    # Both prompts were in flight at the agent at once (it answered "together") only when
    # each thread has its own session; one channel session runs them one after the other.
    texts = [
        e.content
        for e in await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    ]
    assert sorted(t.rsplit(" ", 1)[1] for t in texts) == [said, said]
    assert len(set(prompted)) == (2 if scope == "thread" else 1)
    # The metric's channel is the real channel, whatever keys the session.
    assert [m.channel_id for m in replies] == ["eng", "eng"]
    assert {r.channel_id for r in rec.of("turn_started")} == {"eng"}


@pytest.mark.parametrize(("scope", "ran"), [("thread", True), ("channel", False)])
async def test_a_strangers_words_in_one_thread_leave_the_owners_tools_in_another_approved(
    world: World, scope: str, ran: bool
) -> None:
    agent = LiveAgent(world.tmp, {})
    rec = Recorder()
    allowlist = frozenset({world.human.public_key.hex})
    config = world.config(
        agent_command=sys.executable,
        agent_args=agent.args,
        session_scope=scope,
        gate="allowlist",
        allowlist=allowlist,
    )
    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        strangers = world.say("ASK:rm-everything please", author=world.human)
        await bot.handle_event(strangers)
        await rec.kind("turn_completed", 1)
        await bot.handle_event(world.say("ASK:make-test run the tests"))  # another thread
        await rec.kind("turn_completed", 2)
        # The owner in the stranger's own thread: that session heard the stranger.
        await bot.handle_event(world.say("ASK:git-push ship it", reply_to=strangers))
        await rec.kind("turn_completed", 3)
    tools = [(r["title"], r["ran"]) for r in agent.records("tool")]
    assert tools == [("rm-everything", False), ("make-test", ran), ("git-push", False)]
    human = world.human.public_key.hex
    said = [(r.payload["decision"], r.payload.get("actor")) for r in rec.of("permission_decision")]
    assert said[0] == ("rejected", human)
    assert said[1] == (("approved", None) if ran else ("rejected", human))
    assert said[2] == ("rejected", human)


async def test_the_owners_new_ends_a_threads_session_in_a_thread_and_every_one_at_the_top(
    world: World,
) -> None:
    agent = LiveAgent(world.tmp, {})
    rec = Recorder()
    config = world.config(
        agent_command=sys.executable, agent_args=agent.args, session_scope="thread"
    )
    replies: list[str] = []

    async def turn(bot: BuzzPlugin, text: str, reply_to: object = None) -> None:
        count = len(rec.of("turn_completed")) + 1
        await bot.handle_event(world.say(text, reply_to=reply_to))  # type: ignore[arg-type]
        await rec.kind("turn_completed", count)

    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        a, b = world.say("thread a"), world.say("thread b")
        for event in (a, b):
            await bot.handle_event(event)
        await rec.kind("turn_completed", 2)
        await bot.handle_event(world.say("!new", reply_to=a))  # in thread a: a's session ends
        await turn(bot, "a again", a)
        await turn(bot, "b again", b)
        await bot.handle_event(world.say("!new"))  # at the channel's top level: every thread
        await turn(bot, "b once more", b)
    texts = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    replies = [t.content for t in sorted(texts, key=lambda e: e.created_at)]
    numbered = sorted(r.split(" ")[2] for r in replies)
    assert numbered == ["#1", "#1", "#1", "#1", "#2"]  # only b's second turn continued
    assert len(agent.records("session/new")) == 4
    assert {r["sid"] for r in agent.records("session/new")} == {
        "sess-1",
        "sess-2",
        "sess-3",
        "sess-4",
    }


async def test_a_direct_threads_turn_names_the_real_channel_to_the_model_and_the_metric(
    world: World,
) -> None:
    # An author's public notes are a direct channel with threads: the key is {dm-…}/{root},
    # but the envelope, its manifest and the metric name the channel itself (so buzz audit
    # derives the same channel from the signed event).
    agent = LiveAgent(world.tmp, {})
    rec = Recorder()
    config = world.config(
        agent_command=sys.executable,
        agent_args=agent.args,
        session_scope="thread",
        kinds=(9, 14, 1),
    )
    note = chat(
        world.owner, world.clock, content="a note", channel=None, kind=1, mention=world.agent
    )
    direct = nip10.direct_channel(world.owner.public_key.hex)
    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        await bot.handle_event(note)
        await rec.kind("turn_completed")
        [metric] = await world.metrics(1)
    assert [r.payload["outcome"] for r in rec.of("turn_completed")] == ["success"]
    [delivery] = rec.of("prompt_context_delivery")
    assert f"{direct}/" not in json.dumps(delivery.payload)
    assert metric.channel_id == direct and delivery.channel_id == direct
