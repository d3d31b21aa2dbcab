"""Private messages in the bot's state, pure: a queued one is stored as its wrap and opened again on
load, and a resumed gift-wrap filter still looks two days back (end to end in
tests/e2e/bot/test_private.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nostr_buzz.bot.state import STATE_DB, BotStore
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.errors import StateError
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from nostr_buzz.nips.nip01 import Filter


def test_a_queued_private_message_is_stored_as_its_wrap_and_opened_again_on_load(
    tmp_path: Path,
) -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    message = nip17.message(
        sender.public_key.hex, [agent.public_key.hex], "secret plans", created_at=100
    )
    wrap = nip59.gift_wrap(sender, agent.public_key, message, now=100)
    private = nip59.open_gift_wrap(agent, wrap).as_event()
    store = BotStore(tmp_path, agent_secret=agent)
    queue = store.load_queue()
    assert queue.push(private, now=1.0).accepted
    store.record_push(queue, QueuedEvent(private, "@mention", 1.0), [], 100)
    store.close()
    assert b"secret plans" not in (tmp_path / STATE_DB).read_bytes()
    reloaded = BotStore(tmp_path, agent_secret=agent).load_queue()
    batch = reloaded.flush_next(10.0)
    assert batch is not None and batch.channel == f"dm-private-{sender.public_key.hex}"
    [queued] = batch.events
    assert isinstance(queued.event, nip59.PrivateEvent)
    assert (queued.event.id, queued.event.content) == (message.id, "secret plans")
    with pytest.raises(StateError):
        BotStore(tmp_path).load_queue()  # without the agent's key the wrap cannot be opened


def test_a_resumed_gift_wrap_filter_still_looks_two_days_back() -> None:
    assert Filter(kinds=(1059,), since=10).with_since(1_000_000) == Filter(
        kinds=(1059,), since=1_000_000 - nip59.MAX_BACKDATE
    )
    assert Filter(kinds=(1,), since=10).with_since(1_000_000).since == 1_000_000
    assert Filter(kinds=(1059,), since=10).with_since(100).since == 10
