"""NIP-TC: the thread checkpoint (kind 34200), as ``nips/NIP-TC.md`` defines it.

A thread checkpoint is an addressable event the agent signs: a summary of one agent session's
thread (or conversation) up to a named event, its content NIP-44 v2 encrypted between the agent
and its owner (either of them reads it, as with NIP-AM metrics).  Its ``d`` tag is a hash of the
session key (:func:`checkpoint_d`), so no channel, thread or conversation is named in clear.

A reader trusts nothing a relay says: it takes only an event signed by the agent's key, with the
tag layout below, whose content decrypts to a valid payload for the session key it asked for
(:func:`open_checkpoint_event`, :func:`open_own_checkpoint_event`).

Pure: no clock is read (``created_at`` comes from the payload's timestamp); the only randomness
is the NIP-44 nonce and the BIP-340 aux bytes, from the OS CSPRNG unless pinned (tests).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, Literal, get_args

import msgspec
from msgspec import UNSET, UnsetType

from nostr_buzz.errors import CheckpointError, Nip44Error
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.keys import PublicKey, SecretKey, as_public_key, as_secret_key
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip_am import created_at_of
from nostr_buzz.nips.to_owner import MAX_CONTENT_CHARS, Sealing
from nostr_buzz.signer import EventTemplate, Signer
from nostr_buzz.text.unicode import utf8_document

__all__ = [
    "CHECKPOINT_KIND",
    "MAX_PAYLOAD_BYTES",
    "METHODS",
    "CheckpointError",
    "CheckpointMethod",
    "ThreadCheckpoint",
    "build_checkpoint_event",
    "build_checkpoint_event_async",
    "check_layout",
    "checkpoint_d",
    "checkpoint_filter",
    "open_checkpoint_event",
    "open_own_checkpoint_event",
]

#: Addressable (30000-39999), next to NIP-AM's metric kind 44200: relays keep the newest.
CHECKPOINT_KIND: Final = 34200
#: Cap on the UTF-8 JSON plaintext, as NIP-AM's: any NIP-44 implementation decrypts it.
MAX_PAYLOAD_BYTES: Final = 65535
#: The domain of the ``d`` tag's hash: no other hash of a session key can be taken for it.
D_DOMAIN: Final = "nostr-buzz thread checkpoint v1"

#: How the summary was made: the agent's own summary of a compaction, or the answer to a turn
#: that asked the agent for one.
CheckpointMethod = Literal["agent_compaction", "summary_turn"]
METHODS: Final = frozenset(get_args(CheckpointMethod))

_EVENT_ID: Final = re.compile(r"[0-9a-f]{64}")


class ThreadCheckpoint(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The decrypted content of a kind-34200 event (camelCase on the wire).

    ``session_key`` is the agent session's key (``{channel}/{root}`` under ``thread`` scope,
    the channel under ``channel`` scope, a private conversation's ``dm-private-…``);
    ``covers_through`` the id of the newest event the summary covers; ``timestamp`` as NIP-AM's
    (``YYYY-MM-DDTHH:MM:SS.mmmZ``).  Checked when made: an invalid one raises
    :class:`CheckpointError`."""

    session_key: str
    covers_through: str
    method: CheckpointMethod
    summary: str
    timestamp: str
    #: The agent session the summary was made in (the metric's ``sessionId``), if known.
    session_id: str | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        if self.session_id is None:
            msgspec.structs.force_setattr(self, "session_id", UNSET)
        _validate(self)

    def to_json(self) -> str:
        """The wire JSON (at most :data:`MAX_PAYLOAD_BYTES` bytes, else CheckpointError)."""
        return _encode(self).decode("utf-8")

    @classmethod
    def from_json(cls, text: str | bytes) -> ThreadCheckpoint:
        """Decode and validate wire JSON; raises :class:`CheckpointError`."""
        try:
            data = utf8_document(text)
        except (UnicodeError, TypeError):
            raise CheckpointError("invalid checkpoint payload: not UTF-8 text") from None
        if len(data) > MAX_PAYLOAD_BYTES:
            raise CheckpointError(f"checkpoint payload is over {MAX_PAYLOAD_BYTES} bytes")
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError as exc:  # a ValidationError names the path
            raise CheckpointError(f"invalid checkpoint payload: {exc}") from None


_decoder = msgspec.json.Decoder(ThreadCheckpoint)
_encoder = msgspec.json.Encoder()


def _validate(c: ThreadCheckpoint) -> None:
    if not isinstance(c.session_key, str) or not c.session_key:
        raise CheckpointError("sessionKey must be a non-empty string")
    if not isinstance(c.covers_through, str) or not _EVENT_ID.fullmatch(c.covers_through):
        raise CheckpointError("coversThrough must be an event id (64 lowercase hex characters)")
    if c.method not in METHODS:
        raise CheckpointError(f"method must be one of {sorted(METHODS)}")
    if not isinstance(c.summary, str) or not c.summary.strip():
        raise CheckpointError("summary must be a non-blank string")
    try:
        created_at_of(c.timestamp)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(c.session_id, (str, UnsetType)):
        raise CheckpointError("sessionId must be a string or absent")


def _encode(checkpoint: ThreadCheckpoint) -> bytes:
    if not isinstance(checkpoint, ThreadCheckpoint):
        raise CheckpointError("payload must be a ThreadCheckpoint")
    data = _encoder.encode(checkpoint)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise CheckpointError(
            f"checkpoint payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return data


# --- the address ------------------------------------------------------------------------------


def checkpoint_d(agent: PublicKey | str, owner: PublicKey | str, session_key: str) -> str:
    """The ``d`` tag of the checkpoint of ``session_key``: lowercase hex SHA-256 of the domain,
    the agent's and the owner's public keys (hex) and the session key, joined by newlines.
    A channel id, a thread's root or a private conversation's peer never appears in clear."""
    a = as_public_key(agent, "agent public key").hex
    o = as_public_key(owner, "owner public key").hex
    text = "\n".join((D_DOMAIN, a, o, session_key))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def checkpoint_filter(agent: PublicKey | str, owner: PublicKey | str, session_key: str) -> Filter:
    """The relay query for the checkpoint of ``session_key`` by ``agent``."""
    a = as_public_key(agent, "agent public key").hex
    d = checkpoint_d(a, owner, session_key)
    return Filter(kinds=(CHECKPOINT_KIND,), authors=(a,), tags={"d": (d,)})


# --- events -----------------------------------------------------------------------------------


def _template(
    agent: PublicKey, owner: PublicKey, checkpoint: ThreadCheckpoint, content: str
) -> EventTemplate:
    """The unsigned event: tags ``[["d", …], ["p", owner], ["agent", agent]]``, ``created_at``
    the payload's timestamp truncated to seconds."""
    d = checkpoint_d(agent, owner, checkpoint.session_key)
    tags = (("d", d), ("p", owner.hex), ("agent", agent.hex))
    return EventTemplate(CHECKPOINT_KIND, content, tags, created_at_of(checkpoint.timestamp))


_SEALING: Final = Sealing(_encode, _template, CheckpointError, "checkpoint")


def build_checkpoint_event(
    agent_secret: SecretKey | str,
    owner_public: PublicKey | str,
    checkpoint: ThreadCheckpoint,
    *,
    nonce: bytes | None = None,
    aux_rand: bytes | None = None,
) -> Event:
    """Encrypt (NIP-44 v2, agent → owner) and sign one checkpoint; ``nonce``/``aux_rand`` pin
    randomness for tests only.  Raises :class:`CheckpointError`."""
    agent = as_secret_key(agent_secret, "agent secret key")
    owner = as_public_key(owner_public, "owner public key")
    return _SEALING.local(agent, owner, checkpoint, nonce=nonce, aux_rand=aux_rand)


async def build_checkpoint_event_async(
    signer: Signer, owner_public: PublicKey | str, checkpoint: ThreadCheckpoint
) -> Event:
    """:func:`build_checkpoint_event` through a :class:`~nostr_buzz.signer.Signer` (it encrypts
    to the owner and signs; what it signed is checked to be what was asked)."""
    owner = as_public_key(owner_public, "owner public key")
    return await _SEALING.with_signer(signer, owner, checkpoint)


def check_layout(event: object, agent_hex: str, owner_hex: str) -> Event:
    """A checkpoint's kind, author, tags and size, before anything is decrypted (what an
    auditor without the payload can check); raises :class:`CheckpointError`."""
    if not isinstance(event, Event):
        raise CheckpointError(not_an_event(event))
    if event.kind != CHECKPOINT_KIND:
        raise CheckpointError(f"not a checkpoint: kind {event.kind}, expected {CHECKPOINT_KIND}")
    if event.pubkey != agent_hex:
        raise CheckpointError("the checkpoint is not signed by the agent's key")
    for name, want in (("p", owner_hex), ("agent", agent_hex)):
        found = [t for t in event.tags if t and t[0] == name]
        if len(found) != 1 or len(found[0]) < 2 or found[0][1] != want:
            raise CheckpointError(f"a checkpoint has exactly one {name} tag naming the {name}")
    if sum(1 for t in event.tags if t and t[0] == "d") != 1:
        raise CheckpointError("a checkpoint has exactly one d tag")
    if len(event.content) > MAX_CONTENT_CHARS:
        raise CheckpointError(f"checkpoint content is too long (over {MAX_PAYLOAD_BYTES} bytes)")
    return event


def _opened(
    event: Event, plaintext: str, agent: str, owner: str, session_key: str | None
) -> ThreadCheckpoint:
    checkpoint = ThreadCheckpoint.from_json(plaintext)
    if event.tag_values("d") != [checkpoint_d(agent, owner, checkpoint.session_key)]:
        raise CheckpointError("the d tag is not the hash of the checkpoint's session key")
    if session_key is not None and checkpoint.session_key != session_key:
        raise CheckpointError("the checkpoint is for another session key")
    return checkpoint


def open_checkpoint_event(
    owner_secret: SecretKey | str,
    agent_public: PublicKey | str,
    event: Event,
    session_key: str | None = None,
) -> ThreadCheckpoint:
    """The owner's reading: check that ``agent`` signed it with the tag layout of
    nips/NIP-TC.md, decrypt, validate, and (``session_key``) that it is that key's.  Raises
    :class:`CheckpointError`."""
    owner = as_secret_key(owner_secret, "owner secret key")
    agent = as_public_key(agent_public, "agent public key")
    check_layout(event, agent.hex, owner.public_key.hex)
    try:
        plaintext = nip44.decrypt(event.content, nip44.conversation_key(owner, agent))
    except Nip44Error as exc:
        raise CheckpointError(f"cannot decrypt the checkpoint: {exc}") from None
    return _opened(event, plaintext, agent.hex, owner.public_key.hex, session_key)


async def open_own_checkpoint_event(
    signer: Signer,
    owner_public: PublicKey | str,
    event: Event,
    session_key: str | None = None,
) -> ThreadCheckpoint:
    """The agent's reading, through its signer: as :func:`open_checkpoint_event`, the event
    signed by the signer's own key."""
    owner = as_public_key(owner_public, "owner public key")
    agent = signer.public_key
    check_layout(event, agent.hex, owner.hex)
    try:
        plaintext = await signer.nip44_decrypt(owner, event.content)
    except Nip44Error as exc:
        raise CheckpointError(f"cannot decrypt the checkpoint: {exc}") from None
    return _opened(event, plaintext, agent.hex, owner.hex, session_key)
