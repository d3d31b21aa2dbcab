"""In-process agents end to end: a real LocalRelay and ``BuzzPlugin(config, agent=obj)``.

* A mention is answered with the object's text, and its metric carries the object's usage and
  model; the object got the compiled sections, the standing text and the queue channel; the
  envelope names the agent's own history tool when the configuration does.
* An agent reporting usage no metric can carry (2^60 tokens, a negative count, a cost of
  1e300 USD) still gets its answer posted and a valid metric, its counters unknown.
* A ``prompt`` that raises fails the turn like an ACP agent's error: retried (answered once),
  and a private conversation's ``turn_failed`` shows the exception's class only — an agent
  that puts the private text in its exception message cannot leak it into the diagnostics.
* The owner's ``!cancel`` cancels the task running ``prompt`` (no reply, a cancelled metric).
* Without ``steer``, a same-author message mid-turn cancels the turn and one new turn answers
  both; with ``steer`` taking it, the running turn answers it (its layer in the metric).
"""

from __future__ import annotations

import asyncio
import time

from nostr_buzz import AgentReply, AgentTurn, BuzzPlugin, Retrieval, TokenCounts
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.nips import nip17, nip59
from tests.support.bot_world import Recorder, World

USAGE = TokenCounts(input_tokens=120, output_tokens=30, total_tokens=150, cost_usd=0.002)


class Answerer:
    """Answers every turn; waits on ``gate`` first when one is set."""

    name = "test-answerer"

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.turns: list[AgentTurn] = []
        self.gate = gate
        self.cancelled = 0

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        self.turns.append(turn)
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return AgentReply(f"answer {len(self.turns)}", usage=USAGE, model="answer-model-1")


async def test_a_mention_is_answered_with_the_objects_text_and_metered_with_its_usage(
    world: World,
) -> None:
    rec, agent = Recorder(), Answerer()
    config = world.config(standing=Standing(base="You are a careful bot."), model="configured")
    async with BuzzPlugin(config, on_diagnostic=rec, agent=agent) as plugin:
        mention = world.message(world.owner, "please summarise the deploy")
        await plugin.handle_event(mention)
        await rec.kind("metric_published")
        await rec.kind("reply_published")
    [reply] = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert reply.content == "answer 1" and ("h", "eng") in reply.tags
    [metric] = await world.metrics()
    assert metric.turn == USAGE and metric.model == "answer-model-1"
    assert metric.harness == "test-answerer" and metric.outcome == "success"
    assert metric.triggering_event_ids == (mention.id,) and metric.turn_seq == 1
    assert metric.context_manifest is not None and metric.context_manifest.hash_matches()
    [turn] = agent.turns
    assert turn.system is not None and "You are a careful bot." in turn.system
    assert turn.channel == "eng"
    assert "please summarise the deploy" in turn.text
    assert "You are a careful bot." not in turn.text  # standing travels as system only
    # no shell, so no command: the hint names the bot's tools, which the turn carries
    assert "retrieve: the buzz tool fetch_messages(channel=eng)" in turn.text
    assert "buzz messages" not in turn.text
    assert [t.name for t in turn.tools] == [
        "fetch_event",
        "fetch_thread",
        "fetch_messages",
        "fetch_profile",
        "fetch_channel",
    ]
    assert metric.adapter_session_id == turn.session_id
    assert [r.payload["agentName"] for r in rec.of("agent_started")] == ["test-answerer"]


async def test_the_agents_own_history_tool_is_named_in_the_envelope(world: World) -> None:
    rec, agent = Recorder(), Answerer()
    config = world.config(retrieval=Retrieval.tool("read_history"))
    async with BuzzPlugin(config, on_diagnostic=rec, agent=agent) as plugin:
        await plugin.handle_event(world.message(world.owner, "what did I miss?"))
        await rec.kind("metric_published")
    [turn] = agent.turns
    assert "History: not loaded; retrieve: read_history(channel=eng)" in turn.text
    assert "buzz messages" not in turn.text
    [metric] = await world.metrics()
    assert metric.context_manifest is not None and metric.context_manifest.hash_matches()


async def test_absurd_usage_costs_the_counters_never_the_answer_or_its_metric(
    world: World,
) -> None:
    class Boastful:
        async def prompt(self, turn: AgentTurn) -> AgentReply:
            absurd = TokenCounts(2**60, -5, 2**60, 1e300, cache_read_tokens=2**60)
            return AgentReply("still here", usage=absurd)

    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec, agent=Boastful()) as plugin:
        await plugin.handle_event(world.message(world.owner, "how much did that cost?"))
        await rec.kind("metric_published")
        await rec.kind("reply_published")
    [metric] = await world.metrics()  # stored by the relay, opened by the owner
    assert metric.outcome == "success"
    assert metric.turn == TokenCounts(None, None, None, None, None, None)
    [reply] = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert reply.content == "still here"


class Leaky:
    """Raises once per message with the message's words in the exception, then answers."""

    def __init__(self) -> None:
        self.failed: set[str] = set()

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        if turn.text not in self.failed:
            self.failed.add(turn.text)
            words = "vault-4711-private" if "vault" in turn.text else "public-words here"
            raise ValueError(f"the model choked on {words}")
        return AgentReply("fine now")


async def test_a_raising_prompt_fails_the_turn_is_retried_and_a_private_one_shows_the_class(
    world: World,
) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec, agent=Leaky()) as plugin:
        public = world.message(world.owner, "public question")
        await plugin.handle_event(public)
        rumor = nip17.message(
            world.owner.public_key.hex,
            [world.agent.public_key.hex],
            "the vault code is 4711",
            created_at=int(time.time()),
        )
        wrap = nip59.gift_wrap(world.owner, world.agent.public_key, rumor, now=int(time.time()))
        await plugin.handle_event(wrap)
        await rec.kind("turn_failed", 2)
        # Each batch comes back after its backoff (5 s × jitter) and is answered.
        await rec.kind("reply_published", 2, timeout=15)
        await rec.kind("metric_queued", 4)
    private = f"dm-private-{world.owner.public_key.hex}"
    failures = {r.channel_id: r.payload["error"] for r in rec.of("turn_failed")}
    assert failures[private] == "ValueError"
    assert failures["eng"] == "ValueError: the model choked on public-words here"
    feed = (world.tmp / "state" / "diagnostics.jsonl").read_text(encoding="utf-8")
    assert "vault-4711" not in feed and "vault code" not in feed
    outcomes = sorted(r.payload["outcome"] for r in rec.of("turn_completed"))
    assert outcomes == ["failed", "failed", "success", "success"]
    metrics = await world.metrics(4)
    assert sorted(m.outcome for m in metrics) == ["failed", "failed", "success", "success"]
    assert all(m.turn is not None and m.turn.total_tokens is None for m in metrics)  # unknown


async def test_the_owners_cancel_cancels_the_task_running_prompt(world: World) -> None:
    rec, agent = Recorder(), Answerer(asyncio.Event())
    async with BuzzPlugin(world.config(), on_diagnostic=rec, agent=agent) as plugin:
        mention = world.message(world.owner, "a long job")
        await plugin.handle_event(mention)
        await rec.kind("prompt_context_delivery")
        await plugin.handle_event(world.message(world.owner, "!cancel"))
        done = await rec.kind("turn_completed")
        await rec.kind("metric_published")
    assert done.payload["outcome"] == "cancelled" and agent.cancelled == 1
    assert await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]}) == []
    [metric] = await world.metrics()
    assert (metric.outcome, metric.terminal_evidence) == ("cancelled", "cancel_response")


class Steerable(Answerer):
    """Takes every steer into the running prompt, then answers."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__(gate)
        self.steers: list[AgentTurn] = []

    async def steer(self, turn: AgentTurn) -> bool:
        self.steers.append(turn)
        assert self.gate is not None
        self.gate.set()
        return True


async def test_a_follow_up_mid_turn_is_merged_without_steer_and_injected_with_it(
    world: World,
) -> None:
    for index, agent in enumerate((Answerer(asyncio.Event()), Steerable(asyncio.Event()))):
        rec, config = Recorder(), world.config(state_dir=world.tmp / f"state-{index}")
        async with BuzzPlugin(config, on_diagnostic=rec, agent=agent) as plugin:
            first = world.message(world.owner, f"first part {index}")
            await plugin.handle_event(first)
            await rec.kind("prompt_context_delivery")
            follow = world.message(world.owner, "second part", reply_to=first)
            await plugin.handle_event(follow)
            steered = await rec.kind("prompt_context_steer")
            assert agent.gate is not None
            agent.gate.set()
            await rec.kind("metric_published", 1 if isinstance(agent, Steerable) else 2)
            await rec.kind("reply_published")
        if isinstance(agent, Steerable):
            assert steered.payload["deliveryOutcome"] == "injected"
            [steer] = agent.steers
            assert "second part" in steer.text and steer.system is None
            assert len(agent.turns) == 1 and steer.session_id == agent.turns[0].session_id
            [metric] = [m for m in await world.metrics(3) if m.triggering_event_ids == (first.id,)]
            assert metric.context_manifest is not None
            layers = [layer.layer for layer in metric.context_manifest.layers]
            assert "steer_delivery_contract" in layers
        else:  # cancelled, then one turn with both messages
            assert steered.payload["deliveryOutcome"] == "failed"
            outcomes = [r.payload["outcome"] for r in rec.of("turn_completed")]
            assert outcomes == ["cancelled", "success"]
            assert agent.cancelled == 1 and "second part" in agent.turns[1].text
            assert rec.started_with(follow.id) and "first part" in agent.turns[1].text
