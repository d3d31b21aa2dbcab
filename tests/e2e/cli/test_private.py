"""``buzz messages dm`` and ``buzz messages inbox`` against real relays on 127.0.0.1."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import nostr_sdk
import pytest

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip44, nip59
from tests.support.cli import BackgroundLoop, buzz, dead_url, publish
from tests.support.keys import ALICE, BOB
from tests.support.relays import start_relay

pytestmark = pytest.mark.usefixtures("no_ambient_config")


@pytest.fixture
def relay_pair(bg: BackgroundLoop) -> Iterator[tuple[str, str]]:
    """Two fresh relays, so that a test can scan everything each one stored."""
    first, second = bg.call(start_relay()), bg.call(start_relay())
    try:
        yield first.url, second.url
    finally:
        bg.call(first.close())
        bg.call(second.close())


def everything_on(bg: BackgroundLoop, url: str) -> list[Event]:
    result = bg.call(RelayPool([url], timeout=5).query({"limit": 500}))
    assert result.any_finished
    return result.events


def _inbox(capsys: pytest.CaptureFixture[str], key: SecretKey, *extra: str) -> list[dict[str, Any]]:
    code, out, err = buzz(capsys, "messages", "inbox", "--key", key.hex, "--format", "json", *extra)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_dm_reaches_the_receivers_inbox_and_the_senders_copy_without_plaintext_on_the_relay(
    bg: BackgroundLoop,
    relay_pair: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay, _ = relay_pair
    monkeypatch.setenv("BUZZ_RELAYS", relay)
    secret_text = "the launch code is 0000 ü 🐝"
    code, out, err = buzz(
        capsys, "messages", "dm", "--key", ALICE.bech32, "--to", BOB.public_key.bech32,
        secret_text,
    )  # fmt: skip
    assert code == 0, err
    message_id = out.strip()
    assert len(message_id) == 64
    for reader in (BOB, ALICE):
        [message] = _inbox(capsys, reader)
        assert message["id"] == message_id
        assert message["pubkey"] == ALICE.public_key.hex
        assert message["kind"] == 14
        assert message["content"] == secret_text
        assert message["tags"] == [["p", BOB.public_key.hex]]
        assert "sig" not in message
    stored = everything_on(bg, relay)
    assert sorted(e.kind for e in stored) == [1059, 1059]
    assert {e.tags for e in stored} == {
        (("p", BOB.public_key.hex),),
        (("p", ALICE.public_key.hex),),
    }
    for event in stored:
        assert ALICE.public_key.hex != event.pubkey
        assert "launch" not in event.to_json()
    # nostr-sdk, independently, reads Bob's copy as a kind 14 from Alice.
    bobs = next(e for e in stored if e.tags == (("p", BOB.public_key.hex),))
    unwrapped = nostr_sdk.UnwrappedGift.from_gift_wrap(
        nostr_sdk.Keys.parse(BOB.hex), nostr_sdk.Event.from_json(bobs.to_json())
    )
    assert unwrapped.sender().to_hex() == ALICE.public_key.hex
    assert unwrapped.rumor().content() == secret_text


def test_dm_goes_to_the_receivers_dm_relays_and_inbox_reads_them(
    bg: BackgroundLoop,
    relay_pair: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    general, inbox_relay = relay_pair
    # Bob announces, on the general relay, that he reads private messages on inbox_relay.
    publish(bg, general, nip17.dm_relay_list(BOB, [inbox_relay], created_at=1_700_000_000))
    monkeypatch.setenv("BUZZ_RELAYS", general)
    code, out, err = buzz(
        capsys, "messages", "dm", "--key", ALICE.hex, "--to", BOB.public_key.hex, "--json", "hi"
    )
    assert code == 0, err
    sent = json.loads(out)
    assert sent["accepted"] == [inbox_relay]
    assert sent["dmRelays"] is True
    assert sent["copyAccepted"] == [general]
    on_inbox = [e for e in everything_on(bg, inbox_relay) if e.kind == 1059]
    assert [e.tags for e in on_inbox] == [(("p", BOB.public_key.hex),)]
    on_general = [e for e in everything_on(bg, general) if e.kind == 1059]
    assert [e.tags for e in on_general] == [(("p", ALICE.public_key.hex),)]
    # Bob's inbox, configured with the general relay only, follows his own 10050 list.
    [message] = _inbox(capsys, BOB)
    assert (message["id"], message["content"]) == (sent["id"], "hi")


def test_dm_reads_the_text_from_stdin(
    relay_pair: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay, _ = relay_pair
    monkeypatch.setenv("BUZZ_RELAYS", relay)
    text = "line one\nline two, ünïcødé\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    code, _, err = buzz(
        capsys, "messages", "dm", "--key", ALICE.hex, "--to", BOB.public_key.hex, "-"
    )
    assert code == 0, err
    [message] = _inbox(capsys, BOB)
    assert message["content"] == "line one\nline two, ünïcødé"  # the final newline dropped


def test_inbox_refuses_forged_wraps_and_never_shows_their_text(
    bg: BackgroundLoop,
    relay_pair: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay, _ = relay_pair
    monkeypatch.setenv("BUZZ_RELAYS", relay)
    mallory = SecretKey.generate()
    # Mallory seals a rumor that claims Alice wrote it.
    rumor = nip17.message(
        ALICE.public_key.hex, [BOB.public_key.hex], "forged: pay mallory", created_at=1_700_000_000
    )
    seal = sign_event(
        mallory,
        kind=13,
        content=nip44.encrypt(rumor.to_json(), nip44.conversation_key(mallory, BOB.public_key.hex)),
        created_at=1_700_000_000,
    )
    one_time = SecretKey.generate()
    forged = sign_event(
        one_time,
        kind=1059,
        content=nip44.encrypt(seal.to_json(), nip44.conversation_key(one_time, BOB.public_key.hex)),
        tags=[["p", BOB.public_key.hex]],
        created_at=1_700_000_000,
    )
    publish(bg, relay, forged)
    genuine = nip59.gift_wrap(
        ALICE,
        BOB.public_key,
        nip17.message(ALICE.public_key.hex, [BOB.public_key.hex], "real", created_at=1_700_000_001),
        now=1_700_000_001,
    )
    publish(bg, relay, genuine)
    code, out, err = buzz(capsys, "messages", "inbox", "--key", BOB.hex)
    assert code == 0, err
    assert "real" in out
    assert "mallory" not in out + err
    assert "gift wraps refused: 1 author_mismatch" in err


def test_dm_bad_input_and_unreachable_relays(
    relay_pair: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    relay, _ = relay_pair
    base = ["messages", "dm", "--key", ALICE.hex, "--relay", relay]
    code, _, err = buzz(capsys, *base, "--to", BOB.bech32, "hi")
    assert code == 1
    assert BOB.bech32 not in err  # a secret key given as --to is never repeated
    code, _, _ = buzz(capsys, *base, "--to", BOB.public_key.hex, "  ")
    assert code == 1
    code, _, err = buzz(
        capsys, "messages", "dm", "--key", ALICE.hex, "--relay", dead_url(),
        "--timeout", "2", "--to", BOB.public_key.hex, "hi",
    )  # fmt: skip
    assert code == 2
    assert "no relay accepted" in err
    code, _, err = buzz(capsys, "messages", "inbox", "--relay", relay)
    assert code == 1
    assert "secret key" in err
