"""The reply to an event, in the event's own kind, so that the client it came from shows it.

* kind 9 chat → kind 9: ``h`` (its channel), NIP-10 marked ``e`` tags (root, plus reply when
  the target is not the root) and ``p`` for the people replied to, never the sender itself
  (:func:`nostr_buzz.nips.nip10.reply_tags`, shared with ``buzz messages send``);
* kind 1 note → kind 1 with the same NIP-10 ``e`` and ``p`` tags, and the note's own ``p``
  tags (everyone in the conversation stays notified);
* kind 1111 comment → kind 1111 with the NIP-22 root scope and parent tags;
* any other public kind → kind 9, as chat;
* in every kind, the tags its text references call for (NIP-27 ``p`` and NIP-18 ``q`` tags
  for ``nostr:`` codes, ``t`` for hashtags: :mod:`nostr_buzz.nips.nip27`), as clients add
  them, so that any signer signs the reply as it is built.

A private message (NIP-17) is answered with a kind 14 rumor instead
(:func:`nostr_buzz.nips.nip17.reply`), sealed and gift-wrapped.  Pure: the reply is an
unsigned :class:`~nostr_buzz.signer.EventTemplate` for any signer, or signed with a key.
"""

from __future__ import annotations

import re
from typing import Final

from nostr_buzz.core.given import given_key
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, require_event
from nostr_buzz.keys import PublicKey, SecretKey, as_secret_key
from nostr_buzz.nips import nip10, nip22
from nostr_buzz.nips.nip27 import with_references
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.signer import EventTemplate, sign_template, template

__all__ = ["build_reply", "chat_reply_tags", "reply_form", "reply_template"]

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


def chat_reply_tags(target: Event, sender: str, root: Event | None = None) -> list[list[str]]:
    """Tags of a kind 9 reply to ``target`` by ``sender`` (hex; ``root``: the thread's root,
    when known): the channel's ``h`` tag, then NIP-10's."""
    channel = nip10.channel(target)
    tags: list[list[str]] = [["h", channel]] if channel is not None else []
    return tags + nip10.reply_tags(target, sender=sender, root=root)


def _note_reply_tags(target: Event, sender: str) -> list[list[str]]:
    tags = nip10.reply_tags(target, sender=sender)
    named = {t[1] for t in tags if t[0] == "p"} | {sender}
    for pubkey in nip10.mentions(target):
        if _HEX64.fullmatch(pubkey) and pubkey not in named:
            named.add(pubkey)
            tags.append(["p", pubkey])
    return tags


def reply_form(sender: str, target: Event) -> tuple[int, list[list[str]]]:
    """The kind and tags of a public reply to ``target`` by ``sender`` (hex).  A private
    message is refused (:class:`BuzzError`): it is answered privately; anything but a verified
    :class:`Event` (a dict, another library's event) is an :class:`InvalidEvent`."""
    target = require_event(target, "the event replied to")
    if isinstance(target, PrivateEvent):
        raise BuzzError("a private message is answered privately (nostr_buzz.nips.nip17.reply)")
    if target.kind == nip22.COMMENT_KIND:
        return nip22.COMMENT_KIND, nip22.reply_tags(target)
    if target.kind == nip10.TEXT_NOTE_KIND:
        return nip10.TEXT_NOTE_KIND, _note_reply_tags(target, sender)
    return CHAT_KIND, chat_reply_tags(target, sender)


def reply_template(
    target: Event, text: str, *, sender: str | PublicKey, created_at: int
) -> EventTemplate:
    """The unsigned reply to ``target`` carrying ``text``, in ``target``'s kind, for any
    :class:`~nostr_buzz.signer.Signer` (``sender``: the signer's public key, as hex,
    ``npub1…`` or a :class:`~nostr_buzz.keys.PublicKey`), with the tags its text references
    call for (NIP-27: :func:`~nostr_buzz.nips.nip27.with_references`) so that a signer that
    tags as it signs has nothing to add."""
    target = require_event(target, "the event replied to")
    sender_hex = given_key(sender, "reply_template sender", BuzzError).hex
    kind, tags = reply_form(sender_hex, target)
    return with_references(template(kind=kind, content=text, tags=tags, created_at=created_at))


def build_reply(secret: SecretKey | str, target: Event, text: str, created_at: int) -> Event:
    """The signed public reply to ``target``, in its kind (``secret``: a :class:`SecretKey`,
    or its hex or ``nsec1…``)."""
    secret = as_secret_key(secret, "build_reply secret")
    unsigned = reply_template(target, text, sender=secret.public_key, created_at=created_at)
    return sign_template(secret, unsigned)
