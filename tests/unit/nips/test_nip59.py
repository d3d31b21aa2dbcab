"""NIP-59 gift wraps and NIP-17 private messages: interop with rust-nostr (nostr-sdk) both ways,
the official NIP-17 example, wrap → open as an identity, and forged layers refused by reason."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nostr_sdk
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from nostr_buzz.errors import BuzzError, InvalidEvent, Nip17Error, Nip59Error
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.sdk_signer import SdkSigner
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips import nip17, nip44, nip59
from nostr_buzz.signer import SignerError
from tests.support.data import FIXTURES
from tests.support.signers import Forger

ALICE = SecretKey.from_str("5c0c523f52a5b6fad39ed2403092df8cebc36318b39383bca6c00808626fab3a")
BOB = SecretKey.from_str("4b22aa260e4acb7021e32f38a6cdf4b673c6a277755bfce287e370c924dc936d")
MALLORY = SecretKey.from_str("7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a")
NOW = 1_800_000_000


def _sdk_keys(secret: SecretKey) -> Any:
    return nostr_sdk.Keys.parse(secret.hex)


def _sdk_event(event: Event) -> Any:
    return nostr_sdk.Event.from_json(event.to_json())


def _ours(sdk_event: Any) -> Event:
    return Event.from_json(sdk_event.as_json())


def _rumor(author: SecretKey, content: str = "hello", **kw: Any) -> nip59.Rumor:
    return nip17.message(author.public_key.hex, [BOB.public_key.hex], content, created_at=NOW, **kw)


# --- the official example -----------------------------------------------------------------


def test_the_nip17_example_opens_for_the_receiver_and_for_the_senders_copy() -> None:
    doc = json.loads((FIXTURES / "vectors" / "nip17.example.json").read_text(encoding="utf-8"))
    sender = SecretKey.from_str(doc["sender_nsec"])
    receiver = SecretKey.from_str(doc["receiver_nsec"])
    for wrap, key in zip(doc["wraps"], (receiver, sender), strict=True):
        opened = nip59.open_gift_wrap(key, Event.from_dict(wrap))
        assert opened.rumor.kind == nip17.PRIVATE_MESSAGE_KIND
        assert opened.rumor.content == doc["message"]
        assert opened.sender == sender.public_key.hex
        assert nip17.receivers(opened.rumor) == [receiver.public_key.hex]
        assert opened.seal.tags == ()


# --- interop with nostr-sdk, both ways -----------------------------------------------------


def test_a_message_nostr_sdk_wraps_opens_here_with_its_tags() -> None:
    parent = "ab" * 32
    wrap = nostr_sdk.nip17_make_private_msg(
        _sdk_keys(ALICE),
        nostr_sdk.PublicKey.parse(BOB.public_key.hex),
        "are you there? 🦀\n",
        rumor_extra_tags=[nostr_sdk.Tag.parse(["e", parent])],
    )
    opened = nip59.open_gift_wrap(BOB, _ours(wrap))
    assert opened.sender == ALICE.public_key.hex
    assert opened.rumor.pubkey == ALICE.public_key.hex
    assert opened.rumor.kind == 14
    assert opened.rumor.content == "are you there? 🦀\n"
    assert nip17.receivers(opened.rumor) == [BOB.public_key.hex]
    assert nip17.replied_to(opened.rumor) == parent
    assert (
        opened.rumor.id
        == nostr_sdk.UnwrappedGift.from_gift_wrap(_sdk_keys(BOB), wrap).rumor().id().to_hex()
    )


def test_a_reply_we_wrap_opens_in_nostr_sdk_as_a_kind_14_from_us_with_p_and_e() -> None:
    incoming = nip59.open_gift_wrap(
        BOB,
        _ours(
            nostr_sdk.nip17_make_private_msg(
                _sdk_keys(ALICE), nostr_sdk.PublicKey.parse(BOB.public_key.hex), "question"
            )
        ),
    ).rumor
    answer = nip17.reply(BOB.public_key.hex, incoming, "answer", created_at=NOW)
    wraps = dict(nip17.wrap_for_room(BOB, answer, now=NOW))
    assert set(wraps) == {ALICE.public_key.hex, BOB.public_key.hex}
    for target, key in ((ALICE, ALICE), (BOB, BOB)):
        unwrapped = nostr_sdk.UnwrappedGift.from_gift_wrap(
            _sdk_keys(key), _sdk_event(wraps[target.public_key.hex])
        )
        rumor = unwrapped.rumor()
        assert unwrapped.sender().to_hex() == BOB.public_key.hex
        assert rumor.kind().as_u16() == 14
        assert rumor.content() == "answer"
        tags = [t.to_vec() for t in rumor.tags()]
        assert ["p", ALICE.public_key.hex] in tags
        assert ["e", incoming.id] in tags
        assert rumor.id().to_hex() == answer.id


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(st.characters(codec="utf-8"), max_size=2000))
def test_random_contents_cross_between_nostr_sdk_and_us(content: str) -> None:
    ours = nip59.gift_wrap(ALICE, BOB.public_key, _rumor(ALICE, content), now=NOW)
    unwrapped = nostr_sdk.UnwrappedGift.from_gift_wrap(_sdk_keys(BOB), _sdk_event(ours))
    assert unwrapped.rumor().content() == content
    theirs = nostr_sdk.nip17_make_private_msg(
        _sdk_keys(ALICE), nostr_sdk.PublicKey.parse(BOB.public_key.hex), content
    )
    assert nip59.open_gift_wrap(BOB, _ours(theirs)).rumor.content == content


# --- wrap → open is the identity ----------------------------------------------------------

contents = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=300),
    st.text(st.characters(max_codepoint=0x1F), max_size=300),  # control characters
    st.text(st.characters(min_codepoint=0x10000, codec="utf-8"), max_size=300),  # non-BMP
    st.builds(
        lambda head, fill, n: (head + fill * n)[: 60 * 1024],
        st.text(st.characters(codec="utf-8"), max_size=40),
        st.characters(codec="utf-8"),
        st.integers(15_000, 60 * 1024),
    ),  # up to 60 KB (and more bytes than that once encoded)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=contents, backdate=st.integers(0, nip59.MAX_BACKDATE))
def test_wrap_then_open_is_the_identity(content: str, backdate: int) -> None:
    rumor = _rumor(ALICE, content, reply_to="cd" * 32)
    wrap = nip59.gift_wrap(ALICE, BOB.public_key, rumor, now=NOW, randbelow=lambda n: backdate)
    opened = nip59.open_gift_wrap(BOB, wrap)
    assert opened.rumor == rumor
    assert opened.rumor.content == content
    assert opened.sender == ALICE.public_key.hex
    assert wrap.created_at == opened.seal.created_at == NOW - backdate


def test_wraps_and_seals_are_dated_up_to_two_days_back_and_never_later() -> None:
    rumor = _rumor(ALICE)
    assert nip59.random_past(NOW, lambda n: n - 1) == NOW - 2 * 24 * 3600
    assert nip59.random_past(NOW, lambda n: 0) == NOW
    dates = set()
    for _ in range(20):
        wrap = nip59.gift_wrap(ALICE, BOB.public_key, rumor, now=NOW)
        seal = nip59.open_gift_wrap(BOB, wrap).seal
        for ts in (wrap.created_at, seal.created_at):
            assert NOW - nip59.MAX_BACKDATE <= ts <= NOW
            dates.add(ts)
    assert len(dates) > 1  # random, not the sending time
    with pytest.raises(BuzzError):
        nip59.random_past(NOW, lambda n: n + 5)


def test_each_wrap_uses_a_fresh_one_time_key_and_only_names_the_recipient() -> None:
    rumor = _rumor(ALICE)
    a = nip59.gift_wrap(ALICE, BOB.public_key, rumor, now=NOW)
    b = nip59.gift_wrap(ALICE, BOB.public_key, rumor, now=NOW)
    assert a.pubkey != b.pubkey
    assert ALICE.public_key.hex not in (a.pubkey, b.pubkey)
    assert a.tags == (("p", BOB.public_key.hex),)
    assert "hello" not in a.to_json()


# --- forged layers are refused with their reasons ------------------------------------------


def _wrap_seal_text(seal_text: str, recipient: SecretKey = BOB) -> Event:
    """A genuine gift wrap around whatever seal text a forger chose."""
    one_time = SecretKey.generate()
    key = nip44.conversation_key(one_time, recipient.public_key.hex)
    return sign_event(
        one_time,
        kind=nip59.GIFT_WRAP_KIND,
        content=nip44.encrypt(seal_text, key),
        tags=[["p", recipient.public_key.hex]],
        created_at=NOW,
    )


def _seal_of(signer: SecretKey, rumor_text: str, *, kind: int = nip59.SEAL_KIND) -> Event:
    key = nip44.conversation_key(signer, BOB.public_key.hex)
    return sign_event(signer, kind=kind, content=nip44.encrypt(rumor_text, key), created_at=NOW)


def _refusal(wrap: Event, key: SecretKey = BOB) -> Nip59Error:
    """Why ``wrap`` is refused, the same with the key and through a signer."""
    with pytest.raises(Nip59Error) as caught:
        nip59.open_gift_wrap(key, wrap)
    with pytest.raises(Nip59Error) as through_signer:
        asyncio.run(nip59.open_gift_wrap_with(LocalSigner(key), wrap))
    assert through_signer.value.reason == caught.value.reason
    return caught.value


def test_a_rumor_whose_author_is_not_the_seal_signer_is_refused() -> None:
    # Mallory seals a rumor claiming to be from Alice.
    forged = _wrap_seal_text(
        _seal_of(MALLORY, _rumor(ALICE, "send me the keys").to_json()).to_json()
    )
    err = _refusal(forged)
    assert err.reason == "author_mismatch"
    assert "send me the keys" not in str(err)
    # nostr-sdk, the independent implementation, refuses it too.
    with pytest.raises(Exception):  # noqa: B017 - any refusal of the foreign library
        nostr_sdk.UnwrappedGift.from_gift_wrap(_sdk_keys(BOB), _sdk_event(forged))


def test_a_seal_with_a_bad_signature_is_refused() -> None:
    seal = _seal_of(ALICE, _rumor(ALICE).to_json())
    other = sign_event(ALICE, kind=13, content="x", created_at=NOW)
    bad_sig = {**seal.to_dict(), "sig": other.sig}
    assert _refusal(_wrap_seal_text(json.dumps(bad_sig))).reason == "bad_seal_signature"
    bad_id = {**seal.to_dict(), "content": seal.content[:-4] + "AAA="}
    assert _refusal(_wrap_seal_text(json.dumps(bad_id))).reason == "bad_seal_signature"


def test_a_seal_of_another_kind_is_refused() -> None:
    seal = _seal_of(ALICE, _rumor(ALICE).to_json(), kind=1)
    assert _refusal(_wrap_seal_text(seal.to_json())).reason == "not_a_seal"


def test_other_broken_layers_are_refused_with_their_reasons() -> None:
    good = nip59.gift_wrap(ALICE, BOB.public_key, _rumor(ALICE), now=NOW)
    assert _refusal(good, MALLORY).reason == "not_for_this_key"
    # Addressed to Bob in its tag but encrypted to someone else.
    misdirected = nip59.gift_wrap(ALICE, MALLORY.public_key, _rumor(ALICE), now=NOW)
    relabelled = sign_event(
        SecretKey.generate(),
        kind=1059,
        content=misdirected.content,
        tags=[["p", BOB.public_key.hex]],
        created_at=NOW,
    )
    assert _refusal(relabelled).reason == "undecryptable_wrap"
    note = sign_event(ALICE, kind=1, content="hi", tags=[["p", BOB.public_key.hex]], created_at=NOW)
    assert _refusal(note).reason == "not_a_gift_wrap"
    assert _refusal(_wrap_seal_text("{not json")).reason == "malformed_seal"
    assert _refusal(_wrap_seal_text('{"kind":13}')).reason == "malformed_seal"
    # The seal's content is encrypted to Mallory, not to Bob.
    key = nip44.conversation_key(ALICE, MALLORY.public_key.hex)
    stray = sign_event(
        ALICE, kind=13, content=nip44.encrypt(_rumor(ALICE).to_json(), key), created_at=NOW
    )
    assert _refusal(_wrap_seal_text(stray.to_json())).reason == "undecryptable_seal"
    assert _refusal(_wrap_seal_text(_seal_of(ALICE, "[1,2]").to_json())).reason == (
        "malformed_rumor"
    )
    rumor = _rumor(ALICE).to_json()
    wrong_id = json.dumps({**json.loads(rumor), "id": "00" * 32})
    assert _refusal(_wrap_seal_text(_seal_of(ALICE, wrong_id).to_json())).reason == "bad_rumor_id"
    no_id = json.dumps({k: v for k, v in json.loads(rumor).items() if k != "id"})
    assert _refusal(_wrap_seal_text(_seal_of(ALICE, no_id).to_json())).reason == "malformed_rumor"
    surrogate = rumor.replace('"hello"', '"\\ud800"')
    assert _refusal(_wrap_seal_text(_seal_of(ALICE, surrogate).to_json())).reason == (
        "malformed_rumor"
    )


def test_a_signed_rumor_still_opens_its_signature_proves_nothing_extra() -> None:
    signed = sign_event(
        ALICE, kind=14, content="hi", tags=[["p", BOB.public_key.hex]], created_at=NOW
    )
    opened = nip59.open_gift_wrap(BOB, _wrap_seal_text(_seal_of(ALICE, signed.to_json()).to_json()))
    assert opened.rumor.id == signed.id


def test_a_seal_only_carries_its_signers_rumor() -> None:
    with pytest.raises(Nip59Error) as caught:
        nip59.seal(MALLORY, BOB.public_key, _rumor(ALICE), created_at=NOW)
    assert caught.value.reason == "author_mismatch"


def test_rumor_repr_never_shows_the_content() -> None:
    rumor = _rumor(ALICE, "very private words")
    assert "very private words" not in repr(rumor)
    assert "very private words" not in str(rumor)


# --- NIP-17 rumors and relay lists ---------------------------------------------------------


def test_a_reply_keeps_the_room_and_answers_one_message() -> None:
    carol = SecretKey.generate().public_key.hex
    question = nip17.message(
        ALICE.public_key.hex, [BOB.public_key.hex, carol], "q", created_at=NOW, subject="plans"
    )
    answer = nip17.reply(BOB.public_key.hex, question, "a", created_at=NOW + 1)
    assert nip17.room(answer) == nip17.room(question)
    assert nip17.receivers(answer) == [ALICE.public_key.hex, carol]
    assert nip17.replied_to(answer) == question.id
    assert answer.tag_values("subject") == ["plans"]
    wraps = nip17.wrap_for_room(BOB, answer, now=NOW)
    assert [t for t, _ in wraps] == [ALICE.public_key.hex, carol, BOB.public_key.hex]
    with pytest.raises(Nip17Error):
        nip17.wrap_for_room(ALICE, answer, now=NOW)


def test_bad_private_message_arguments_are_typed_errors() -> None:
    me = ALICE.public_key.hex
    for call in (
        lambda: nip17.message(me, [], "x", created_at=NOW),
        lambda: nip17.message(me, ["B" * 64], "x", created_at=NOW),
        lambda: nip17.message("npub", [me], "x", created_at=NOW),
        lambda: nip17.message(me, [me], "x", created_at=NOW, reply_to="note1"),
        lambda: nip17.reply(me, nip17.message(me, [me], "x", created_at=NOW), "y", created_at=NOW),
        lambda: nip17.dm_relay_list(ALICE, [], created_at=NOW),
        lambda: nip17.dm_relay_list(ALICE, ["https://x"], created_at=NOW),
    ):
        with pytest.raises(Nip17Error):
            call()
    with pytest.raises(Nip59Error):
        nip17.message(me, [me], "x", created_at=-1)


def test_dm_relay_lists_round_trip_and_skip_unusable_urls() -> None:
    event = nip17.dm_relay_list(
        ALICE, ["wss://inbox.example", "ws://127.0.0.1:7000"], created_at=NOW
    )
    assert event.kind == 10050
    assert nip17.dm_relays(event) == ("wss://inbox.example", "ws://127.0.0.1:7000")
    messy = sign_event(
        ALICE,
        kind=10050,
        content="",
        tags=[["relay", "https://no"], ["relay", "wss://a"], ["relay"], ["relay", "wss://a"]],
        created_at=NOW,
    )
    assert nip17.dm_relays(messy) == ("wss://a",)
    with pytest.raises(Nip17Error):
        nip17.dm_relays(sign_event(ALICE, kind=1, content="", created_at=NOW))
    # nostr-sdk reads ours as a NIP-17 relay list too.
    sdk = _sdk_event(event)
    assert sdk.kind().as_u16() == 10050
    assert [t.to_vec() for t in sdk.tags()] == [
        ["relay", "wss://inbox.example"],
        ["relay", "ws://127.0.0.1:7000"],
    ]


def test_an_opened_message_becomes_an_event_the_pipeline_takes_but_nobody_can_forge() -> None:
    rumor = _rumor(ALICE, "private words", reply_to="ef" * 32)
    wrap = nip59.gift_wrap(ALICE, BOB.public_key, rumor, now=NOW)
    event = nip59.open_gift_wrap(BOB, wrap).as_event()
    assert isinstance(event, Event)
    assert (event.id, event.pubkey, event.kind, event.content) == (
        rumor.id,
        ALICE.public_key.hex,
        14,
        "private words",
    )
    assert event.wrap == wrap
    assert event.to_json() == rumor.to_json()
    assert event.rumor() == rumor
    assert "private words" not in repr(event)
    with pytest.raises(InvalidEvent):
        nip59.PrivateEvent(
            *[getattr(event, f) for f in ("id", "pubkey", "created_at")], 14, (), "x", "", wrap
        )
    with pytest.raises(InvalidEvent):
        Event.from_json(event.to_json())  # unsigned: never passes for a signed event


# --- through a signer -----------------------------------------------------------------------


def test_wraps_sealed_through_a_nostr_sdk_signer_open_for_everyone_in_the_room() -> None:
    async def wrap() -> list[tuple[str, Event]]:
        signer = await SdkSigner.connect(_sdk_keys(ALICE))
        return await nip17.wrap_for_room_with(signer, _rumor(ALICE, "sealed elsewhere"), now=NOW)

    wraps = dict(asyncio.run(wrap()))
    assert set(wraps) == {ALICE.public_key.hex, BOB.public_key.hex}
    for key in (ALICE, BOB):
        wrapped = wraps[key.public_key.hex]
        assert wrapped.pubkey != ALICE.public_key.hex  # the wrap's one-time key stays here
        opened = asyncio.run(nip59.open_gift_wrap_with(LocalSigner(key), wrapped))
        assert opened.rumor.content == "sealed elsewhere" and opened.sender == ALICE.public_key.hex
    theirs = nostr_sdk.UnwrappedGift.from_gift_wrap(
        _sdk_keys(BOB), _sdk_event(wraps[BOB.public_key.hex])
    )
    assert theirs.rumor().content() == "sealed elsewhere"


def test_a_signer_that_seals_something_else_is_refused() -> None:
    key = nip44.conversation_key(ALICE, BOB.public_key)
    planted = nip44.encrypt(_rumor(ALICE, "planted").to_json(), key)
    swapper = Forger(ALICE, lambda asked: replace(asked, content=planted))
    with pytest.raises(SignerError, match="content differ"):
        asyncio.run(nip59.gift_wrap_with(swapper, BOB.public_key, _rumor(ALICE), now=NOW))


def test_a_seal_through_a_signer_still_carries_only_its_own_rumors() -> None:
    with pytest.raises(Nip59Error) as caught:
        asyncio.run(
            nip59.seal_with(LocalSigner(MALLORY), BOB.public_key, _rumor(ALICE), created_at=NOW)
        )
    assert caught.value.reason == "author_mismatch"


def test_an_ephemeral_wrap_kind_21059_opens_like_a_stored_one() -> None:
    rumor = nip17.message(ALICE.public_key.hex, [BOB.public_key.hex], "brief", created_at=NOW)
    sealed = nip59.seal(ALICE, BOB.public_key, rumor, created_at=NOW)
    wrap = nip59.wrap_seal(sealed, BOB.public_key, now=NOW, kind=nip59.EPHEMERAL_GIFT_WRAP_KIND)
    assert wrap.kind == 21059
    opened = nip59.open_gift_wrap(BOB, wrap)
    assert opened.rumor.id == rumor.id and opened.sender == ALICE.public_key.hex
    # Any other kind is still not a gift wrap.
    other = sign_event(MALLORY, kind=20059, content=wrap.content, tags=wrap.tags, created_at=NOW)
    with pytest.raises(Nip59Error) as err:
        nip59.open_gift_wrap(BOB, other)
    assert err.value.reason == "not_a_gift_wrap"
