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

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

import msgspec

from nostr_buzz._lazy import lazy_getattr
from nostr_buzz.errors import BuzzError, InvalidEvent
from nostr_buzz.event import Event, check_structure, sign_event
from nostr_buzz.keys import PublicKey, SecretKey

# The signer over a key held here encrypts with NIP-44, which the NIP modules above this one
# build on: it lives in :mod:`nostr_buzz.local_signer`, and stays reachable from here.
_MOVED = dict.fromkeys(("LocalSigner", "as_signer", "signer_of"), "nostr_buzz.local_signer")
__getattr__ = lazy_getattr(__name__, _MOVED, globals())

__all__ = [
    "EventTemplate",
    "Signer",
    "SignerError",
    "TemplateError",
    "check_signed",
    "sign_template",
    "signed",
    "template",
]


class SignerError(BuzzError):
    """A signer could not do what it was asked (unreachable, refused, timed out, or it
    answered with something else than was asked).  The message never holds secret material."""


class TemplateError(InvalidEvent):
    """An :class:`EventTemplate` was given something NIP-01 does not allow in an event (reason
    ``malformed``); the message names the field and the type given, never its value."""

    def __init__(self, detail: str) -> None:
        super().__init__("malformed", detail)


class EventTemplate(msgspec.Struct, frozen=True):
    """An unsigned event: what a signer is asked to sign (NIP-46 ``sign_event``'s parameter).

    Checked and normalised when made: ``tags`` given as a list of lists (or tuples) of strings
    become a tuple of tuples, as a signed event holds them; anything else is a
    :class:`TemplateError` saying what was given."""

    kind: int
    content: str
    tags: tuple[tuple[str, ...], ...]
    created_at: int

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "tags", _tags_of(self.tags))
        blank_id, blank_sig = "0" * 64, "0" * 128
        try:
            check_structure(
                blank_id, blank_id, self.created_at, self.kind, self.tags, self.content, blank_sig
            )
        except InvalidEvent as exc:
            given = {"kind": self.kind, "content": self.content, "created_at": self.created_at}
            field = next((f for f in given if exc.detail.startswith(f)), None)
            value = given[field] if field is not None else None
            shown = f" (got {value if type(value) is int else _type_name(value)})"
            shown = shown if field is not None else ""
            raise TemplateError(f"EventTemplate {exc.detail}{shown}") from None


def _type_name(value: object) -> str:
    """What was given, for an error: its type only (a value may be anything)."""
    return type(value).__name__


def _tags_of(tags: object) -> tuple[tuple[str, ...], ...]:
    """``tags`` as a tuple of tuples of strings, or :class:`TemplateError` naming what was given
    where (types only: a tag's value is never shown)."""
    if isinstance(tags, tuple) and all(
        type(t) is tuple and t and all(type(v) is str for v in t) for t in tags
    ):
        return tags  # already normal: the common case, no copy
    if isinstance(tags, (str, bytes, bytearray, Mapping, AbstractSet)) or not isinstance(
        tags, Iterable
    ):
        raise TemplateError(
            f"EventTemplate tags must be a list of lists of strings (got {_type_name(tags)})"
        )
    normal: list[tuple[str, ...]] = []
    for i, tag in enumerate(tags):
        if not isinstance(tag, (list, tuple)):
            raise TemplateError(
                f"EventTemplate tags[{i}] must be a list of strings (got {_type_name(tag)})"
            )
        if not tag:
            raise TemplateError(f"EventTemplate tags[{i}] must not be empty")
        for j, value in enumerate(tag):
            if not isinstance(value, str):
                raise TemplateError(
                    f"EventTemplate tags[{i}][{j}] must be a string (got {_type_name(value)})"
                )
        normal.append(tuple(tag))
    return tuple(normal)


def template(
    *, kind: int, content: str, tags: Iterable[Sequence[str]] = (), created_at: int
) -> EventTemplate:
    """An :class:`EventTemplate` from the same arguments :func:`~nostr_buzz.event.sign_event`
    takes (tags as any sequence of string sequences)."""
    return EventTemplate(kind, content, tags, created_at)  # type: ignore[arg-type]


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
        raise SignerError(
            f"the signer signed a different event ({', '.join(differ)} differ)"
            + _added(event.tags, unsigned.tags)
        )
    if event.pubkey != public_key.hex:
        raise SignerError(f"the signer signed with another key ({event.pubkey[:16]}…)")
    return event


def _added(got: tuple[tuple[str, ...], ...], asked: tuple[tuple[str, ...], ...]) -> str:
    """What a signer that tags as it signs added (the names of the tags), when it did."""
    extra = [t for t in got if t not in asked]
    if not extra or any(t not in got for t in asked):
        return ""
    names = ", ".join(dict.fromkeys(t[0] for t in extra))
    return f": it added {len(extra)} tag(s) ({names}) that the event did not carry"


def sign_template(
    secret: SecretKey, unsigned: EventTemplate, aux_rand: bytes | None = None
) -> Event:
    """``unsigned`` signed with a key held here (``aux_rand``: tests only, as
    :func:`~nostr_buzz.event.sign_event`)."""
    return sign_event(
        secret,
        kind=unsigned.kind,
        content=unsigned.content,
        tags=unsigned.tags,
        created_at=unsigned.created_at,
        aux_rand=aux_rand,
    )


async def signed(signer: Signer, unsigned: EventTemplate) -> Event:
    """``unsigned`` signed by ``signer``, checked (:func:`check_signed`): what every place that
    signs through a signer it was given calls."""
    return check_signed(await signer.sign_event(unsigned), unsigned, signer.public_key)
