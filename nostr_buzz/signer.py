"""Who signs: the :class:`Signer` protocol every signing, encrypting and authenticating place
takes, so a bot's key may live in this process (:class:`LocalSigner`), in a NIP-46 remote
signer, or in another library's signer.

The protocol is the shape NIP-07 and NIP-46 give a signer: the public key, ``sign_event`` of an
unsigned template, and NIP-44 v2 encryption to and from a peer.  Its methods are async because
a remote signer answers over relays.  A signer returns a fully signed :class:`Event`; callers
that did not make the signer themselves check that the event is the one they asked for
(:func:`check_signed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44

__all__ = [
    "EventTemplate",
    "LocalSigner",
    "Signer",
    "SignerError",
    "as_signer",
    "check_signed",
    "signed",
    "signer_of",
    "template",
]


class SignerError(BuzzError):
    """A signer could not do what it was asked (unreachable, refused, timed out, or it
    answered with something else than was asked).  The message never holds secret material."""


class EventTemplate(msgspec.Struct, frozen=True):
    """An unsigned event: what a signer is asked to sign (NIP-46 ``sign_event``'s parameter)."""

    kind: int
    content: str
    tags: tuple[tuple[str, ...], ...]
    created_at: int


def template(
    *, kind: int, content: str, tags: Iterable[Sequence[str]] = (), created_at: int
) -> EventTemplate:
    """An :class:`EventTemplate` from the same arguments :func:`~nostr_buzz.event.sign_event`
    takes (tags as any sequence of string sequences)."""
    return EventTemplate(kind, content, tuple(tuple(t) for t in tags), created_at)


@runtime_checkable
class Signer(Protocol):
    """One Nostr key's signing and NIP-44 encryption (see the module docstring).

    ``public_key`` is known once the signer is ready (a remote signer after it connected);
    before that it raises :class:`SignerError`.
    """

    @property
    def public_key(self) -> PublicKey: ...

    async def sign_event(self, unsigned: EventTemplate) -> Event: ...

    async def nip44_encrypt(self, peer: PublicKey, plaintext: str) -> str: ...

    async def nip44_decrypt(self, peer: PublicKey, payload: str) -> str: ...


def check_signed(event: Event, unsigned: EventTemplate, public_key: PublicKey) -> Event:
    """``event`` if it is ``unsigned`` signed by ``public_key`` (an :class:`Event` is verified
    when it is made), else :class:`SignerError` saying what differs: a signer that signs
    something else than it was asked is refused."""
    wanted = (unsigned.kind, unsigned.content, unsigned.tags, unsigned.created_at)
    got = (event.kind, event.content, event.tags, event.created_at)
    if got != wanted:
        fields = ("kind", "content", "tags", "created_at")
        differ = [name for name, a, b in zip(fields, got, wanted, strict=True) if a != b]
        raise SignerError(f"the signer signed a different event ({', '.join(differ)} differ)")
    if event.pubkey != public_key.hex:
        raise SignerError(f"the signer signed with another key ({event.pubkey[:16]}…)")
    return event


async def signed(signer: Signer, unsigned: EventTemplate) -> Event:
    """``unsigned`` signed by ``signer``, checked (:func:`check_signed`): what every place that
    signs through a signer it was given calls."""
    return check_signed(await signer.sign_event(unsigned), unsigned, signer.public_key)


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
        return sign_event(
            self._secret,
            kind=unsigned.kind,
            content=unsigned.content,
            tags=unsigned.tags,
            created_at=unsigned.created_at,
        )

    async def nip44_encrypt(self, peer: PublicKey, plaintext: str) -> str:
        return nip44.encrypt(plaintext, nip44.conversation_key(self._secret, peer))

    async def nip44_decrypt(self, peer: PublicKey, payload: str) -> str:
        return nip44.decrypt(payload, nip44.conversation_key(self._secret, peer))
