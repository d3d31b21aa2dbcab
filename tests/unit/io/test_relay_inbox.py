"""The relay client's inbox without a socket: what a hostile relay's frames leave for the client
(the relays' side is in tests/e2e/io/test_relay.py)."""

from __future__ import annotations

import json

from nostr_buzz.event import sign_event
from nostr_buzz.io.relay_inbox import MALFORMED, Heard, RelayInbox
from nostr_buzz.io.relay_subs import Budget
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip01 import Filter

ALICE = SecretKey.from_str("5c" * 32)
NOTE = sign_event(ALICE, kind=1, content="hello", created_at=1_700_000_000)


def frame(*parts: object) -> str:
    return json.dumps(list(parts))


def test_frames_that_fit_no_request_are_malformed_never_fatal() -> None:
    inbox = RelayInbox()
    for bad in ("not json", "{}", frame("EVENT", "buzz-never", NOTE.to_dict()), frame("WHAT")):
        assert inbox.feed(bad) == MALFORMED
    assert inbox.feed(frame("EOSE", "buzz-never")) == MALFORMED


def test_a_forged_event_is_rejected_and_never_buffered() -> None:
    inbox = RelayInbox()
    sub = inbox.open([Filter(kinds=(1,))], live=False, budget=Budget())
    forged = {**NOTE.to_dict(), "content": "changed"}
    assert inbox.feed(frame("EVENT", sub.id, forged)) == Heard("rejected", "bad_id")
    assert inbox.feed(frame("EVENT", sub.id, NOTE.to_dict())) is None
    assert list(sub.events) == [NOTE]
    assert sub.rejected == ["bad_id"]


def test_an_event_that_does_not_match_the_filter_is_rejected() -> None:
    inbox = RelayInbox()
    sub = inbox.open([Filter(kinds=(7,))], live=False, budget=Budget())
    heard = inbox.feed(frame("EVENT", sub.id, NOTE.to_dict()))
    assert heard == Heard("rejected", "does not match filter")
    assert list(sub.events) == []


def test_a_relay_flooding_a_closed_request_is_to_be_cut_off() -> None:
    inbox = RelayInbox()
    sub = inbox.open([Filter(kinds=(1,))], live=False, budget=Budget(10, 2_000, 100))
    assert inbox.forget(sub)  # the relay still holds it: it is to be told CLOSE
    late = frame("EVENT", sub.id, NOTE.to_dict())
    assert inbox.feed(late) is None  # in flight: dropped, charged to the REQ's budget
    heard = [inbox.feed(late) for _ in range(10)]
    cut = [h for h in heard if h is not None]
    assert cut and cut[0].kind == "cut off" and "told to CLOSE" in cut[0].text
    assert list(sub.events) == []


def test_a_notice_is_kept_short_and_an_end_finishes_its_request() -> None:
    inbox = RelayInbox()
    assert inbox.feed(frame("NOTICE", "x" * 10_000)) == Heard("notice", "x" * 500)
    sub = inbox.open([Filter(kinds=(1,))], live=False, budget=Budget())
    assert inbox.feed(frame("CLOSED", sub.id, "auth-required: who are you")) is None
    assert sub.end == ("closed", "auth-required: who are you")
    assert not inbox.forget(sub)  # the relay closed it itself: no CLOSE to send


def test_a_lost_connection_ends_every_open_request() -> None:
    inbox = RelayInbox()
    subs = [inbox.open([Filter(kinds=(1,))], live=live, budget=Budget()) for live in (False, True)]
    inbox.fail_all("connection dropped")
    assert [s.end for s in subs] == [("lost", "connection dropped")] * 2
