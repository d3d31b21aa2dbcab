"""NIP-17 private messages, pure: kind 14 rumors, replies, wrapping, kind 10050 relay lists.

A private message is a kind 14 rumor (plain-text content, ``p`` tags for the receivers, an
optional ``e`` tag for the message it answers), sealed and gift-wrapped (NIP-59) once for each
receiver and once for the sender, who keeps a copy.  The *room* of a message is its author plus
its ``p`` tags: a reply keeps the room and answers one message.  A person's kind 10050 event
lists the relays where they want to receive private messages.

That list is written by whoever owns the key, so a sender only ever uses the first
:data:`MAX_DM_RELAYS` of it, and never an address on the sender's own host or network
(:func:`is_local_address`) unless the sender itself is configured with that relay
(:func:`dm_relays_to_use`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence
from typing import Final

from nostr_buzz.errors import Nip17Error, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip27, nip59
from nostr_buzz.nips.nip59 import Randomness, Rumor, gift_wrap, gift_wrap_with
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url
from nostr_buzz.signer import EventTemplate, Signer, template

__all__ = [
    "DM_RELAYS_KIND",
    "FILE_MESSAGE_KIND",
    "MAX_DM_RELAYS",
    "PRIVATE_KINDS",
    "PRIVATE_MESSAGE_KIND",
    "dm_relay_list",
    "dm_relay_list_template",
    "dm_relays",
    "dm_relays_to_use",
    "is_local_address",
    "message",
    "receivers",
    "replied_to",
    "reply",
    "room",
    "room_targets",
    "wrap_for_room",
    "wrap_for_room_with",
]

PRIVATE_MESSAGE_KIND: Final = 14
FILE_MESSAGE_KIND: Final = 15
#: Every kind that is or carries a private message: the seal, the chat and file messages (the
#: rumors inside) and the gift wraps.  None of them is public evidence.
PRIVATE_KINDS: Final = frozenset(
    {nip59.SEAL_KIND, PRIVATE_MESSAGE_KIND, FILE_MESSAGE_KIND, *nip59.WRAP_KINDS}
)
DM_RELAYS_KIND: Final = 10050
#: Relays of one person's kind 10050 that a private message is sent to, at most (the first).
MAX_DM_RELAYS: Final = 3

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


def _check_pubkey(value: str, what: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise Nip17Error(f"{what} must be 64 lowercase hex characters")
    return value


def message(
    sender: str,
    receivers: Sequence[str],
    content: str,
    *,
    created_at: int,
    reply_to: str | None = None,
    subject: str | None = None,
) -> Rumor:
    """A kind 14 rumor from ``sender`` to ``receivers`` (64-hex each, at least one), with the
    ``q`` and ``t`` tags its text references call for (:mod:`.nip27`) but never a ``p`` tag:
    its ``p`` tags are its room, and a person named in the text is not let into it."""
    _check_pubkey(sender, "the sender")
    if isinstance(receivers, str) or not receivers:
        raise Nip17Error("a private message needs at least one receiver")
    tags: list[list[str]] = [
        ["p", _check_pubkey(p, "a receiver")] for p in dict.fromkeys(receivers)
    ]
    if reply_to is not None:
        tags.append(["e", _check_pubkey(reply_to, "the id replied to")])
    if subject is not None:
        tags.append(["subject", subject])
    if not isinstance(content, str):
        raise Nip17Error("the content must be a string")
    content, tagged = nip27.tag_references(content, tags, people=False)
    return Rumor.build(
        sender, kind=PRIVATE_MESSAGE_KIND, content=content, tags=tagged, created_at=created_at
    )


def receivers(rumor: Rumor) -> list[str]:
    """The valid ``p`` values (64 lowercase hex) of a rumor, first occurrence order, no
    duplicates."""
    return list(dict.fromkeys(p for p in rumor.tag_values("p") if _HEX64.fullmatch(p)))


def room(rumor: Rumor) -> frozenset[str]:
    """The participants of a message's conversation: its author and its receivers."""
    return frozenset([rumor.pubkey, *receivers(rumor)])


def replied_to(rumor: Rumor) -> str | None:
    """The id of the message this one answers (its last valid ``e`` tag), if any."""
    ids = [e for e in rumor.tag_values("e") if _HEX64.fullmatch(e)]
    return ids[-1] if ids else None


def reply(
    sender: str,
    answered: Rumor,
    content: str,
    *,
    created_at: int,
    to: Iterable[str] | None = None,
) -> Rumor:
    """A kind 14 answer to ``answered`` in the same room: ``p`` to its author first, then the
    room's other members (never the sender itself), and ``e`` to the answered message.
    ``to``: answer only these members of the room (others named there are ignored)."""
    _check_pubkey(sender, "the sender")
    others = [p for p in [answered.pubkey, *receivers(answered)] if p != sender]
    if to is not None:
        chosen = set(to)
        others = [p for p in others if p in chosen]
    if not others:
        raise Nip17Error("a reply needs someone other than its sender in the room")
    subjects = answered.tag_values("subject")
    return message(
        sender,
        others,
        content,
        created_at=created_at,
        reply_to=answered.id,
        subject=subjects[-1] if subjects else None,
    )


def wrap_for_room(
    sender: SecretKey,
    rumor: Rumor,
    *,
    now: int,
    randbelow: Randomness = secrets.randbelow,
) -> list[tuple[str, Event]]:
    """One gift wrap per receiver plus one for the sender's own copy, as ``(pubkey, wrap)``."""
    return [
        (target, gift_wrap(sender, target, rumor, now=now, randbelow=randbelow))
        for target in room_targets(sender.public_key.hex, rumor)
    ]


async def wrap_for_room_with(
    signer: Signer,
    rumor: Rumor,
    *,
    now: int,
    randbelow: Randomness = secrets.randbelow,
) -> list[tuple[str, Event]]:
    """:func:`wrap_for_room` through a signer: each seal encrypted and signed by ``signer``,
    each wrap by a one-time key held here."""
    targets = room_targets(signer.public_key.hex, rumor)
    return [
        (target, await gift_wrap_with(signer, target, rumor, now=now, randbelow=randbelow))
        for target in targets
    ]


def room_targets(sender: str, rumor: Rumor) -> list[str]:
    """Who gets a wrap of ``rumor``, sent by ``sender`` (hex): its receivers, then the
    sender's own copy."""
    if rumor.pubkey != sender:
        raise Nip17Error("only the rumor's author can wrap it")
    return [p for p in receivers(rumor) if p != sender] + [sender]


def dm_relay_list_template(relays: Iterable[str], *, created_at: int) -> EventTemplate:
    """The unsigned kind 10050 event naming ``relays`` (where its signer reads messages)."""
    tags: list[list[str]] = []
    for url in relays:
        try:
            tags.append(["relay", check_relay_url(url)])
        except RelayError as exc:
            raise Nip17Error(str(exc)) from None
    if not tags:
        raise Nip17Error("a DM relay list needs at least one relay")
    return template(kind=DM_RELAYS_KIND, content="", tags=tags, created_at=created_at)


def dm_relay_list(secret: SecretKey, relays: Iterable[str], *, created_at: int) -> Event:
    """The signed kind 10050 event naming the relays where ``secret``'s owner reads messages."""
    unsigned = dm_relay_list_template(relays, created_at=created_at)
    return sign_event(
        secret, kind=DM_RELAYS_KIND, content="", tags=unsigned.tags, created_at=created_at
    )


def dm_relays(event: Event) -> tuple[str, ...]:
    """The usable ``relay`` URLs of a kind 10050 event (ws:// or wss://), in order, without
    duplicates; anything else in it is skipped."""
    if event.kind != DM_RELAYS_KIND:
        raise Nip17Error(f"kind {event.kind} is not a DM relay list ({DM_RELAYS_KIND})")
    urls: list[str] = []
    for value in event.tag_values("relay"):
        try:
            urls.append(check_relay_url(value))
        except RelayError:
            continue
    return tuple(dict.fromkeys(urls))


def is_local_address(url: str) -> bool:
    """True when a relay URL's host, read as the WebSocket client resolves it (IDNA, NFKC,
    every IP literal form), names this host or its networks: ``localhost`` and the names under
    it, loopback, private, carrier-grade NAT, link-local and the other addresses of
    :data:`~nostr_buzz.nips.relay_address.LOCAL_NETWORKS` (:mod:`~nostr_buzz.nips.relay_address`).
    Names are not resolved here: the connection checks what they resolve to."""
    from nostr_buzz.nips.relay_address import is_local_url  # its networks' table, when asked

    return is_local_url(url)


def dm_relays_to_use(
    urls: Iterable[str], configured: Iterable[str] | None, *, limit: int = MAX_DM_RELAYS
) -> tuple[str, ...]:
    """The relays of someone's kind 10050 (``urls``, in order) that a private message goes to:
    at most ``limit``, and a local address (:func:`is_local_address`) only when it is one of
    the sender's ``configured`` relays (None: local addresses are not checked).  Anyone can
    publish a relay list, so without this one message could make the sender open hundreds of
    connections, or reach services on its own network."""
    allowed = None if configured is None else {normalize_relay_url(u) for u in configured}
    chosen: list[str] = []
    for url in urls:
        if len(chosen) >= limit:
            break
        try:
            same = normalize_relay_url(url)
        except RelayError:
            continue
        if allowed is not None and same not in allowed and is_local_address(url):
            continue
        if same not in {normalize_relay_url(c) for c in chosen}:
            chosen.append(url)
    return tuple(chosen)
