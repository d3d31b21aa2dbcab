"""NIP-17 over a real relay: DM relay lists, sending to each addressee's relays, conversations."""

from __future__ import annotations

import nostr_sdk

from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.private import conversation, dm_relays_of, read_inbox, send_private
from nostr_buzz.nips import nip17
from tests.support.keys import AGENT, ALICE, CAROL
from tests.support.relays import start_relay

NOW = 1_800_000_000


async def test_newest_dm_relay_list_wins_and_unlisted_people_are_absent() -> None:
    relay = await start_relay()
    try:
        pool = RelayPool([relay.url], timeout=5)
        old = nip17.dm_relay_list(ALICE, ["wss://old.example"], created_at=NOW - 10)
        new = nip17.dm_relay_list(ALICE, ["wss://new.example"], created_at=NOW)
        for event in (old, new):  # a replaceable kind: the relay keeps the newest
            assert (await pool.publish(event)).ok
        found = await dm_relays_of(
            [ALICE.public_key.hex, CAROL.public_key.hex], [relay.url], secret=None, timeout=5
        )
        assert found == {ALICE.public_key.hex: ("wss://new.example",)}
    finally:
        relay.stop()


async def test_a_conversation_is_read_back_from_the_wraps_both_ways() -> None:
    relay = await start_relay()
    try:
        me, alice = AGENT.public_key.hex, ALICE.public_key.hex
        sdk_keys = nostr_sdk.Keys.parse(ALICE.hex)
        # Alice writes from another implementation; the agent answers; Carol writes too.
        for text in ("first", "second"):
            wrap = nostr_sdk.nip17_make_private_msg(sdk_keys, nostr_sdk.PublicKey.parse(me), text)
            assert (await RelayPool([relay.url]).publish(Event.from_json(wrap.as_json()))).ok
        inbox = await read_inbox(AGENT, [relay.url], timeout=5)
        assert [o.rumor.content for o in inbox.messages] in (
            ["first", "second"],
            ["second", "first"],  # same second: ordered by id
        )
        answered = inbox.messages[-1].rumor
        answer = nip17.reply(me, answered, "answer", created_at=answered.created_at + 1)
        deliveries = await send_private(
            AGENT, answer, write_relays=[relay.url], dm_relays={}, now=NOW, timeout=5
        )
        assert [d.addressee for d in deliveries] == [alice, me]
        assert all(d.result.ok and not d.to_dm_relays for d in deliveries)
        other = nip17.message(CAROL.public_key.hex, [me], "carol here", created_at=NOW)
        await send_private(CAROL, other, write_relays=[relay.url], dm_relays={}, now=NOW, timeout=5)

        history, truncated = await conversation(AGENT, [relay.url], alice, limit=10, timeout=5)
        assert not truncated
        assert sorted(e.content for e in history) == ["answer", "first", "second"]
        assert history[-1].content == "answer"
        assert history[-1].pubkey == me
        history, truncated = await conversation(AGENT, [relay.url], alice, limit=2, timeout=5)
        assert truncated
        assert [e.content for e in history][-1] == "answer"
        assert len(history) == 2
    finally:
        relay.stop()
