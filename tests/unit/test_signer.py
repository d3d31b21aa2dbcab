"""The Signer protocol and the in-process signer (nostr_buzz/signer.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import nostr_sdk
import pytest

from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.bot.supervisor import secret_values
from nostr_buzz.errors import ConfigError
from nostr_buzz.event import sign_event
from nostr_buzz.io.sdk_signer import SdkSigner
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.local_signer import LocalSigner, as_signer, signer_of
from nostr_buzz.nips import nip42, nip44
from nostr_buzz.signer import (
    EventTemplate,
    Signer,
    SignerError,
    TemplateError,
    check_signed,
    signed,
    template,
)


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


def test_a_signer_that_adds_tags_is_told_which() -> None:
    secret = SecretKey.generate()
    unsigned = template(kind=1, content="x", created_at=1_700_000_000)
    tagged = sign_event(
        secret, kind=1, content="x", tags=[["p", "a" * 64]], created_at=1_700_000_000
    )
    with pytest.raises(SignerError, match=r"tags differ\): it added 1 tag\(s\) \(p\)"):
        check_signed(tagged, unsigned, secret.public_key)


def test_an_event_template_normalises_its_tags_when_made() -> None:
    unsigned = EventTemplate(1, "x", [["p", "a" * 64], ("e", "b" * 64, "")], 1)  # type: ignore[arg-type]
    assert unsigned.tags == (("p", "a" * 64), ("e", "b" * 64, ""))
    assert unsigned == template(kind=1, content="x", tags=unsigned.tags, created_at=1)
    secret = SecretKey.generate()
    event = asyncio.run(signed(LocalSigner(secret), unsigned))  # the list once broke this
    assert event.tags == unsigned.tags


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"tags": "p"}, r"tags must be a list of lists of strings \(got str\)"),
        ({"tags": {"p": "x"}}, r"tags must be a list of lists of strings \(got dict\)"),
        ({"tags": [["p", 1]]}, r"tags\[0\]\[1\] must be a string \(got int\)"),
        ({"tags": [["p"], "e"]}, r"tags\[1\] must be a list of strings \(got str\)"),
        ({"tags": [[]]}, r"tags\[0\] must not be empty"),
        ({"kind": True}, r"kind must be an integer from 0 to 65535 \(got bool\)"),
        ({"kind": 70_000}, r"\(got 70000\)"),
        ({"content": b"x"}, r"content must be a string .*\(got bytes\)"),
        ({"created_at": 1.5}, r"created_at must be an integer .*\(got float\)"),
    ],
)
def test_an_event_template_refuses_wrong_shapes_saying_what_was_given(
    given: dict[str, object], said: str
) -> None:
    fields = {"kind": 1, "content": "x", "tags": (), "created_at": 1, **given}
    with pytest.raises(TemplateError, match=said):
        EventTemplate(**fields)  # type: ignore[arg-type]


def test_an_event_signed_by_another_key_is_refused() -> None:
    mine, theirs = SecretKey.generate(), SecretKey.generate()
    unsigned = template(kind=1, content="x", created_at=1_700_000_000)
    event = asyncio.run(LocalSigner(theirs).sign_event(unsigned))
    with pytest.raises(SignerError, match="another key"):
        check_signed(event, unsigned, mine.public_key)


# --- what takes a signer ------------------------------------------------------------------------


class _Lying(LocalSigner):
    """Signs with a key other than the one it reports."""

    @property
    def public_key(self) -> PublicKey:
        return SecretKey.generate().public_key


def test_signed_checks_what_a_signer_returns() -> None:
    secret = SecretKey.generate()
    unsigned = template(kind=1, content="x", created_at=1_700_000_000)
    assert asyncio.run(signed(LocalSigner(secret), unsigned)).pubkey == secret.public_key.hex
    with pytest.raises(SignerError, match="another key"):
        asyncio.run(signed(_Lying(secret), unsigned))


def test_an_api_takes_a_secret_or_a_signer_not_both() -> None:
    secret = SecretKey.generate()
    assert signer_of(None, None) is None
    assert signer_of(secret, None).public_key == secret.public_key  # type: ignore[union-attr]
    local = LocalSigner(secret)
    assert signer_of(None, local) is local and as_signer(local) is local
    assert as_signer(secret).public_key == secret.public_key
    with pytest.raises(SignerError, match="not both"):
        signer_of(secret, local)
    with pytest.raises(SignerError, match="is not a Signer"):
        signer_of(None, "nsec1notasigner")  # type: ignore[arg-type]


def test_the_auth_event_of_a_signer_is_the_one_signed_with_a_key() -> None:
    secret = SecretKey.generate()
    asked = nip42.auth_template(
        relay_url="ws://127.0.0.1:1", challenge="c", created_at=1_700_000_000
    )
    event = asyncio.run(signed(LocalSigner(secret), asked))
    direct = nip42.auth_event(
        secret, relay_url="ws://127.0.0.1:1", challenge="c", created_at=1_700_000_000
    )
    assert (event.kind, event.tags, event.content) == (direct.kind, direct.tags, direct.content)


def test_a_nostr_sdk_signer_signs_encrypts_and_is_checked() -> None:
    secret = SecretKey.generate()
    peer = SecretKey.generate()

    async def use() -> tuple[str, str]:
        signer = await SdkSigner.connect(nostr_sdk.Keys.parse(secret.hex))
        assert isinstance(signer, Signer) and secret.hex not in repr(signer)
        unsigned = template(kind=1, content="hi", tags=[["t", "x"]], created_at=1_700_000_000)
        event = await signed(signer, unsigned)
        payload = await signer.nip44_encrypt(peer.public_key, "words")
        return event.pubkey, await LocalSigner(peer).nip44_decrypt(secret.public_key, payload)

    assert asyncio.run(use()) == (secret.public_key.hex, "words")


def test_something_that_is_not_a_nostr_sdk_signer_is_a_signer_error() -> None:
    with pytest.raises(SignerError, match="not a nostr-sdk signer"):
        asyncio.run(SdkSigner.connect(object()))


class _FailingSdk:
    async def get_public_key_async(self) -> None:
        raise RuntimeError("bunker unreachable near nsec1" + "q" * 58)


def test_a_nostr_sdk_signers_failure_is_a_signer_error_without_secrets() -> None:
    with pytest.raises(SignerError) as caught:
        asyncio.run(SdkSigner.connect(_FailingSdk()))
    assert "bunker unreachable" in str(caught.value) and "nsec1q" not in str(caught.value)


def test_plugin_config_takes_the_agents_key_or_a_signer_exactly_once() -> None:
    secret = SecretKey.generate()
    base = {
        "owner": SecretKey.generate().public_key,
        "read_relays": ("ws://127.0.0.1:1",),
        "write_relays": ("ws://127.0.0.1:1",),
        "agent_command": "agent",
    }
    from_secret = PluginConfig(agent_secret=secret, **base)  # type: ignore[arg-type]
    assert isinstance(from_secret.signer, LocalSigner)
    assert from_secret.signer.public_key == secret.public_key
    assert replace(from_secret, agent_command="other").signer.public_key == secret.public_key
    remote = PluginConfig(signer=_Lying(secret), **base)  # type: ignore[arg-type]
    assert remote.agent_secret is None and secret_values(remote) == []
    assert secret.hex in secret_values(from_secret)
    with pytest.raises(ConfigError, match="agent_secret or signer"):
        PluginConfig(**base)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not both"):
        PluginConfig(agent_secret=secret, signer=_Lying(secret), **base)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is not a Signer"):
        PluginConfig(signer=secret, **base)  # type: ignore[arg-type]


def test_the_local_signer_is_still_reachable_where_it_was() -> None:
    # It moved above the NIP modules (nostr_buzz.local_signer); the old import keeps working.
    import nostr_buzz
    import nostr_buzz.local_signer as local
    import nostr_buzz.signer as signer

    assert signer.LocalSigner is local.LocalSigner is nostr_buzz.LocalSigner
    assert signer.as_signer is local.as_signer and signer.signer_of is local.signer_of
    with pytest.raises(AttributeError):
        _ = signer.NoSuchName  # type: ignore[attr-defined]
