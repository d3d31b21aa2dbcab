"""Private messages in the bot's state, pure: a queued one is stored as its wrap and opened again on
load, a resumed gift-wrap filter still looks two days back, a private conversation has a queue
channel of its own (rows an earlier version filed with the public notes move there), a public
note without a channel is never compiled as a DM, a private turn's driver records keep kinds and
classes only, and a message dated before the run's start is never answered (end to end in
tests/e2e/bot/test_private.py and tests/e2e/bot/test_private_isolation.py)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from nostr_buzz.bot.intake import private_before
from nostr_buzz.bot.privacy import private_driver_payload, result_error_class
from nostr_buzz.bot.state import STATE_DB, BotStore
from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.context import channel_info, direct_channel_type
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.core.turn_input import TurnEvent, TurnInput
from nostr_buzz.errors import StateError
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips import nip10, nip17, nip59
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip59 import PrivateEvent
from tests.support.events import chat


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
    queue = store.journal.load_queue()
    assert queue.push(private, now=1.0).accepted
    store.journal.record_push(queue, QueuedEvent(private, "@mention", 1.0), [], 100)
    store.close()
    assert b"secret plans" not in (tmp_path / STATE_DB).read_bytes()
    reloaded = BotStore(tmp_path, agent_secret=agent).journal.load_queue()
    batch = reloaded.flush_next(10.0)
    assert batch is not None and batch.channel == f"dm-private-{sender.public_key.hex}"
    [queued] = batch.events
    assert isinstance(queued.event, nip59.PrivateEvent)
    assert (queued.event.id, queued.event.content) == (message.id, "secret plans")
    with pytest.raises(StateError):
        BotStore(tmp_path).journal.load_queue()  # without the agent's key the wrap cannot be opened
    # A bot whose key is in a signer opens the stored wraps through it before loading.
    keyless = BotStore(tmp_path)
    [stored] = keyless.journal.queued_wraps()
    opened = asyncio.run(nip59.open_gift_wrap_with(LocalSigner(agent), stored)).as_event()
    batch = keyless.journal.load_queue(opened={stored.id: opened}).flush_next(10.0)
    assert batch is not None
    [again] = batch.events
    assert (again.event.id, again.event.content) == (message.id, "secret plans")


def test_a_resumed_gift_wrap_filter_still_looks_two_days_back() -> None:
    assert Filter(kinds=(1059,), since=10).with_since(1_000_000) == Filter(
        kinds=(1059,), since=1_000_000 - nip59.MAX_BACKDATE
    )
    assert Filter(kinds=(1,), since=10).with_since(1_000_000).since == 1_000_000
    assert Filter(kinds=(1059,), since=10).with_since(100).since == 10


def private(sender: SecretKey, agent: SecretKey, text: str, at: int, **tags: str) -> PrivateEvent:
    """A private message as the bot has it once its wrap is open (the wrap dated two days back
    at most, at random: its date says nothing)."""
    extra = [[k, v] for k, v in tags.items()]
    rumor = nip17.message(sender.public_key.hex, [agent.public_key.hex], text, created_at=at)
    if extra:
        rumor = nip59.Rumor.build(
            rumor.pubkey, kind=14, content=text, tags=[*rumor.tags, *extra], created_at=at
        )
    wrap = nip59.gift_wrap(sender, agent.public_key, rumor, now=at)
    return nip59.open_gift_wrap(agent, wrap).as_event()


def test_a_private_conversation_never_shares_a_queue_channel_with_public_notes() -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    key = sender.public_key.hex
    dm = private(sender, agent, "between us", 100)
    note = chat(sender, 100, channel=None, mention=agent, kind=1)
    comment = chat(sender, 100, channel=None, mention=agent, kind=1111)
    plaintext = chat(sender, 100, channel=None, mention=agent)
    assert nip10.queue_channel(dm) == nip10.private_channel(key) == f"dm-private-{key}"
    for public in (note, comment, plaintext):
        assert nip10.queue_channel(public) == f"dm-{key}"
        assert not nip10.is_private_channel(nip10.queue_channel(public))
    assert nip10.is_private_channel(nip10.queue_channel(dm))
    assert nip10.is_valid_channel_id(nip10.queue_channel(dm))
    # A sender who tags a private message with a public channel does not get it into that
    # channel's queue (and agent session): a private message is in no channel.
    tagged = private(sender, agent, "between us", 101, h="eng")
    assert nip10.channel(tagged) is None
    assert nip10.queue_channel(tagged) == f"dm-private-{key}"
    # No h tag can name a private channel (the dm- prefix is reserved).
    assert nip10.channel(chat(sender, 100, channel=f"dm-private-{key}")) is None


def test_a_public_note_without_a_channel_is_compiled_public_never_as_a_dm() -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    key = sender.public_key.hex
    note = chat(sender, 100, channel=None, mention=agent, kind=1)
    reply = chat(sender, 101, channel=None, mention=agent, kind=1, reply_to=note)
    for event, scope in ((note, "channel"), (reply, "thread")):
        assert direct_channel_type(event) == "stream"
        info, _ = channel_info([], None, key, "Morgan", direct=(f"dm-{key}", "stream"))
        assert info is not None and info.name == ""  # nobody's channel: no snapshot
        sections = compile_turn(TurnInput(events=(TurnEvent(event),), channel=info)).sections
        text = "\n".join(sections)
        assert f"Scope: {scope}" in text and f'scope="{scope}"' in text
        assert "dm" not in text.replace(f"dm-{key}", "")
    # Direct messages stay DMs: a private message, and an opted-in plaintext kind 9.
    dm = private(sender, agent, "between us", 100)
    plaintext = chat(sender, 100, channel=None, mention=agent)
    for event in (dm, plaintext):
        assert direct_channel_type(event) == "dm"
        info, _ = channel_info([], None, key, "Morgan", direct=(nip10.queue_channel(event), "dm"))
        assert info is not None and (info.id, info.name) == (nip10.queue_channel(event), "Morgan")
        sections = compile_turn(TurnInput(events=(TurnEvent(event),), channel=info)).sections
        assert "Scope: dm" in "\n".join(sections)


def test_rows_of_an_earlier_version_move_from_the_shared_dm_channel_to_the_private_one(
    tmp_path: Path,
) -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    key = sender.public_key.hex
    dm = private(sender, agent, "secret plans", 100)
    older_dm = private(sender, agent, "more plans", 99)
    note = chat(sender, 100, channel=None, mention=agent, kind=1)
    store = BotStore(tmp_path, agent_secret=agent)
    queue = store.journal.load_queue()
    for event in (older_dm, dm, note):
        assert queue.push(event, now=1.0).accepted
        store.journal.record_push(queue, QueuedEvent(event, "@mention", 1.0), [], 100)
    store.close()
    # What the previous version wrote: every event under dm-{key}, the first private message
    # a failed batch (retry set, attempts, backoff), the second stored as cancelled.
    db = sqlite3.connect(tmp_path / STATE_DB)
    with db:
        db.execute("UPDATE queued SET channel = ?", (f"dm-{key}",))
        db.execute("UPDATE queued SET cancelled_ord = 0 WHERE id = ?", (dm.id,))
        db.execute("DELETE FROM channels")
        db.execute("INSERT INTO channels VALUES (?, 1, 2, 'steer', 1, 500.0)", (f"dm-{key}",))
    db.close()

    loaded = BotStore(tmp_path, agent_secret=agent)
    queue = loaded.journal.load_queue()
    public = queue.channel_state(f"dm-{key}")
    secret = queue.channel_state(f"dm-private-{key}")
    assert public is not None and secret is not None
    assert [e.queued.event.id for e in public.pending] == [note.id]
    # The retry set held a private message: dropped with its attempts and backoff; the
    # cancelled private message left too.
    assert (public.retry_size, public.retry_count, public.backoff_until) == (0, 0, None)
    assert (public.cancelled, public.cancel_reason, public.cancelled_count) == ([], None, 0)
    assert [e.queued.event.id for e in secret.pending] == [older_dm.id, dm.id]  # push order
    assert secret.cancelled == [] and secret.retry_size == 0
    batch = queue.flush_next(1000.0)
    assert batch is not None and batch.channel in (f"dm-{key}", f"dm-private-{key}")
    loaded.close()
    # The move was written: the rows load again without moving, exactly the same.
    db = sqlite3.connect(tmp_path / STATE_DB)
    rows = dict(db.execute("SELECT id, channel FROM queued").fetchall())
    db.close()
    secret_channel = f"dm-private-{key}"
    assert rows == {note.id: f"dm-{key}", dm.id: secret_channel, older_dm.id: secret_channel}
    again = BotStore(tmp_path, agent_secret=agent).journal.load_queue()
    assert again.channel_state(f"dm-private-{key}") == secret
    assert again.channel_state(f"dm-{key}") == public


def test_a_private_message_dated_before_the_floor_is_never_answered() -> None:
    agent, sender = SecretKey.generate(), SecretKey.generate()
    now = 1_800_000_000
    dm = private(sender, agent, "from last night", now - 3600)
    # Its wrap may well be dated later (or earlier): only the rumor's date counts.
    assert private_before(dm, now - 600)
    assert not private_before(dm, now - 3600)
    assert not private_before(private(sender, agent, "just now", now), now - 600)
    # Public events are left to the relay filter's since.
    assert not private_before(chat(sender, now - 3600, channel=None, kind=1), now - 600)


def test_a_private_sessions_driver_records_keep_kinds_and_classes_only() -> None:
    decision = {"decision": "rejected", "title": "cat secret", "toolKind": "secret", "x": 1}
    assert private_driver_payload("permission_decision", decision) == {
        "decision": "rejected",
        "toolKind": "other",
        "x": 1,
    }
    known = private_driver_payload("permission_decision", {**decision, "toolKind": "execute"})
    assert known["toolKind"] == "execute" and "title" not in known
    failed = private_driver_payload("permission_policy_failed", {"error": "ValueError('secret')"})
    assert failed == {"error": "ValueError"}
    assert private_driver_payload("steer_sent", {"result": "injected"}) == {"result": "injected"}
    assert result_error_class("JSON-RPC error -32603: Internal error: secret", "error") == (
        "JSON-RPC error -32603"
    )
    assert result_error_class("secret", "timeout") == "timeout"
    assert result_error_class(None, "agent_exit") == "agent_exit"
