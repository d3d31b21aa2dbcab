"""nostr_buzz.interop with the real libraries (nostr-sdk and pynostr objects, no sockets):
round trips of events and keys, forged or unsigned events refused on the way in, and the
functions that need a verified Event naming the conversion when handed another library's."""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

import nostr_sdk as sdk
import pynostr.event
import pynostr.key
import pytest

from nostr_buzz import interop
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.errors import BuzzError, InvalidEvent, InvalidKey, QueueError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.profile import Profile
from tests.support.keys import AGENT

TAGS = [["e", "ab" * 32, "", "root"], ["h", "engineering"], ["p", "cd" * 32]]


def ours() -> Event:
    return sign_event(AGENT, kind=9, content="héllo ⚡", tags=TAGS, created_at=1_790_000_000)


def sdk_event() -> Any:
    return (
        sdk.EventBuilder(sdk.Kind(9), "from nostr-sdk")
        .tags([sdk.Tag.parse(t) for t in TAGS])
        .custom_created_at(sdk.Timestamp.from_secs(1_790_000_000))
        .finalize(sdk.Keys.parse(AGENT.hex))
    )


def pynostr_event() -> Any:
    event = pynostr.event.Event(
        content="from pynostr", pubkey=AGENT.public_key.hex, created_at=1_790_000_000, kind=9
    )
    event.tags = [list(t) for t in TAGS]
    event.sign(AGENT.hex)
    return event


def test_events_round_trip_through_nostr_sdk() -> None:
    event = ours()
    theirs = interop.event_to_nostr_sdk(event)
    assert isinstance(theirs, sdk.Event) and theirs.verify()
    assert theirs.id().to_hex() == event.id
    assert interop.event_from_nostr_sdk(theirs) == event
    native = sdk_event()
    back = interop.event_from_nostr_sdk(native)
    assert back.id == native.id().to_hex() and back.content == "from nostr-sdk"
    assert interop.event_to_nostr_sdk(back).as_json() == native.as_json()


def test_events_round_trip_through_pynostr() -> None:
    event = ours()
    theirs = interop.event_to_pynostr(event)
    assert isinstance(theirs, pynostr.event.Event) and theirs.verify()
    assert (theirs.id, theirs.sig, theirs.tags) == (event.id, event.sig, [list(t) for t in TAGS])
    assert interop.event_from_pynostr(theirs) == event
    native = pynostr_event()
    back = interop.event_from_pynostr(native)
    assert (back.id, back.content, back.kind) == (native.id, "from pynostr", 9)


def test_a_pynostr_event_unsigned_or_changed_after_signing_is_refused() -> None:
    unsigned = pynostr.event.Event(content="never signed", pubkey=AGENT.public_key.hex)
    with pytest.raises(InvalidEvent) as info:
        interop.event_from_pynostr(unsigned)
    assert info.value.reason == "malformed"
    edited = pynostr_event()
    edited.content = "words the author never signed"  # pynostr keeps the old id and sig
    with pytest.raises(InvalidEvent) as info:
        interop.event_from_pynostr(edited)
    assert info.value.reason == "bad_id"
    forged = pynostr_event()
    forged.sig = forged.sig[:-2] + ("00" if forged.sig[-2:] != "00" else "11")
    with pytest.raises(InvalidEvent) as info:
        interop.event_from_pynostr(forged)
    assert info.value.reason == "bad_signature"


def test_keys_round_trip_through_both_libraries() -> None:
    secret, public = AGENT, AGENT.public_key
    sdk_secret = interop.secret_key_to_nostr_sdk(secret)
    assert isinstance(sdk_secret, sdk.SecretKey)
    assert interop.secret_key_from_nostr_sdk(sdk_secret) == secret
    assert interop.secret_key_from_nostr_sdk(sdk.Keys(sdk_secret)) == secret
    sdk_public = interop.public_key_to_nostr_sdk(public)
    assert sdk_public.to_hex() == public.hex
    assert interop.public_key_from_nostr_sdk(sdk_public) == public
    assert interop.public_key_from_nostr_sdk(sdk.Keys(sdk_secret).public_key()) == public

    py_secret = interop.secret_key_to_pynostr(secret)
    assert isinstance(py_secret, pynostr.key.PrivateKey)
    assert py_secret.public_key.hex() == public.hex
    assert interop.secret_key_from_pynostr(py_secret) == secret
    py_public = interop.public_key_to_pynostr(public)
    assert interop.public_key_from_pynostr(py_public) == public


def test_a_public_key_is_never_taken_for_a_secret_one() -> None:
    with pytest.raises(InvalidKey, match="PrivateKey"):
        interop.secret_key_from_pynostr(pynostr.key.PrivateKey().public_key)
    with pytest.raises(InvalidKey, match="SecretKey or Keys"):
        interop.secret_key_from_nostr_sdk(sdk.Keys.generate().public_key())
    with pytest.raises(InvalidKey) as info:
        interop.secret_key_to_nostr_sdk(AGENT.hex)  # type: ignore[arg-type]
    assert AGENT.hex not in str(info.value)
    with pytest.raises(InvalidEvent, match=r"nostr_sdk\.Event"):
        interop.event_from_nostr_sdk(pynostr_event())


@pytest.mark.parametrize(
    ("foreign", "conversion"),
    [
        (sdk_event, "interop.event_from_nostr_sdk"),
        (pynostr_event, "interop.event_from_pynostr"),
        (lambda: ours().to_dict(), "Event.from_dict"),
        (lambda: ours().to_json(), "Event.from_json"),
    ],
)
def test_what_needs_a_verified_event_names_the_conversion(foreign: Any, conversion: str) -> None:
    value = foreign()
    for use in (
        nip10.destination,
        nip10.thread_ref,
        nip10.channel,
        nip10.queue_channel,
        nip10.mentions,
        lambda e: nip10.chronological([e]),
        lambda e: nip10.reply_tags(e, sender="00" * 32),
    ):
        with pytest.raises(InvalidEvent, match=re.escape(conversion)) as info:
            use(value)
        assert info.value.reason == "malformed"
    with pytest.raises(QueueError, match=re.escape(conversion)):
        DispatchQueue().push(value, now=0.0)
    with pytest.raises(BuzzError, match=re.escape(conversion)):
        Profile.from_event(value)


def test_the_module_imports_without_either_library(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("nostr_sdk", "pynostr", "pynostr.event", "pynostr.key"):
        monkeypatch.setitem(sys.modules, name, None)  # what an absent package looks like
    monkeypatch.delitem(sys.modules, "nostr_buzz.interop")
    fresh = importlib.import_module("nostr_buzz.interop")
    event = ours()
    with pytest.raises(ImportError, match=r"pip install 'nostr-buzz\[relay\]'"):
        fresh.event_to_nostr_sdk(event)
    with pytest.raises(ImportError, match="pip install pynostr"):
        fresh.event_to_pynostr(event)
    with pytest.raises(ImportError, match="pip install pynostr"):
        fresh.secret_key_to_pynostr(SecretKey.generate())
