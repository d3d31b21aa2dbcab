"""A :class:`~nostr_buzz.signer.Signer` over a secret key held in this process, and the APIs
that take ``secret=`` or ``signer=`` (docs/signers.md).  Above the NIP modules: it encrypts
with NIP-44 (:mod:`nostr_buzz.nips.nip44`), while they take any ``Signer``."""

from __future__ import annotations

from nostr_buzz.event import Event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.signer import EventTemplate, Signer, SignerError, sign_template

__all__ = ["LocalSigner", "as_signer", "signer_of"]


def as_signer(key: SecretKey | Signer) -> Signer:
    """``key`` as a signer: a secret key in a :class:`LocalSigner`, a signer as it is."""
    return LocalSigner(key) if isinstance(key, SecretKey) else key


def signer_of(secret: SecretKey | None, signer: Signer | None) -> Signer | None:
    """The signer of an API that takes ``secret=`` or ``signer=`` (at most one of them)."""
    if secret is not None and signer is not None:
        raise SignerError("give a secret key or a signer, not both")
    if signer is not None and not isinstance(signer, Signer):
        raise SignerError(f"{type(signer).__name__} is not a Signer")
    return LocalSigner(secret) if secret is not None else signer


class LocalSigner:
    """A :class:`Signer` over a secret key held in this process (its value is never shown)."""

    __slots__ = ("_secret",)

    def __init__(self, secret: SecretKey | str) -> None:
        self._secret = secret if isinstance(secret, SecretKey) else SecretKey.from_str(secret)

    def __repr__(self) -> str:
        return f"LocalSigner({self._secret.public_key.bech32})"

    @property
    def public_key(self) -> PublicKey:
        return self._secret.public_key

    async def sign_event(self, unsigned: EventTemplate) -> Event:
        return sign_template(self._secret, unsigned)

    async def nip44_encrypt(self, peer: PublicKey, plaintext: str) -> str:
        return nip44.encrypt(plaintext, nip44.conversation_key(self._secret, peer))

    async def nip44_decrypt(self, peer: PublicKey, payload: str) -> str:
        return nip44.decrypt(payload, nip44.conversation_key(self._secret, peer))
