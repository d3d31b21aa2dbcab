"""The misuses a bot author makes, each a row: accepted and working, or refused where it is
given with an error naming the field; none fails open.

* Enumerated values misspelt (the gate, the permission rule, the in-flight policy): refused,
  naming the field and the choices.
* A public key as hex, ``npub1…`` or a ``PublicKey``, in every key argument: accepted and kept
  as one form, so the gate, the queue and the reply compare it with events' keys as they are; a
  key that is none of them (a number, garbage, a secret key where a public one is due) is
  refused, and the secret never appears in the error.
* A relay list, channels or kinds of the wrong type (one string, a number): refused, never read
  character by character (no relay named ``'w'``).
* A dict, or a nostr-sdk event, where a verified ``Event`` is due: refused with how to make one;
  the converter path works.
* A class where the agent's instance is due: refused when the bot is built; an async function:
  an agent.

Then on a real relay (LocalRelay on 127.0.0.1): a bot given its owner as an npub and its agent
as a plain async function answers the owner's mention once, with one metric whose token counts
the owner's report counts as known, and does not answer a stranger's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest

from nostr_buzz import (
    Admit,
    AgentModuleError,
    AgentReply,
    AgentTurn,
    BuzzError,
    BuzzPlugin,
    ConfigError,
    DispatchQueue,
    Gate,
    InvalidEvent,
    InvalidKey,
    PluginConfig,
    PublicKey,
    QueueError,
    Refuse,
    SecretKey,
    TokenCounts,
    TurnEvent,
    TurnInputError,
    build_reply,
    channel_info_of,
    decide,
    event_from_nostr_sdk,
    fetch_history,
    read_metrics,
    reply_tags,
    reply_template,
)
from nostr_buzz.interop import event_to_nostr_sdk
from nostr_buzz.io.pool import RelayPool
from tests.support.bot_world import Recorder, World
from tests.support.events import chat

AGENT = SecretKey(bytes([1]) * 32)
OWNER = SecretKey(bytes([2]) * 32)
FRIEND = SecretKey(bytes([3]) * 32)
STRANGER = SecretKey(bytes([4]) * 32)
RELAY = "ws://127.0.0.1:9"


def config(**changes: Any) -> PluginConfig:
    base: dict[str, Any] = {
        "agent_secret": AGENT,
        "owner": OWNER.public_key,
        "read_relays": (RELAY,),
        "write_relays": (RELAY,),
    }
    return PluginConfig(**{**base, **changes})


def gate(**changes: Any) -> Gate:
    base: dict[str, Any] = {
        "agent": AGENT.public_key.hex,
        "owner": OWNER.public_key.hex,
        "kinds": frozenset({9}),
        "channels": frozenset(),
        "mentions_required": True,
        "mode": "owner-only",
        "allowlist": frozenset(),
    }
    return Gate(**{**base, **changes})


def mention(author: SecretKey = OWNER) -> Any:
    return chat(author, int(time.time()), content="hello", channel="eng", mention=AGENT)


class ClassAgent:
    async def prompt(self, turn: AgentTurn) -> AgentReply:
        return AgentReply("never")


# -- refused where given, naming the field ----------------------------------------------------

REFUSED: dict[str, tuple[Callable[[], object], type[BuzzError], str]] = {
    "PluginConfig gate misspelt": (
        lambda: config(gate="owner_only"),
        ConfigError,
        "PluginConfig gate: expected one of owner-only, allowlist, anyone, got 'owner_only'",
    ),
    "Gate mode misspelt": (
        lambda: gate(mode="Anyone"),
        ConfigError,
        "Gate mode: expected one of owner-only, allowlist, anyone, got 'Anyone'",
    ),
    "permissions misspelt": (
        lambda: config(permissions="alow"),
        ConfigError,
        "PluginConfig permissions: expected one of owner, allow, reject, ask, got 'alow'",
    ),
    "in_flight misspelt": (
        lambda: config(in_flight="steeer"),
        ConfigError,
        "PluginConfig in_flight: expected one of queue, steer, interrupt, got 'steeer'",
    ),
    "read_relays as one string": (
        lambda: config(read_relays="wss://relay.example"),
        ConfigError,
        "PluginConfig read_relays: expected a collection of relay URLs, "
        "got the str 'wss://relay.example'",
    ),
    "write_relays as one string": (
        lambda: config(write_relays="wss://relay.example"),
        ConfigError,
        "PluginConfig write_relays: expected a collection of relay URLs",
    ),
    "a relay that is no relay URL": (
        lambda: config(read_relays=("https://relay.example",)),
        ConfigError,
        "PluginConfig read_relays[0]: relay URL must start with ws:// or wss://",
    ),
    "channels as one string": (
        lambda: config(channels="eng"),
        ConfigError,
        "PluginConfig channels: expected a collection of strings, got the str 'eng'",
    ),
    "the agent's arguments as one string": (
        lambda: config(agent_command="goose", agent_args="acp --verbose"),
        ConfigError,
        "PluginConfig agent_args: expected a collection of strings, got the str 'acp --verbose'",
    ),
    "the agent's environment with a secret as a number": (
        lambda: config(agent_env={"API_KEY": 12345678}),
        ConfigError,
        "PluginConfig agent_env: expected a mapping of str to str, got a dict",
    ),
    "kinds as one number": (
        lambda: config(kinds=9),
        ConfigError,
        "PluginConfig kinds: expected a collection of integers, got 9",
    ),
    "a kind as text": (
        lambda: config(kinds=(9, "14")),
        ConfigError,
        "PluginConfig kinds[1]: expected an integer 0–65535, got the str '14'",
    ),
    "Gate kinds as text": (
        lambda: gate(kinds=frozenset({"9"})),
        ConfigError,
        "Gate kinds[0]: expected an integer 0–65535, got the str '9'",
    ),
    "the owner as a number": (
        lambda: config(owner=42),
        ConfigError,
        "PluginConfig owner: expected a public key (hex, npub1… or PublicKey), got 42",
    ),
    "the owner as garbage": (
        lambda: config(owner="npub1notakey"),
        ConfigError,
        "PluginConfig owner: invalid npub",
    ),
    "the owner's secret key as the owner": (
        lambda: config(owner=OWNER.bech32),
        ConfigError,
        "PluginConfig owner: expected npub, got nsec",
    ),
    "an allowlist as one npub": (
        lambda: config(gate="allowlist", allowlist=FRIEND.public_key.bech32),
        ConfigError,
        "PluginConfig allowlist: expected a collection of public keys, got the str 'npub1",
    ),
    "a Gate allowlist key as a number": (
        lambda: gate(allowlist=frozenset({7})),
        ConfigError,
        "Gate allowlist[0]: expected a public key (hex, npub1… or PublicKey), got 7",
    ),
    "the queue's owner as bytes": (
        lambda: DispatchQueue(owner=OWNER.public_key.raw),
        QueueError,
        "DispatchQueue owner: expected a public key (hex, npub1… or PublicKey), got a bytes",
    ),
    "a reply's sender as an nsec": (
        lambda: reply_template(mention(), "hi", sender=AGENT.bech32, created_at=1),
        BuzzError,
        "reply_template sender: expected npub, got nsec",
    ),
    "agent_secret as a public key": (
        lambda: config(agent_secret=AGENT.public_key.bech32),
        ConfigError,
        "PluginConfig agent_secret: expected nsec, got npub",
    ),
    "decide given a dict": (
        lambda: decide(mention().to_dict(), gate(), set()),
        InvalidEvent,
        "decide: expected a verified nostr_buzz Event, got builtins.dict: "
        "read it with Event.from_dict(value)",
    ),
    "decide given a nostr-sdk event": (
        lambda: decide(event_to_nostr_sdk(mention()), gate(), set()),
        InvalidEvent,
        "decide: expected a verified nostr_buzz Event, got nostr_sdk",
    ),
    "reply_template given a dict": (
        lambda: reply_template(mention().to_dict(), "hi", sender=AGENT.public_key, created_at=1),
        InvalidEvent,
        "the event replied to: expected a verified nostr_buzz Event, got builtins.dict",
    ),
    "build_reply given a nostr-sdk event": (
        lambda: build_reply(AGENT, event_to_nostr_sdk(mention()), "hi", 1),
        InvalidEvent,
        "the event replied to: expected a verified nostr_buzz Event, got nostr_sdk",
    ),
    "TurnEvent given a dict": (
        lambda: TurnEvent(mention().to_dict()),
        TurnInputError,
        "TurnEvent event: expected a verified nostr_buzz Event, got builtins.dict",
    ),
    "the queue given a nostr-sdk event": (
        lambda: DispatchQueue().push(event_to_nostr_sdk(mention()), now=1.0),
        QueueError,
        "push: expected a verified nostr_buzz Event, got nostr_sdk",
    ),
    "a reply's tags for a sender given as a number": (
        lambda: reply_tags(mention(), sender=7),
        InvalidKey,
        "reply_tags sender must be a PublicKey, 64 hex characters or npub1…, not int",
    ),
    "a channel's trusted keys as one npub": (
        lambda: channel_info_of(mention(), trusted=OWNER.public_key.bech32),
        BuzzError,
        "channel_info_of trusted: expected a collection of public keys, got the str 'npub1",
    ),
    "channel_info_of given a dict": (
        lambda: channel_info_of(mention().to_dict()),
        InvalidEvent,
        "channel_info_of: expected a verified nostr_buzz Event, got builtins.dict",
    ),
    "a class as the agent": (
        lambda: BuzzPlugin(config(), agent=ClassAgent),
        AgentModuleError,
        "BuzzPlugin(agent=…): got the class ClassAgent itself, not an agent: give an instance "
        "(ClassAgent()), or an async function of an AgentTurn",
    ),
    "a sync function as the agent": (
        lambda: BuzzPlugin(config(), agent=lambda turn: "hi"),
        AgentModuleError,
        "BuzzPlugin(agent=…): function is not an in-process agent",
    ),
    "no agent at all": (
        lambda: BuzzPlugin(config()),
        ConfigError,
        "no agent: give PluginConfig agent_command (an ACP agent) or agent_module",
    ),
}


@pytest.mark.parametrize("row", list(REFUSED), ids=list(REFUSED))
def test_a_misuse_is_refused_where_it_is_given_naming_the_field(row: str) -> None:
    build, error, message = REFUSED[row]
    with pytest.raises(error) as refused:
        build()
    text = str(refused.value)
    assert message in text, text
    for secret in (AGENT, OWNER):  # a key in the wrong place is never repeated
        assert secret.bech32 not in text and secret.hex not in text
    assert "'w'" not in text


# -- accepted in every form, and working ------------------------------------------------------

FORMS: dict[str, Callable[[PublicKey], object]] = {
    "hex": lambda key: key.hex,
    "HEX": lambda key: key.hex.upper(),
    "npub": lambda key: key.bech32,
    "PublicKey": lambda key: key,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_key_argument_takes_hex_npub_or_a_public_key_alike(form: str) -> None:
    given = FORMS[form]
    cfg = config(
        owner=given(OWNER.public_key),
        gate="allowlist",
        allowlist=[given(FRIEND.public_key)],
        agents={given(STRANGER.public_key)},
        trusted=(given(FRIEND.public_key),),
        read_relays=[RELAY],  # a list is a collection too
    )
    assert cfg.owner == OWNER.public_key and cfg.read_relays == (RELAY,)
    assert cfg.allowlist == cfg.trusted == {FRIEND.public_key.hex}
    assert cfg.agents == {STRANGER.public_key.hex}
    # The gate compares as hex: the owner's mention is admitted, a stranger's refused.
    g = gate(
        agent=given(AGENT.public_key),
        owner=given(OWNER.public_key),
        mode="allowlist",
        allowlist=frozenset({given(FRIEND.public_key)}),
    )
    assert decide(mention(OWNER), g, set()) == Admit("eng")
    assert decide(mention(FRIEND), g, set()) == Admit("eng")
    assert decide(mention(STRANGER), g, set()) == Refuse("author_not_allowed")
    # The queue knows the owner: a full channel drops the stranger's event, never the owner's.
    queue = DispatchQueue(max_pending=1, owner=given(OWNER.public_key))
    owners = mention(OWNER)
    strangers = mention(STRANGER)
    assert queue.push(owners, now=1.0).accepted
    assert queue.push(strangers, now=2.0).dropped == [strangers.id]
    assert queue.pending("eng") == 1
    # The reply's sender is never tagged in its own reply, whatever its form.
    reply = reply_template(owners, "hi", sender=given(AGENT.public_key), created_at=5)
    assert ["p", AGENT.public_key.hex] not in [list(t) for t in reply.tags]
    to_self = chat(AGENT, 5, content="note to self", channel="eng")
    assert reply_tags(to_self, sender=given(AGENT.public_key)) == reply_tags(
        to_self, sender=AGENT.public_key.hex
    )
    assert ["p", AGENT.public_key.hex] not in reply_tags(to_self, sender=given(AGENT.public_key))


def test_a_nostr_sdk_event_through_the_converter_is_decided_as_any_event() -> None:
    event = mention()
    assert decide(event_from_nostr_sdk(event_to_nostr_sdk(event)), gate(), set()) == Admit("eng")


# -- on a real relay --------------------------------------------------------------------------


@pytest.mark.parametrize("form", list(FORMS))
async def test_a_direct_conversations_history_is_the_same_for_every_form_of_the_agents_key(
    world: World, form: str
) -> None:
    earlier = world.message(world.owner, "first", channel=None)
    await world.publish(earlier)
    latest = world.message(world.owner, "second", channel=None)
    pool = RelayPool([world.relay.url], timeout=5)
    history = await fetch_history(pool, latest, agent=FORMS[form](world.agent.public_key))
    assert [e.id for e in history.messages] == [earlier.id]


async def test_an_npub_owner_and_a_function_agent_answer_the_owner_only_with_a_known_usage(
    world: World,
) -> None:
    turns: list[AgentTurn] = []

    async def answer(turn: AgentTurn) -> AgentReply:
        turns.append(turn)
        return AgentReply("answered", usage=TokenCounts(input_tokens=12, output_tokens=3))

    rec = Recorder()
    cfg = dataclasses.replace(
        world.config(),
        owner=world.owner.public_key.bech32,
        agent_command=None,
        agent_args=(),
        read_relays=[world.relay.url],
    )
    async with BuzzPlugin(cfg, on_diagnostic=rec, agent=answer) as plugin:
        stranger = world.message(world.human, "answer me too")
        owners = world.message(world.owner, "what is new?")
        await plugin.handle_event(stranger)
        await plugin.handle_event(owners)
        await rec.kind("metric_published")
        await asyncio.sleep(0.3)  # room for a wrong second turn to show
    assert len(turns) == 1 and "what is new?" in turns[0].text
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert [r.content for r in replies] == ["answered"]
    [metric] = await world.metrics()
    assert metric.triggering_event_ids == (owners.id,)
    report, _ = await read_metrics(world.owner, [world.relay.url], timeout=5)
    [total] = report.totals
    assert (total.turns, total.unknown_turns, total.input_tokens) == (1, 0, 12)
