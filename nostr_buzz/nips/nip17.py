"""NIP-17 private messages, pure: kind 14 rumors, replies, wrapping, kind 10050 relay lists.

A private message is a kind 14 rumor (plain-text content, ``p`` tags for the receivers, an
optional ``e`` tag for the message it answers), sealed and gift-wrapped (NIP-59) once for each
receiver and once for the sender, who keeps a copy.  The *room* of a message is its author plus
its ``p`` tags: a reply keeps the room and answers one message.  A person's kind 10050 event
lists the relays where they want to receive private messages.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence
from typing import Final

from nostr_buzz.errors import Nip17Error, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip59 import Randomness, Rumor, gift_wrap
from nostr_buzz.nips.relay_url import check_relay_url

__all__ = [
    "DM_RELAYS_KIND",
    "PRIVATE_MESSAGE_KIND",
    "dm_relay_list",
    "dm_relays",
    "message",
    "receivers",
    "replied_to",
    "reply",
    "room",
    "wrap_for_room",
]

PRIVATE_MESSAGE_KIND: Final = 14
DM_RELAYS_KIND: Final = 10050

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
    """A kind 14 rumor from ``sender`` to ``receivers`` (64-hex each, at least one)."""
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
    return Rumor.build(
        sender, kind=PRIVATE_MESSAGE_KIND, content=content, tags=tags, created_at=created_at
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


def reply(sender: str, answered: Rumor, content: str, *, created_at: int) -> Rumor:
    """A kind 14 answer to ``answered`` in the same room: ``p`` to its author first, then the
    room's other members (never the sender itself), and ``e`` to the answered message."""
    _check_pubkey(sender, "the sender")
    others = [p for p in [answered.pubkey, *receivers(answered)] if p != sender]
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
    me = sender.public_key.hex
    if rumor.pubkey != me:
        raise Nip17Error("only the rumor's author can wrap it")
    targets = [p for p in receivers(rumor) if p != me] + [me]
    return [
        (target, gift_wrap(sender, target, rumor, now=now, randbelow=randbelow))
        for target in targets
    ]


def dm_relay_list(secret: SecretKey, relays: Iterable[str], *, created_at: int) -> Event:
    """The signed kind 10050 event naming the relays where ``secret``'s owner reads messages."""
    tags: list[list[str]] = []
    for url in relays:
        try:
            tags.append(["relay", check_relay_url(url)])
        except RelayError as exc:
            raise Nip17Error(str(exc)) from None
    if not tags:
        raise Nip17Error("a DM relay list needs at least one relay")
    return sign_event(secret, kind=DM_RELAYS_KIND, content="", tags=tags, created_at=created_at)


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
