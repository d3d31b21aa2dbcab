"""The bot reachable from any Nostr client, each message answered in its own kind.

A real LocalRelay, the real demo ACP agent, nostr-sdk (rust-nostr) as the independent client:
NIP-17 private messages both ways, forged seals refused before the agent, kind 1 notes answered
with NIP-10 replies, NIP-22 comments with comments, and no plaintext of a private message on
the relay.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nostr_sdk

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.bot.intake import Refuse, decide, gate_of
from nostr_buzz.bot.replay import listen_filters
from nostr_buzz.config import ConfigSources
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip17, nip44, nip59
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from tests.support.bot_world import WAIT, Recorder, World, serving
from tests.support.relays import restart_relay, start_relay


def sdk_keys(secret: SecretKey) -> Any:
    return nostr_sdk.Keys.parse(secret.hex)


def sdk_event(event: Event) -> Any:
    return nostr_sdk.Event.from_json(event.to_json())


running = serving


def sdk_private_message(sender: SecretKey, to: SecretKey, text: str) -> Event:
    """What a NIP-17 client (here rust-nostr) publishes: the gift wrap addressed to ``to``."""
    wrap = nostr_sdk.nip17_make_private_msg(
        sdk_keys(sender), nostr_sdk.PublicKey.parse(to.public_key.hex), text
    )
    return Event.from_json(wrap.as_json())


def sdk_open(secret: SecretKey, wraps: list[Event]) -> list[Any]:
    """Every wrap nostr-sdk opens with ``secret``, as (sender hex, rumor)."""
    out = []
    for wrap in wraps:
        unwrapped = nostr_sdk.UnwrappedGift.from_gift_wrap(sdk_keys(secret), sdk_event(wrap))
        out.append((unwrapped.sender().to_hex(), unwrapped.rumor()))
    return out


async def test_a_private_message_from_nostr_sdk_is_answered_privately_no_plaintext_on_the_relay(
    world: World,
) -> None:
    rec = Recorder()
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    question = "private: what is the launch code?"
    async with running(world, rec):
        await rec.kind("dm_relays_published")
        wrap = sdk_private_message(world.owner, world.agent, question)
        await world.publish(wrap)
        replied = await rec.kind("reply_published")
        await rec.kind("metric_published")
    asked = nip59.open_gift_wrap(world.agent, wrap).rumor
    [started] = rec.of("turn_started")
    assert started.payload["triggeringEventIds"] == [asked.id]
    assert started.channel_id == f"dm-private-{owner}"
    assert replied.payload["private"] is True and replied.payload["inReplyTo"] == asked.id

    # The owner's client (nostr-sdk) finds a kind 14 from the agent with p and e.
    to_owner = await world.query({"kinds": [1059], "#p": [owner]})
    [(sender, rumor)] = sdk_open(world.owner, to_owner)
    assert sender == agent
    assert rumor.kind().as_u16() == 14
    assert rumor.author().to_hex() == agent
    tags = [t.to_vec() for t in rumor.tags()]
    assert ["p", owner] in tags
    assert ["e", asked.id] in tags
    answer = rumor.content()
    assert f"instruction: {question}" in answer
    assert rumor.id().to_hex() == replied.payload["eventId"]
    # The agent keeps its own copy, readable only by itself.
    to_agent = await world.query({"kinds": [1059], "#p": [agent]})
    opened = [nip59.open_gift_wrap(world.agent, w) for w in to_agent]
    assert sorted((o.sender, o.rumor.content) for o in opened) == sorted(
        [(owner, question), (agent, answer)]
    )
    # The agent announced where it reads private messages.
    [relays] = await world.query({"kinds": [10050], "authors": [agent]})
    assert nip17.dm_relays(relays) == (world.relay.url,)

    # Every event the relay holds: no plaintext of the message or the answer, anywhere.
    stored = await world.query({"limit": 500})
    assert {e.kind for e in stored} >= {1059, 10050, METRIC_KIND}
    first_line = answer.splitlines()[0]
    for event in stored:
        text = event.to_json()
        assert "launch code" not in text
        assert first_line not in text
        assert event.kind not in (9, 14, 1)  # nothing answered in the clear
    # The metric is encrypted to the owner; opened, it names ids, never the text.
    [metric_event] = [e for e in stored if e.kind == METRIC_KIND]
    metric = open_metric_event(world.owner, metric_event)
    assert metric.triggering_event_ids == (asked.id,)
    assert metric.channel_id == f"dm-private-{owner}"
    # The diagnostics never hold the text (nor does the state database).
    feed = (world.tmp / "state" / "diagnostics.jsonl").read_text(encoding="utf-8")
    assert "launch code" not in feed
    assert b"launch code" not in (world.tmp / "state" / "bot.sqlite3").read_bytes()


def _forged_wrap(claimed: SecretKey, signer: SecretKey, to: SecretKey, text: str) -> Event:
    """``signer`` seals a kind 14 that claims ``claimed`` wrote it."""
    rumor = nip17.message(
        claimed.public_key.hex, [to.public_key.hex], text, created_at=int(time.time())
    )
    key = nip44.conversation_key(signer, to.public_key.hex)
    seal = sign_event(signer, kind=13, content=nip44.encrypt(rumor.to_json(), key), created_at=1)
    return _wrap_text(seal.to_json(), to)


def _wrap_text(seal_text: str, to: SecretKey) -> Event:
    one_time = SecretKey.generate()
    key = nip44.conversation_key(one_time, to.public_key.hex)
    return sign_event(
        one_time,
        kind=1059,
        content=nip44.encrypt(seal_text, key),
        tags=[["p", to.public_key.hex]],
        created_at=int(time.time()),
    )


async def test_forged_seals_are_refused_with_their_reasons_and_never_reach_the_agent(
    world: World,
) -> None:
    rec = Recorder()
    mallory = SecretKey.generate()
    impostor = _forged_wrap(world.owner, mallory, world.agent, "forged: wire the money")
    good_seal = nip59.seal(
        world.owner,
        world.agent.public_key,
        nip17.message(
            world.owner.public_key.hex, [world.agent.public_key.hex], "forged: x", created_at=1
        ),
        created_at=1,
    )
    bad_signature = _wrap_text(
        good_seal.to_json().replace(good_seal.sig, mallory.sign_schnorr(b"\x00" * 32).hex()),
        world.agent,
    )
    key = nip44.conversation_key(world.owner, world.agent.public_key.hex)
    rumor = nip17.message(
        world.owner.public_key.hex, [world.agent.public_key.hex], "forged: kind", created_at=1
    )
    not_a_seal = _wrap_text(
        sign_event(
            world.owner, kind=1, content=nip44.encrypt(rumor.to_json(), key), created_at=1
        ).to_json(),
        world.agent,
    )
    genuine = nip59.gift_wrap(
        world.owner,
        world.agent.public_key,
        nip17.message(
            world.owner.public_key.hex,
            [world.agent.public_key.hex],
            "the real one",
            created_at=int(time.time()),
        ),
        now=int(time.time()),
    )
    async with running(world, rec):
        await world.publish(impostor, bad_signature, not_a_seal, genuine)
        await rec.kind("reply_published")
    reasons = sorted(r.payload["reason"] for r in rec.of("event_rejected"))
    assert [r for r in reasons if r.startswith("gift_wrap_")] == [
        "gift_wrap_author_mismatch",
        "gift_wrap_bad_seal_signature",
        "gift_wrap_not_a_seal",
    ]
    real_id = nip59.open_gift_wrap(world.agent, genuine).rumor.id
    assert [r.payload["triggeringEventIds"] for r in rec.of("turn_started")] == [[real_id]]
    feed = (world.tmp / "state" / "diagnostics.jsonl").read_text(encoding="utf-8")
    assert "forged" not in feed


async def test_a_kind_1_mention_gets_a_kind_1_reply_that_nostr_sdk_reads_as_a_nip10_reply(
    world: World,
) -> None:
    rec = Recorder()
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    now = int(time.time())
    root = sign_event(world.human, kind=1, content="gm, thread root", created_at=now)
    note = sign_event(
        world.owner,
        kind=1,
        content="@agent what do you think?",
        tags=[["e", root.id, "", "root", root.pubkey], ["p", root.pubkey], ["p", agent]],
        created_at=now,
    )
    async with running(world, rec, kinds=(1, 9, 14)):
        await world.publish(root, note)
        await rec.kind("reply_published")
    [reply] = await world.query({"kinds": [1], "authors": [agent]})
    assert await world.query({"kinds": [9], "authors": [agent]}) == []
    assert reply.tags == (
        ("e", root.id, "", "root"),
        ("e", note.id, "", "reply", owner),
        ("p", owner),
        ("p", root.pubkey),
    )
    assert nip10.thread_ref(reply) == nip10.ThreadRef(root.id, note.id)
    # nostr-sdk: a valid event whose e tags reference the note (its filter matches the reply
    # among the note's replies), with the NIP-10 markers where NIP-10 puts them.
    theirs = sdk_event(reply)
    assert theirs.verify()
    assert theirs.kind().as_u16() == 1
    replies_to_note = (
        nostr_sdk.Filter().kind(nostr_sdk.Kind(1)).event(nostr_sdk.EventId.parse(note.id))
    )
    assert replies_to_note.match_event(theirs)
    marked = {(t.to_vec()[1], t.to_vec()[3]) for t in theirs.tags() if t.kind() == "e"}
    assert marked == {(root.id, "root"), (note.id, "reply")}
    assert {t.content() for t in theirs.tags() if t.kind() == "p"} == {owner, root.pubkey}


async def test_a_kind_1111_comment_gets_a_kind_1111_reply_with_the_nip22_tags(
    world: World,
) -> None:
    rec = Recorder()
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    now = int(time.time())
    article = sign_event(world.human, kind=1063, content="a file", created_at=now)
    comment = sign_event(
        world.owner,
        kind=1111,
        content="agent, is this file safe?",
        tags=[
            ["E", article.id, "", article.pubkey],
            ["K", "1063"],
            ["P", article.pubkey],
            ["e", article.id, "", article.pubkey],
            ["k", "1063"],
            ["p", article.pubkey],
            ["p", agent],
        ],
        created_at=now,
    )
    async with running(world, rec, kinds=(1111, 14)):
        await world.publish(article, comment)
        await rec.kind("reply_published")
    [reply] = await world.query({"kinds": [1111], "authors": [agent]})
    assert reply.tags == (
        ("E", article.id, "", article.pubkey),
        ("K", "1063"),
        ("P", article.pubkey),
        ("e", comment.id, "", owner),
        ("k", "1111"),
        ("p", owner),
    )
    assert nip10.thread_ref(reply) == nip10.ThreadRef(article.id, comment.id)
    assert sdk_event(reply).verify()


async def test_wraps_dated_two_days_back_are_served_once_and_unwrapped_kind_14_is_refused(
    world: World,
) -> None:
    rec = Recorder()
    now = int(time.time())
    message = nip17.message(
        world.owner.public_key.hex, [world.agent.public_key.hex], "old-looking", created_at=now
    )
    backdated = nip59.gift_wrap(
        world.owner,
        world.agent.public_key,
        message,
        now=now,
        randbelow=lambda n: nip59.MAX_BACKDATE - 60,
    )
    assert backdated.created_at < now - 47 * 3600
    plaintext = sign_event(
        world.owner,
        kind=14,
        content="a kind 14 in the clear",
        tags=[["p", world.agent.public_key.hex]],
        created_at=now,
    )
    async with running(world, rec) as plugin:
        await world.publish(backdated)
        await rec.kind("reply_published")
        # The same message again (another copy of the wrap): refused by id, not run twice.
        assert not await plugin.handle_event(backdated)
        assert not await plugin.handle_event(plaintext)
    assert [r.payload["triggeringEventIds"] for r in rec.of("turn_started")] == [[message.id]]
    assert "private_message_not_wrapped" in [r.payload["reason"] for r in rec.of("event_rejected")]


def test_subscriptions_name_the_kinds_and_private_messages_are_on_by_default(world: World) -> None:
    gate = gate_of(world.config())
    agent = world.agent.public_key.hex
    assert gate.kinds == frozenset({9, 14})
    owner = world.owner.public_key.hex  # owner-only: only the owner's public events are asked for
    assert [f.to_wire() for f in listen_filters(gate, 1_000_000, ())] == [
        {"kinds": [9], "since": 1_000_000, "authors": [owner], "#p": [agent]},
        {"kinds": [1059, 21059], "#p": [agent], "since": 1_000_000 - 2 * 24 * 3600},
    ]
    only_private = gate_of(world.config(kinds=(14,)))
    assert [f.to_wire() for f in listen_filters(only_private, 5, ())] == [
        {"kinds": [1059, 21059], "#p": [agent], "since": 0}
    ]
    public = gate_of(world.config(kinds=(1, 1111)))
    assert [f.to_wire() for f in listen_filters(public, 5, ())] == [
        {"kinds": [1, 1111], "since": 5, "authors": [owner], "#p": [agent]}
    ]
    note = sign_event(world.owner, kind=1, content="x", tags=[["p", agent]], created_at=5)
    assert decide(note, gate, set()) == Refuse("kind_not_subscribed")


def test_buzz_toml_names_the_kinds_and_the_plaintext_opt_in(tmp_path: Path) -> None:
    agent, owner = SecretKey.generate(), SecretKey.generate()
    base = (
        f'secret_key = "{agent.hex}"\nowner = "{owner.public_key.hex}"\n'
        'relays = ["ws://127.0.0.1:1"]\n[agent]\ncommand = "agent"\n'
    )
    (tmp_path / "buzz.toml").write_text(base, encoding="utf-8")
    (tmp_path / "buzz.toml").chmod(0o600)  # it holds secret_key inline
    default = PluginConfig.from_sources(ConfigSources(config_path=tmp_path / "buzz.toml"))
    assert default.kinds == (9, 14) and default.plaintext_dm is False
    (tmp_path / "buzz.toml").write_text(
        base + "[subscriptions]\nkinds = [1, 1111]\nplaintext_dm = true\n", encoding="utf-8"
    )
    chosen = PluginConfig.from_sources(ConfigSources(config_path=tmp_path / "buzz.toml"))
    assert chosen.kinds == (1, 1111) and chosen.plaintext_dm is True


async def test_a_backdated_wrap_sent_after_a_reconnect_is_still_received() -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    me = agent.public_key.hex
    now = int(time.time())
    relay = await start_relay()
    note = sign_event(sender, kind=1, content="hi", tags=[["p", me]], created_at=now)
    message = nip17.message(sender.public_key.hex, [me], "after the reconnect", created_at=now)
    wrap = nip59.gift_wrap(sender, me, message, now=now, randbelow=lambda n: 24 * 3600)
    filters = [
        {"kinds": [1], "#p": [me], "since": now - 10},
        {"kinds": [1059], "#p": [me], "since": now - 10 - nip59.MAX_BACKDATE},
    ]
    client = RelayClient(relay.url, timeout=3)
    got: list[str] = []
    try:
        assert (await RelayPool([relay.url], timeout=3).publish(note)).ok
        async with asyncio.timeout(WAIT):
            async for event in client.subscribe(filters, reconnect_delay=0.05):
                got.append(event.id)
                if event.id == note.id:
                    # The relay goes away and comes back; then the backdated wrap is sent.
                    relay = await restart_relay(relay)
                    assert (await RelayPool([relay.url], timeout=3).publish(wrap)).ok
                if event.id == wrap.id:
                    break
    finally:
        await client.close()
        relay.stop()
    assert got == [note.id, wrap.id]


async def test_the_envelope_gets_the_private_conversation_from_the_wraps(world: World) -> None:
    rec = Recorder()
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    now = int(time.time())
    earlier = nip17.message(owner, [agent], "earlier question", created_at=now - 60)
    answer = nip17.reply(agent, earlier, "earlier answer", created_at=now - 50)
    elsewhere = nip17.message(world.human.public_key.hex, [agent], "other person", created_at=now)
    await world.publish(
        *(w for _, w in nip17.wrap_for_room(world.owner, earlier, now=now)),
        *(w for _, w in nip17.wrap_for_room(world.agent, answer, now=now)),
        *(w for _, w in nip17.wrap_for_room(world.human, elsewhere, now=now)),
    )
    async with BuzzPlugin(world.config(), on_diagnostic=rec) as plugin:
        latest = nip17.message(owner, [agent], "and now?", created_at=now)
        [(_, wrap)] = [
            (t, w) for t, w in nip17.wrap_for_room(world.owner, latest, now=now) if t == agent
        ]
        assert await plugin.handle_event(wrap)
        await rec.kind("reply_published")
    [delivery] = rec.of("prompt_context_delivery")
    # The earlier question and the agent's answer (its own copy); not the other person's message.
    assert delivery.payload["eventDeltaCount"] == 2
    assert "promptText" not in delivery.payload
