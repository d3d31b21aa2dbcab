"""The Signer protocol and the in-process signer (nostr_buzz/signer.py)."""

from __future__ import annotations

import asyncio

import pytest

from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.signer import LocalSigner, Signer, SignerError, check_signed, template


def test_a_local_signer_signs_the_template_it_is_given_with_its_key() -> None:
    secret = SecretKey.generate()
    signer = LocalSigner(secret)
    assert isinstance(signer, Signer)
    unsigned = template(kind=1, content="hi", tags=[["p", "a" * 64]], created_at=1_700_000_000)
    event = asyncio.run(signer.sign_event(unsigned))
    assert event.pubkey == secret.public_key.hex
    assert check_signed(event, unsigned, signer.public_key) is event


def test_a_local_signer_never_shows_its_secret() -> None:
    secret = SecretKey.generate()
    shown = repr(LocalSigner(secret.hex)) + str(LocalSigner(secret))
    assert secret.hex not in shown and secret.bech32 not in shown
    assert secret.public_key.bech32 in shown


def test_nip44_through_a_local_signer_opens_with_the_peers_key() -> None:
    alice, bob = SecretKey.generate(), SecretKey.generate()
    payload = asyncio.run(LocalSigner(alice).nip44_encrypt(bob.public_key, "secret words"))
    assert nip44.decrypt(payload, nip44.conversation_key(bob, alice.public_key)) == "secret words"
    opened = asyncio.run(LocalSigner(bob).nip44_decrypt(alice.public_key, payload))
    assert opened == "secret words"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"content": "other"}, "content"),
        ({"kind": 7}, "kind"),
        ({"created_at": 1}, "created_at"),
        ({"tags": [["e", "b" * 64]]}, "tags"),
    ],
)
def test_an_event_other_than_the_one_asked_for_is_refused(
    change: dict[str, object], named: str
) -> None:
    secret = SecretKey.generate()
    asked = {"kind": 1, "content": "asked", "tags": [], "created_at": 1_700_000_000}
    unsigned = template(**asked)  # type: ignore[arg-type]
    other = sign_event(secret, **{**asked, **change})  # type: ignore[arg-type]
    with pytest.raises(SignerError, match=named):
        check_signed(other, unsigned, secret.public_key)


def test_an_event_signed_by_another_key_is_refused() -> None:
    mine, theirs = SecretKey.generate(), SecretKey.generate()
    unsigned = template(kind=1, content="x", created_at=1_700_000_000)
    event = asyncio.run(LocalSigner(theirs).sign_event(unsigned))
    with pytest.raises(SignerError, match="another key"):
        check_signed(event, unsigned, mine.public_key)
