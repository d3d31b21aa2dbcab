"""Relays as they are: people read where their NIP-65 list says, relays announce limits
(NIP-11), end stored events with a completeness hint (NIP-67), pass ephemeral gift wraps
(kind 21059) and refuse with ``rate-limited:``.

Real relays on 127.0.0.1 (nostr-sdk LocalRelay), fronts that announce a NIP-11 document, and
scripted relays for what LocalRelay does not do; a real bot (BuzzPlugin, the demo agent).
"""

from __future__ import annotations

import time
from typing import Any

from nostr_buzz.bot.state import BotStore
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.publisher import RATE_LIMIT_PAUSE, MetricPublisher
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59, nip65
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event
from tests.e2e.bot.test_private import running
from tests.support.bot_world import Recorder, World
from tests.support.relays import fronted_relay, local_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay


def metric_event(agent: SecretKey, owner: SecretKey) -> Event:
    payload = MetricPayload(harness="demo", timestamp="2026-12-04T10:00:00.000Z", turn_seq=1)
    return build_metric_event(agent, owner.public_key, payload)


async def query(url: str, flt: dict[str, Any]) -> list[Event]:
    return (await RelayPool([url], timeout=3.0).query(flt)).events


async def test_a_person_reads_the_reply_and_metric_on_the_relay_their_list_names(
    world: World,
) -> None:
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    rec = Recorder()
    async with local_relay() as theirs, scripted_relay() as trap:
        # The owner reads on a relay the bot does not use; the list also names a local
        # address nobody configured and 300 more relays: none of those may be contacted.
        tags = [["r", theirs.url], ["r", trap.url]]
        tags += [["r", f"ws://127.0.0.{i % 250 + 2}:{7000 + i}"] for i in range(300)]
        listing = sign_event(
            world.owner, kind=nip65.KIND, content="", tags=tags, created_at=int(time.time())
        )
        await world.publish(listing)
        async with running(world, rec, local_relays=(theirs.url,)):
            await rec.kind("relay_list_published")
            # The thread began on the owner's own relay only: the bot reads it there.
            root = world.message(world.owner, "a thread started elsewhere", mention=False)
            assert (await RelayPool([theirs.url], timeout=3.0).publish(root)).ok
            asked = world.message(world.owner, "where do I read you?", reply_to=root)
            await world.publish(asked)
            replied = await rec.kind("reply_published")
            await rec.kind("metric_published")
        there = await query(theirs.url, {"authors": [agent]})
        assert replied.payload["eventId"] in {e.id for e in there}
        [delivered] = rec.of("prompt_context_delivery")
        assert delivered.payload["eventDeltaCount"] == 1  # the root, read where it was
        assert set(replied.payload["relays"]) == {world.relay.url, theirs.url}
        # The metric's recipient is the owner: it went to the owner's read relay too.
        assert any(e.kind == METRIC_KIND and e.tag_values("p") == [owner] for e in there)
        assert trap.connections == 0
    # The bot announced its own relays (NIP-65).
    [own] = await world.query({"kinds": [nip65.KIND], "authors": [agent]})
    assert nip65.relay_list(own) == nip65.RelayList((world.relay.url,), (world.relay.url,))


async def test_a_long_reply_is_split_to_fit_a_relay_that_takes_16_kib_messages(
    world: World,
) -> None:
    limit = 16 * 1024
    document = {"name": "small", "limitation": {"max_message_length": limit}}
    rec = Recorder()
    async with (
        fronted_relay(world.relay.url, document, max_size=limit) as small,
        running(world, rec, write_relays=(small,)),
    ):
        asked = world.message(world.owner, "long " + "word " * 8000)  # one 40 kB line
        await world.publish(asked)
        first = await rec.kind("reply_published")
        [part] = await world.query({"ids": [first.payload["eventId"]]})
        total = int(part.content.split("/", 1)[1].split("]", 1)[0])  # "[1/N]"
        await rec.kind("reply_published", total)
        await rec.kind("metric_published")
    parts = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert len(parts) == total >= 3
    assert all(len(f'["EVENT",{p.to_json()}]'.encode()) <= limit for p in parts)
    assert not rec.of("reply_failed")
    assert sorted(p.content.split("\n", 1)[0] for p in parts) == sorted(
        f"[{k}/{total}]" for k in range(1, total + 1)
    )


async def test_a_kind_21059_wrap_is_opened_and_answered_like_a_stored_one(world: World) -> None:
    owner, agent = world.owner.public_key.hex, world.agent.public_key.hex
    now = int(time.time())
    rumor = nip17.message(owner, [agent], "an ephemeral question", created_at=now)
    sealed = nip59.seal(world.owner, agent, rumor, created_at=now)
    wrap = nip59.wrap_seal(sealed, agent, now=now, kind=nip59.EPHEMERAL_GIFT_WRAP_KIND)

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        # A relay passing on an ephemeral wrap to the subscriptions that ask for kind 21059.
        if msg[0] == "EVENT":  # the agent's own copy of its answer (its DM relays)
            await conn.send(["OK", msg[1]["id"], True, ""])
        if msg[0] != "REQ":
            return
        if any(21059 in f.get("kinds", ()) for f in msg[2:]):
            await conn.send(["EVENT", msg[1], wrap.to_dict()])
        await conn.send(["EOSE", msg[1]])

    rec = Recorder()
    async with (
        scripted_relay(script) as passing,
        running(world, rec, read_relays=(passing.url, world.relay.url)),
    ):
        replied = await rec.kind("reply_published")
    assert replied.payload["private"] is True
    assert replied.payload["inReplyTo"] == rumor.id
    [started] = rec.of("turn_started")
    assert started.payload["triggeringEventIds"] == [rumor.id]


def eose_relay(events: list[dict[str, Any]], hint: object) -> Any:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for event in events:
                await conn.send(["EVENT", msg[1], event])
            await conn.send(["EOSE", msg[1], hint] if hint is not None else ["EOSE", msg[1]])

    return script


async def test_an_eose_that_says_finish_ends_the_paging() -> None:
    key = SecretKey.generate()
    now = int(time.time())
    events = [
        sign_event(key, kind=1, content=str(i), created_at=now - i).to_dict() for i in range(5)
    ]
    flt = {"kinds": [1], "authors": [key.public_key.hex]}
    for hint, pages in ((["finish"], 1), ("finish", 1), (None, 2), (["more"], 2)):
        async with scripted_relay(eose_relay(events, hint)) as relay:
            found = await RelayPool([relay.url], timeout=3.0).query_back(
                flt, since=now - 100, page=5
            )
        assert len(found.events) == 5
        assert found.per_relay[relay.url].complete is (
            True if pages == 1 else False if hint else None
        )
        # Without "finish" a full page means "ask for the next one".
        assert (len(relay.frames("REQ")) == 1) is (pages == 1), hint


async def test_a_rate_limited_relay_is_backed_off_not_retried_at_once(world: World) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "rate-limited: slow down"])

    clock = [1_000_000.0]
    async with scripted_relay(script) as busy:
        outbox = Outbox(world.tmp / "outbox.sqlite3")
        publisher = MetricPublisher(
            world.agent,
            world.owner.public_key,
            outbox,
            [busy.url],
            timeout=3.0,
            clock=lambda: clock[0],
        )
        event = metric_event(world.agent, world.owner)
        report = await publisher.submit(event)
        assert not report.delivered
        assert report.verdicts[busy.url].prefix == "rate-limited:"
        assert report.next_attempt is not None
        assert report.next_attempt >= clock[0] + RATE_LIMIT_PAUSE
        # A reconnect makes everything due: still nothing goes to the paused relay.
        outbox.make_due(clock[0] + 1)
        clock[0] += 1
        [again] = await publisher.flush()
        assert again.verdicts[busy.url].message == "rate-limited: backing off"
        assert len(busy.frames("EVENT")) == 1
        # Once the pause is over, the relay is asked again.
        clock[0] += 2 * RATE_LIMIT_PAUSE
        await publisher.flush()
        assert len(busy.frames("EVENT")) == 2
        outbox.close()


async def test_the_outbox_keeps_each_replys_relays_so_a_restart_sends_to_the_same_set(
    world: World,
) -> None:
    """No relay takes the reply at first: it waits in the outbox with the write relay and the
    owner's read relay, and after a restart it goes to that same read relay."""
    accepting = {"now": False}

    async def theirs_script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            ok = accepting["now"]
            await conn.send(["OK", msg[1]["id"], ok, "" if ok else "error: down for now"])
        elif msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])

    async def refusing(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "blocked: not you"])

    rec = Recorder()
    async with scripted_relay(theirs_script) as theirs, scripted_relay(refusing) as mine:
        listing = sign_event(
            world.owner,
            kind=nip65.KIND,
            content="",
            tags=[["r", theirs.url, "read"]],
            created_at=int(time.time()),
        )
        await world.publish(listing)
        changes = {"write_relays": (mine.url,), "local_relays": (theirs.url,)}
        async with running(world, rec, **changes):
            await world.publish(world.message(world.owner, "are you there?"))
            failed = await rec.kind("reply_failed")
        reply_id = failed.payload["eventId"]
        store = BotStore(world.tmp / "state")
        try:
            entry = store.outbox.get(reply_id)
        finally:
            store.close()
        assert entry is not None and entry.relays == (mine.url, theirs.url)
        accepting["now"] = True
        rec2 = Recorder()
        async with running(world, rec2, **changes) as plugin:
            assert plugin.delivery is not None
            plugin.delivery.nudge()
            published = await rec2.wait(
                lambda r: [x for x in r.of("reply_published") if x.payload["eventId"] == reply_id],
                what="the stored reply, sent again",
            )
        assert published[0].payload["relays"] == [theirs.url]
