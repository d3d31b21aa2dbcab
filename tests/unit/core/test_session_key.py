"""The session scope's keys (docs/bot.md, "Session scope"): ``channel`` keys by the queue
channel, ``thread`` by the channel and the thread's root; a private conversation is one key in
either; the real channel and the root are read back from any key."""

from __future__ import annotations

import pytest

from nostr_buzz.core.session_key import channel_of, keyer, session_key, thread_of
from nostr_buzz.errors import ConfigError
from nostr_buzz.nips import nip10
from tests.support.events import chat
from tests.support.keys import ALICE, BOB


def test_a_thread_and_its_replies_share_a_key_and_two_threads_do_not() -> None:
    root = chat(ALICE, 100, content="first", channel="eng")
    reply = chat(BOB, 101, content="re", channel="eng", reply_to=root)
    other = chat(ALICE, 102, content="second", channel="eng")
    keys = [session_key(e, "thread") for e in (root, reply, other)]
    assert keys == [f"eng/{root.id}", f"eng/{root.id}", f"eng/{other.id}"]
    assert {session_key(e, "channel") for e in (root, reply, other)} == {"eng"}
    assert [channel_of(k) for k in keys] == ["eng"] * 3
    assert [thread_of(k) for k in keys] == [root.id, root.id, other.id]
    assert (channel_of("eng"), thread_of("eng")) == ("eng", None)


def test_a_direct_channel_has_threads_and_a_private_conversation_stays_one_key() -> None:
    note = chat(ALICE, 100, content="hi", channel=None, kind=1)
    assert session_key(note, "thread") == f"{nip10.direct_channel(ALICE.public_key.hex)}/{note.id}"
    assert channel_of(session_key(note, "thread")) == nip10.direct_channel(ALICE.public_key.hex)
    private = [chat(ALICE, 100 + i, content=f"p{i}", channel=None, kind=14) for i in range(2)]
    keys = {session_key(e, "thread") for e in private}
    assert keys == {nip10.private_channel(ALICE.public_key.hex)}


def test_a_key_with_a_look_alike_channel_cannot_name_another_channels_thread() -> None:
    # A channel id holds no "/": an h tag that tries is no channel at all (the author's own
    # direct channel), so no event can be filed under another channel's thread.
    forged = chat(BOB, 100, content="x", channel="eng/" + "ab" * 32)
    key = session_key(forged, "thread")
    assert channel_of(key) == nip10.direct_channel(BOB.public_key.hex)


def test_the_keyer_checks_its_scope_against_the_one_table() -> None:
    event = chat(ALICE, 100, content="x", channel="eng")
    assert keyer("channel")(event) == "eng"
    assert keyer("thread")(event) == f"eng/{event.id}"
    with pytest.raises(ConfigError, match="expected one of channel, thread, got 'Thread'"):
        keyer("Thread")  # type: ignore[arg-type]
