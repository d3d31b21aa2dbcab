"""The public pieces of a bot's own loop: the settle window, the channel of any event, the reply
in the event's kind, the gate, the history's dates; and the public API's docstrings."""

from __future__ import annotations

import inspect
import random
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nostr_buzz
from nostr_buzz import (
    Admit,
    Command,
    DispatchQueue,
    Gate,
    Refuse,
    build_reply,
    channel_info_of,
    decide,
    reply_template,
    sign_event,
)
from nostr_buzz.core.context import utc_timestamp
from nostr_buzz.errors import BuzzError, QueueError
from nostr_buzz.nips import nip10, nip17, nip29, nip59
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER
from tests.support.keys import STRANGER as OTHER

#: One thread: events of one actor in it share a destination, so they batch together.
ROOT = "ab" * 32


def queue(**kwargs: int) -> DispatchQueue:
    return DispatchQueue(rng=random.Random(1), **kwargs)


# ---------------------------------------------------------------------------------------------
# Settling


def test_a_batch_that_may_still_grow_waits_until_it_has_been_quiet() -> None:
    q = queue()
    first, second = chat(OWNER, 1, thread=ROOT), chat(OWNER, 2, thread=ROOT)
    q.push(first, now=10.0)
    assert q.flush_next(10.1, settle=0.5) is None
    assert q.next_settle(10.1, settle=0.5) == pytest.approx(0.4)
    q.push(second, now=10.3)  # the burst goes on: the window starts again
    assert q.flush_next(10.6, settle=0.5) is None
    assert q.next_settle(10.6, settle=0.5) == pytest.approx(0.2)
    batch = q.flush_next(10.8, settle=0.5)
    assert batch is not None and [e.event for e in batch.events] == [first, second]
    assert q.next_settle(10.8, settle=0.5) is None


def test_a_full_batch_and_other_channels_do_not_wait_and_a_flood_cannot_hold_a_channel() -> None:
    full = queue(max_batch=2)
    for t in (1, 2):
        full.push(chat(OWNER, t, channel="full", thread=ROOT), now=10.0)
    full.push(chat(OTHER, 3, channel="busy"), now=10.0)
    flushed = full.flush_next(10.0, settle=5.0)
    assert flushed is not None and flushed.channel == "full" and len(flushed.events) == 2
    assert full.flush_next(10.0, settle=5.0) is None  # "busy" waits for quiet
    assert full.next_settle(10.0, settle=5.0) == pytest.approx(5.0)
    flooded = queue()
    mine = chat(OWNER, 1)
    flooded.push(mine, now=0.0)
    for i in range(40):  # a stranger's message every 0.1 s, settle 0.5: never quiet
        flooded.push(chat(OTHER, 2 + i), now=0.1 * i)
        assert flooded.flush_next(0.1 * i, settle=0.5) is None
    assert flooded.next_settle(0.1 * 39, settle=0.5) == pytest.approx(0.1)
    batch = flooded.flush_next(4.0, settle=0.5)  # 8 windows after the owner's message
    assert batch is not None and [e.event for e in batch.events] == [mine]


def test_a_clock_stepped_back_does_not_hold_a_channel_and_bad_windows_are_refused() -> None:
    q = queue()
    q.push(chat(OWNER, 1), now=1_000.0)
    assert q.flush_next(10.0, settle=0.5) is not None
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(QueueError, match="settle"):
            q.flush_next(10.0, settle=bad)


# ---------------------------------------------------------------------------------------------
# The channel of any event, the reply in its kind, the gate


def test_the_channel_of_a_channel_message_a_private_conversation_and_a_public_note() -> None:
    message = chat(OTHER, 5, channel="eng")
    assert channel_info_of(message) is None  # nobody vouches for its name
    meta = sign_event(
        OWNER,
        kind=nip29.GROUP_METADATA_KIND,
        content="",
        tags=[["d", "eng"], ["name", "Engineering"], ["about", "builds"]],
        created_at=4,
    )
    stranger = sign_event(
        OTHER, kind=meta.kind, content="", tags=[["d", "eng"], ["name", "Evil"]], created_at=9
    )
    info = channel_info_of(message, [meta, stranger], trusted={OWNER.public_key.hex})
    assert info is not None and (info.id, info.name, info.description) == (
        "eng",
        "Engineering",
        "builds",
    )
    direct = chat(OTHER, 5, channel=None, mention=AGENT)
    dm = channel_info_of(direct, label="Riley")
    assert dm is not None and (dm.id, dm.name, dm.type) == (
        nip10.queue_channel(direct),
        "Riley",
        "dm",
    )
    note = chat(OTHER, 5, channel=None, mention=AGENT, kind=1)
    public = channel_info_of(note, label="Riley")
    assert public is not None and (public.name, public.type) == ("", "stream")


def test_the_reply_is_in_the_events_kind_for_any_signer() -> None:
    sender = AGENT.public_key.hex
    for kind, expected in ((9, 9), (1, 1), (1111, 1111), (30023, 9)):
        target = chat(OTHER, 5, kind=kind, mention=AGENT)
        unsigned = reply_template(target, "hi", sender=sender, created_at=6)
        assert (unsigned.kind, unsigned.content, unsigned.created_at) == (expected, "hi", 6)
        signed = build_reply(AGENT, target, "hi", 6)
        assert (signed.kind, signed.tags) == (unsigned.kind, unsigned.tags)
        assert sender not in [t[1] for t in unsigned.tags if t[0] == "p"]
    target = chat(OTHER, 5)
    unsigned = reply_template(target, "x", sender=sender, created_at=6)
    assert unsigned.tags[:2] == (("h", "room"), ("e", target.id, "", "root", target.pubkey))


def test_the_gate_decides_commands_refusals_and_admissions() -> None:
    gate = Gate(
        agent=AGENT.public_key.hex,
        owner=OWNER.public_key.hex,
        kinds=frozenset({9}),
        channels=frozenset(),
        mentions_required=True,
        mode="owner-only",
        allowlist=frozenset(),
    )
    cancel = chat(OWNER, 5, mention=AGENT, content="!cancel")
    assert decide(cancel, gate, set()) == Command("cancel")
    assert decide(chat(OTHER, 5, mention=AGENT), gate, set()) == Refuse("author_not_owner")
    assert decide(chat(OWNER, 5), gate, set()) == Refuse("not_mentioned")
    assert decide(chat(OWNER, 5, mention=AGENT), gate, set()) == Admit("room")


# ---------------------------------------------------------------------------------------------
# History dates and docstrings


@given(st.integers(min_value=0, max_value=253_402_300_799))
def test_history_dates_are_what_datetime_writes(seconds: int) -> None:
    assert utc_timestamp(seconds) == datetime.fromtimestamp(seconds, UTC).isoformat()


def test_dates_a_sender_chose_out_of_range_are_unknown() -> None:
    assert utc_timestamp(253_402_300_800) == utc_timestamp(-1) == "unknown"


def test_every_public_type_and_function_has_a_docstring_of_its_own() -> None:
    boilerplate = msgspec.Struct.__doc__
    missing = []
    for name in nostr_buzz.__all__:
        value = getattr(nostr_buzz, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue  # constants and type aliases
        doc = value.__doc__ or ""
        if not doc.strip() or doc == boilerplate or doc.startswith(f"{value.__name__}("):
            missing.append(name)
    assert missing == []


def test_a_private_message_is_not_answered_in_public() -> None:
    rumor = nip17.message(OTHER.public_key.hex, [AGENT.public_key.hex], "psst", created_at=5)
    wrap = nip59.gift_wrap(OTHER, AGENT.public_key, rumor, now=5)
    opened = nip59.open_gift_wrap(AGENT, wrap).as_event()
    with pytest.raises(BuzzError, match="privately"):
        reply_template(opened, "x", sender=AGENT.public_key.hex, created_at=6)
