"""A private conversation exported to a telemetry back end (a library bot's
``PluginConfig(telemetry=…)``, the tests' OTLP receiver): the turn is there, its counterpart,
its words and its event ids are not — even with ``export_content`` on; a public turn of the
same bot carries its words."""

from __future__ import annotations

from nostr_buzz.core.telemetry import Telemetry
from nostr_buzz.nips import nip59
from tests.e2e.bot.test_private import running, sdk_private_message
from tests.support.bot_world import Recorder, World
from tests.support.otlp_receiver import attributes_of, otlp_receiver
from tests.support.scripted_agent import Scripted


async def test_a_private_turn_is_exported_without_its_counterpart_or_its_words(
    world: World,
) -> None:
    owner = world.owner.public_key.hex
    question = "private: what is the launch code?"
    public = "public: how is the build?"
    rec = Recorder()
    with otlp_receiver() as receiver:
        telemetry = Telemetry(endpoint=receiver.url, export_content=True, metrics=False)
        async with running(world, rec, telemetry=telemetry):
            await rec.kind("dm_relays_published")
            wrap = sdk_private_message(world.owner, world.agent, question)
            await world.publish(wrap)
            await rec.kind("metric_published")
            await world.publish(world.say(public))
            await rec.kind("metric_published", 2)
        asked = nip59.open_gift_wrap(world.agent, wrap).rumor
        exported = str(receiver.received.traces)  # every byte the back end got, decoded
    spans = {
        attributes_of(s.attributes)["gen_ai.conversation.id"]: attributes_of(s.attributes)
        for s in receiver.received.spans()
    }
    assert len(spans) == 2 and "eng" in spans
    [private] = [c for c in spans if c != "eng"]
    assert private.startswith("dm-private-") and owner not in private
    for leaked in (owner, question, asked.id, wrap.id, "launch code"):
        assert leaked not in exported
    attrs = spans[private]
    assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs
    assert "nostr_buzz.event_ids" not in attrs
    assert attrs["nostr_buzz.outcome"] == "success"
    assert attrs["gen_ai.usage.input_tokens"] > 0
    # The public turn, with content exported, carries its words.
    assert public in spans["eng"]["gen_ai.input.messages"]
    assert "gen_ai.output.messages" in spans["eng"]


async def test_an_agent_echoing_a_private_message_into_its_requests_leaks_nothing(
    world: World,
) -> None:
    # Hostile: the agent repeats the instruction in a tool call's title and kind, then in the
    # error that fails its prompt.
    agent = Scripted(world.tmp, {"turns": [{"then": "echo"}]})
    question = "private: the vault code is 4412"
    rec = Recorder()
    with otlp_receiver() as receiver:
        telemetry = Telemetry(endpoint=receiver.url, export_content=True)
        changes = {"agent_args": agent.args, "telemetry": telemetry, "max_attempts": 1}
        async with running(world, rec, **changes):
            await rec.kind("dm_relays_published")
            await world.publish(sdk_private_message(world.owner, world.agent, question))
            await rec.kind("permission_decision")
            await rec.kind("metric_published")
        exported = str(receiver.received.traces) + str(receiver.received.metrics)
    [span] = receiver.received.spans()
    attrs = attributes_of(span.attributes)
    assert (attrs["nostr_buzz.outcome"], span.status.code) == ("failed", 2)
    [(name, event)] = [(e.name, attributes_of(e.attributes)) for e in span.events]
    assert name == "nostr_buzz.permission" and event["nostr_buzz.permission.tool_kind"] == "other"
    assert "gen_ai.tool.call.id" not in event
    for leaked in ("vault", "4412", world.owner.public_key.hex):
        assert leaked not in exported
