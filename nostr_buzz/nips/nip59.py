"""NIP-59 gift wraps, pure: rumor (unsigned event) → seal (kind 13) → gift wrap (kind 1059).

A *rumor* is an event without a signature; its id is computed exactly as for a signed event.
The sender signs a *seal* whose content is the rumor encrypted (NIP-44 v2) to the recipient,
and a one-time key signs the *gift wrap* whose content is the seal encrypted to the recipient
and whose ``p`` tag names the recipient.  Opening checks every layer and refuses with a
:class:`~nostr_buzz.errors.Nip59Error` whose ``reason`` names the failed check; no message ever
holds the rumor's text.

Pure apart from the documented randomness of sending: the one-time key, the NIP-44 nonces and
the timestamps (each layer dated a random 0 to 2 days before ``now``, as NIP-59 advises, so that
the real sending time is hidden) come from the OS CSPRNG unless a test pins them.  No clock is
read: the caller passes ``now``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Final, NamedTuple

import msgspec

from nostr_buzz.errors import BuzzError, InvalidEvent, Nip44Error, Nip59Error
from nostr_buzz.event import Event, Tags, UnsignedEvent, check_structure, compute_id, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip01, nip44
from nostr_buzz.signer import Signer, signed, template
from nostr_buzz.text.unicode import utf8_document

__all__ = [
    "EPHEMERAL_GIFT_WRAP_KIND",
    "GIFT_WRAP_KIND",
    "MAX_BACKDATE",
    "SEAL_KIND",
    "WRAP_KINDS",
    "Opened",
    "PrivateEvent",
    "Randomness",
    "Rumor",
    "gift_wrap",
    "gift_wrap_with",
    "open_gift_wrap",
    "open_gift_wrap_with",
    "random_past",
    "seal",
    "seal_with",
    "wrap_seal",
]

SEAL_KIND: Final = 13
GIFT_WRAP_KIND: Final = nip01.GIFT_WRAP_KIND
#: The ephemeral gift wrap (relays pass it on without storing it): opened like kind 1059.
EPHEMERAL_GIFT_WRAP_KIND: Final = nip01.EPHEMERAL_GIFT_WRAP_KIND
#: Both kinds of gift wrap, each opened and checked the same way.
WRAP_KINDS: Final = nip01.WRAP_KINDS
#: Seals and wraps are dated up to this many seconds (two days) before the sending time.
MAX_BACKDATE: Final = nip01.GIFT_WRAP_BACKDATE


class Rumor(UnsignedEvent, frozen=True):
    """An unsigned event.  Its ``id`` always matches its fields: build one with :meth:`build`
    or :meth:`from_json`, which check it."""

    @classmethod
    def build(
        cls,
        pubkey: str,
        *,
        kind: int,
        content: str,
        tags: Iterable[Sequence[str]] = (),
        created_at: int,
    ) -> Rumor:
        """A rumor by ``pubkey`` (64 lowercase hex); raises ``Nip59Error('malformed_rumor')``."""
        try:
            tag_tuple: Tags = tuple(tuple(t) for t in tags)
        except TypeError:
            raise Nip59Error("malformed_rumor", "tags must be a list of lists of strings") from None
        _check_rumor_fields(pubkey, created_at, kind, tag_tuple, content)
        return cls(
            compute_id(pubkey, created_at, kind, tag_tuple, content),
            pubkey,
            created_at,
            kind,
            tag_tuple,
            content,
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Rumor:
        """Strictly parse a rumor; a ``sig`` field, if any, is ignored (it proves nothing here:
        the seal's signature is what authenticates the author)."""
        try:
            raw = utf8_document(data)
            wire = _decode_rumor(raw)
        except (UnicodeError, TypeError):
            raise Nip59Error("malformed_rumor", "the rumor is not UTF-8 JSON text") from None
        except msgspec.DecodeError as exc:
            # msgspec names the path and the expected type, never a value: safe to repeat.
            raise Nip59Error("malformed_rumor", str(exc)) from None
        except RecursionError:
            raise Nip59Error("malformed_rumor", "JSON nested too deeply") from None
        _check_rumor_fields(wire.pubkey, wire.created_at, wire.kind, wire.tags, wire.content)
        if compute_id(wire.pubkey, wire.created_at, wire.kind, wire.tags, wire.content) != wire.id:
            raise Nip59Error("bad_rumor_id", "the rumor's id does not match its fields")
        return wire

    def to_json(self) -> str:
        """Canonical one-line JSON of the six fields (no ``sig``), escaped as for an event id."""
        return _encode(self).decode("utf-8")

    def tag_values(self, name: str) -> list[str]:
        """The second element of every tag called ``name`` that has one, in tag order."""
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]

    def __repr__(self) -> str:  # the content is private: never in a repr, log or error
        return f"Rumor(id={self.id!r}, pubkey={self.pubkey!r}, kind={self.kind})"


_decode_rumor = msgspec.json.Decoder(Rumor).decode
_encode = msgspec.json.Encoder().encode


def _check_rumor_fields(
    pubkey: object, created_at: object, kind: object, tags: object, content: object
) -> None:
    try:
        check_structure("0" * 64, pubkey, created_at, kind, tags, content, "0" * 128)
    except InvalidEvent as exc:
        raise Nip59Error("malformed_rumor", exc.detail) from None


class Opened(NamedTuple):
    """A gift wrap opened and checked: the rumor, the seal that authenticates it, the wrap."""

    rumor: Rumor
    seal: Event
    wrap: Event

    @property
    def sender(self) -> str:
        """The rumor's author, proven by the seal's signature (64 lowercase hex)."""
        return self.seal.pubkey

    def as_event(self) -> PrivateEvent:
        """The rumor as an :class:`Event` the gate, routing and queue can take like any other."""
        token = _OPENED.set(True)
        try:
            r = self.rumor
            return PrivateEvent(
                r.id, r.pubkey, r.created_at, r.kind, r.tags, r.content, "", self.wrap
            )
        finally:
            _OPENED.reset(token)


# Set only while Opened.as_event builds the PrivateEvent of a gift wrap it has just checked.
_OPENED: ContextVar[bool] = ContextVar("nostr_buzz_opened_gift_wrap", default=False)


class PrivateEvent(Event, frozen=True):
    """A private message as an event: the rumor of a gift wrap addressed to us.

    It has no signature of its own (``sig`` is empty): the seal's signature authenticated its
    author when the wrap was opened, and only :meth:`Opened.as_event` builds one.  ``wrap`` is
    the gift wrap it came in (signed, encrypted): what may be stored or fetched again.
    :meth:`to_json` gives the rumor (no ``sig``, no ``wrap``); a private event is never
    published.
    """

    wrap: Event

    def __post_init__(self) -> None:
        if not _OPENED.get():
            raise InvalidEvent("malformed", "a private event comes only from an opened gift wrap")

    def to_json(self) -> str:
        return self.rumor().to_json()

    def rumor(self) -> Rumor:
        return Rumor(self.id, self.pubkey, self.created_at, self.kind, self.tags, self.content)

    def __repr__(self) -> str:  # the content is private: never in a repr, log or error
        return f"PrivateEvent(id={self.id!r}, pubkey={self.pubkey!r}, kind={self.kind})"


#: ``randbelow(n)`` → an integer in ``[0, n)``; the default is the OS CSPRNG.
Randomness = Callable[[int], int]


def random_past(now: int, randbelow: Randomness = secrets.randbelow) -> int:
    """A timestamp 0 to :data:`MAX_BACKDATE` seconds before ``now`` (never after it)."""
    offset = randbelow(MAX_BACKDATE + 1)
    if type(offset) is not int or not 0 <= offset <= MAX_BACKDATE:
        raise BuzzError("randbelow returned a value outside [0, MAX_BACKDATE]")
    return max(0, now - offset)


def _recipient_hex(recipient: PublicKey | str) -> str:
    if isinstance(recipient, PublicKey):
        return recipient.hex
    return PublicKey.from_str(recipient).hex


def seal(
    sender: SecretKey,
    recipient: PublicKey | str,
    rumor: Rumor,
    *,
    created_at: int,
    nonce: bytes | None = None,
) -> Event:
    """The kind 13 seal: ``rumor`` encrypted from ``sender`` to ``recipient``, signed, no tags.

    The rumor must be the sender's own (a seal vouches for its author).
    """
    _check_author(rumor, sender.public_key)
    key = nip44.conversation_key(sender, _recipient_hex(recipient))
    content = nip44.encrypt(rumor.to_json(), key, nonce)
    return sign_event(sender, kind=SEAL_KIND, content=content, created_at=created_at)


async def seal_with(
    signer: Signer, recipient: PublicKey | str, rumor: Rumor, *, created_at: int
) -> Event:
    """:func:`seal` through a :class:`~nostr_buzz.signer.Signer`: it encrypts the rumor and
    signs the seal (checked: a signer that signs something else is refused)."""
    _check_author(rumor, signer.public_key)
    peer = PublicKey.from_str(_recipient_hex(recipient))
    content = await signer.nip44_encrypt(peer, rumor.to_json())
    return await signed(signer, template(kind=SEAL_KIND, content=content, created_at=created_at))


def _check_author(rumor: Rumor, sender: PublicKey) -> None:
    if rumor.pubkey != sender.hex:
        raise Nip59Error("author_mismatch", "a seal can only carry a rumor by its signer")


def wrap_seal(
    sealed: Event,
    recipient: PublicKey | str,
    *,
    now: int,
    randbelow: Randomness = secrets.randbelow,
    one_time_key: SecretKey | None = None,
    relay_hint: str | None = None,
    kind: int = GIFT_WRAP_KIND,
) -> Event:
    """The kind 1059 gift wrap of ``sealed`` for ``recipient`` (``p`` tag), dated up to two
    days before ``now`` and signed by ``one_time_key``, a fresh key unless a test pins it: the
    sender's own key (or signer) is never needed for this layer.  ``kind``: 21059 for the
    ephemeral wrap, which relays pass on without storing."""
    if kind not in WRAP_KINDS:
        raise Nip59Error("not_a_gift_wrap", f"kind {kind} is not a gift wrap kind")
    recipient_hex = _recipient_hex(recipient)
    wrapper = one_time_key if one_time_key is not None else SecretKey.generate()
    key = nip44.conversation_key(wrapper, recipient_hex)
    p_tag = ["p", recipient_hex] if not relay_hint else ["p", recipient_hex, relay_hint]
    return sign_event(
        wrapper,
        kind=kind,
        content=nip44.encrypt(sealed.to_json(), key),
        tags=[p_tag],
        created_at=random_past(now, randbelow),
    )


def gift_wrap(
    sender: SecretKey,
    recipient: PublicKey | str,
    rumor: Rumor,
    *,
    now: int,
    randbelow: Randomness = secrets.randbelow,
    one_time_key: SecretKey | None = None,
    relay_hint: str | None = None,
) -> Event:
    """Seal ``rumor`` and wrap it for ``recipient`` (kind 1059, ``p`` tag to the recipient).

    The seal and the wrap get independent random dates up to two days before ``now``; the wrap
    is signed by ``one_time_key``, a fresh key unless a test pins it.
    """
    recipient_hex = _recipient_hex(recipient)
    sealed = seal(sender, recipient_hex, rumor, created_at=random_past(now, randbelow))
    return wrap_seal(
        sealed,
        recipient_hex,
        now=now,
        randbelow=randbelow,
        one_time_key=one_time_key,
        relay_hint=relay_hint,
    )


async def gift_wrap_with(
    signer: Signer,
    recipient: PublicKey | str,
    rumor: Rumor,
    *,
    now: int,
    randbelow: Randomness = secrets.randbelow,
    relay_hint: str | None = None,
) -> Event:
    """:func:`gift_wrap` through a signer: the seal by ``signer`` (:func:`seal_with`), the
    wrap by a fresh one-time key held here."""
    recipient_hex = _recipient_hex(recipient)
    when = random_past(now, randbelow)
    sealed = await seal_with(signer, recipient_hex, rumor, created_at=when)
    return wrap_seal(sealed, recipient_hex, now=now, randbelow=randbelow, relay_hint=relay_hint)


def open_gift_wrap(recipient: SecretKey, wrap: Event) -> Opened:
    """Open a gift wrap addressed to ``recipient`` and check every layer, in this order:

    the wrap is kind 1059 or its ephemeral twin 21059 (``not_a_gift_wrap``) and ``p``-tags the
    recipient (``not_for_this_key``); its content decrypts (``undecryptable_wrap``) to a well-formed
    (``malformed_seal``), correctly signed (``bad_seal_signature``) kind 13 event
    (``not_a_seal``); the seal's content decrypts (``undecryptable_seal``) to a well-formed
    rumor (``malformed_rumor``) whose id matches (``bad_rumor_id``) and whose author is the
    seal's signer (``author_mismatch``).
    """
    _check_wrap(wrap, recipient.public_key)
    try:
        seal_json = nip44.decrypt(wrap.content, nip44.conversation_key(recipient, wrap.pubkey))
    except Nip44Error as exc:
        raise Nip59Error("undecryptable_wrap", str(exc)) from None
    sealed = _read_seal(seal_json)
    try:
        rumor_json = nip44.decrypt(sealed.content, nip44.conversation_key(recipient, sealed.pubkey))
    except Nip44Error as exc:
        raise Nip59Error("undecryptable_seal", str(exc)) from None
    return _read_rumor(rumor_json, sealed, wrap)


async def open_gift_wrap_with(signer: Signer, wrap: Event) -> Opened:
    """:func:`open_gift_wrap` through a signer (its two NIP-44 decryptions, the same checks in
    the same order).  A signer that cannot be asked raises
    :class:`~nostr_buzz.signer.SignerError`, not :class:`~nostr_buzz.errors.Nip59Error`: the
    wrap may well be fine."""
    _check_wrap(wrap, signer.public_key)
    try:
        seal_json = await signer.nip44_decrypt(PublicKey.from_str(wrap.pubkey), wrap.content)
    except Nip44Error as exc:
        raise Nip59Error("undecryptable_wrap", str(exc)) from None
    sealed = _read_seal(seal_json)
    try:
        rumor_json = await signer.nip44_decrypt(PublicKey.from_str(sealed.pubkey), sealed.content)
    except Nip44Error as exc:
        raise Nip59Error("undecryptable_seal", str(exc)) from None
    return _read_rumor(rumor_json, sealed, wrap)


def _check_wrap(wrap: Event, recipient: PublicKey) -> None:
    if wrap.kind not in WRAP_KINDS:
        raise Nip59Error(
            "not_a_gift_wrap",
            f"kind {wrap.kind}, expected {GIFT_WRAP_KIND} or {EPHEMERAL_GIFT_WRAP_KIND}",
        )
    if recipient.hex not in wrap.tag_values("p"):
        raise Nip59Error("not_for_this_key", "the wrap's p tags do not name this key")


def _read_seal(seal_json: str) -> Event:
    try:
        sealed = Event.from_json(seal_json)
    except InvalidEvent as exc:
        if exc.reason == "malformed":
            raise Nip59Error("malformed_seal", exc.detail) from None
        raise Nip59Error("bad_seal_signature", exc.reason) from None
    if sealed.kind != SEAL_KIND:
        raise Nip59Error("not_a_seal", f"kind {sealed.kind}, expected {SEAL_KIND}")
    return sealed


def _read_rumor(rumor_json: str, sealed: Event, wrap: Event) -> Opened:
    rumor = Rumor.from_json(rumor_json)
    if rumor.pubkey != sealed.pubkey:
        raise Nip59Error("author_mismatch", "the rumor's author is not the seal's signer")
    return Opened(rumor, sealed, wrap)
