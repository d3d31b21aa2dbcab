"""What the agent's Nostr tools hand over, on the turn's span (a library bot with an in-process
agent calling ``AgentTurn.tools``, a real LocalRelay, the tests' OTLP receiver): one
``nostr_buzz.retrieval`` event for each event or channel state handed over, with the tool, the
outcome and the id (the channel state's hash as the metric's manifest names it), and one for
each typed failure (``not_found`` with the id asked for); never the content handed over, even
with ``export_content``.  In a private conversation the events name the tool and the outcome
only: no id of what the agent read there, no counterpart, no words."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from nostr_buzz import AgentReply, AgentTurn, BuzzPlugin
from nostr_buzz.core.telemetry import Telemetry
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip17, nip59
from tests.support.bot_world import Recorder, World
from tests.support.otlp_receiver import Receiver, attributes_of, otlp_receiver

Plan = Callable[[AgentTurn], list[tuple[str, dict[str, str]]]]
NOTES = "release notes: the rollout pauses at 40 percent"


class Reader:
    """Calls the bot's tools as ``plan`` says for each turn, keeps their answers, answers."""

    name = "test-reader"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.answers: list[dict[str, Any]] = []

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        for name, arguments in self.plan(turn):
            tool = turn.tool(name)
            assert tool is not None, name
            self.answers.append(await tool(**arguments))
        return AgentReply("read them")


def retrievals(receiver: Receiver) -> list[dict[str, Any]]:
    """The retrieval events of the one span the receiver got, in order."""
    [span] = receiver.received.spans()
    return [attributes_of(e.attributes) for e in span.events if e.name == "nostr_buzz.retrieval"]


async def published_notes(world: World) -> Event:
    """An event on the relay that no turn is about: the agent fetches it."""
    notes = world.message(world.human, NOTES, mention=False)
    await world.publish(notes)
    return notes


async def test_each_retrieval_and_each_failed_call_is_an_event_of_the_turns_span(
    world: World,
) -> None:
    notes, unknown = await published_notes(world), secrets.token_hex(32)
    agent = Reader(
        lambda turn: [
            ("fetch_event", {"id": notes.id}),
            ("fetch_event", {"id": unknown}),
            ("fetch_channel", {"channel": turn.channel}),
            ("fetch_event", {"id": "not an event id"}),
        ]
    )
    rec = Recorder()
    with otlp_receiver() as receiver:
        telemetry = Telemetry(endpoint=receiver.url, export_content=True, metrics=False)
        config = world.config(telemetry=telemetry)
        async with BuzzPlugin(config, on_diagnostic=rec, agent=agent) as plugin:
            await plugin.handle_event(world.message(world.owner, "what do the notes say?"))
            await rec.kind("metric_published")
        exported = str(receiver.received.traces)
    found, missing, channel, invalid = agent.answers
    assert found["event"]["content"] == NOTES and missing["error"] == "not_found"
    assert "canvas" in channel and invalid["error"] == "invalid_argument"
    events = retrievals(receiver)
    assert [(e["gen_ai.tool.name"], e["nostr_buzz.retrieval.outcome"]) for e in events] == [
        ("fetch_event", "found"),
        ("fetch_event", "not_found"),
        ("fetch_channel", "found"),
        ("fetch_event", "invalid_argument"),
    ]
    first, second, third, fourth = events
    assert first["nostr_buzz.retrieval.ref"] == notes.id
    assert (first["nostr_buzz.retrieval.layer"], first["nostr_buzz.retrieval.source"]) == (
        "retrieved_event",
        "relay_event",
    )
    assert second["nostr_buzz.retrieval.ref"] == unknown
    assert "nostr_buzz.retrieval.layer" not in second
    assert third["nostr_buzz.retrieval.layer"] == "retrieved_channel"
    assert "nostr_buzz.retrieval.ref" not in fourth  # the agent's own text is not an id
    # The ids are the layers' versions in the turn's metric: span and metric join.
    [metric] = await world.metrics()
    assert metric.context_manifest is not None
    versions = {
        (layer.layer, layer.version)
        for layer in metric.context_manifest.layers
        if layer.layer.startswith("retrieved_")
    }
    assert versions == {
        ("retrieved_event", notes.id),
        ("retrieved_channel", third["nostr_buzz.retrieval.ref"]),
    }
    # The turn's own words are exported (export_content); what the tools handed over is not.
    assert "what do the notes say?" in exported
    assert "rollout pauses" not in exported and "not an event id" not in exported


async def test_a_private_conversations_retrievals_name_no_id_no_counterpart_no_words(
    world: World,
) -> None:
    notes, unknown = await published_notes(world), secrets.token_hex(32)
    someone = SecretKey.generate().public_key.hex
    agent = Reader(
        lambda turn: [
            ("fetch_messages", {"channel": turn.channel}),  # its own conversation
            ("fetch_event", {"id": notes.id}),
            ("fetch_event", {"id": unknown}),
            ("fetch_messages", {"channel": nip10.private_channel(someone)}),
        ]
    )
    owner, question = world.owner.public_key.hex, "private: the vault code is 4412"
    rumor = nip17.message(
        owner, [world.agent.public_key.hex], question, created_at=int(time.time())
    )
    wrap = nip59.gift_wrap(world.owner, world.agent.public_key, rumor, now=int(time.time()))
    rec = Recorder()
    with otlp_receiver() as receiver:
        telemetry = Telemetry(endpoint=receiver.url, export_content=True, metrics=False)
        config = world.config(telemetry=telemetry)
        async with BuzzPlugin(config, on_diagnostic=rec, agent=agent) as plugin:
            await world.publish(wrap)  # on the relay too: the conversation is read from it
            await plugin.handle_event(wrap)
            await rec.kind("metric_published")
        exported = str(receiver.received.traces)
    conversation, found, missing, other = agent.answers
    assert question in [e["event"]["content"] for e in conversation["events"]]
    assert found["event"]["content"] == NOTES and missing["error"] == "not_found"
    assert other["error"] == "private"
    events = retrievals(receiver)
    told = [(e["gen_ai.tool.name"], e["nostr_buzz.retrieval.outcome"]) for e in events]
    assert told[-3:] == [
        ("fetch_event", "found"),
        ("fetch_event", "not_found"),
        ("fetch_messages", "private"),
    ]
    mine = events[:-3]  # one for each message of the conversation handed over
    assert len(mine) == len(conversation["events"]) and mine
    assert {e["nostr_buzz.retrieval.source"] for e in mine} == {"private_conversation"}
    assert all("nostr_buzz.retrieval.ref" not in e for e in events)
    handed = [e["event"]["id"] for e in conversation["events"]]
    for leaked in (owner, someone, question, "4412", rumor.id, wrap.id, *handed):
        assert leaked not in exported
    for leaked in (NOTES, notes.id, unknown):
        assert leaked not in exported
