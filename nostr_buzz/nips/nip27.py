"""NIP-27 text note references: the tags an event's text calls for, added before it is signed.

A text mentions a profile with ``nostr:npub1…`` or ``nostr:nprofile1…`` and quotes an event
with ``nostr:note1…``, ``nostr:nevent1…`` or ``nostr:naddr1…`` (NIP-21 codes).  Clients tag
what their text references: a ``p`` tag for each profile (the person is notified), a NIP-18
``q`` tag for each quoted event (``["q", <id or kind:pubkey:d>, <relay hint or "">]``) and a
``p`` tag for its author when the code names one; a NIP-24 ``t`` tag for each ``#hashtag``;
and a code written ``@npub1…`` is written ``nostr:npub1…``.

:func:`tag_references` does exactly what NDK does as it signs (``generateContentTags``: its
patterns, its rewriting, its dedupe with the tags already there), so a signer that tags as it
signs — NDK's NIP-46 bunker, say — finds nothing to add and signs the event it was given.  A
code that does not decode to a valid key, id or address is left as it is, untagged.

``people=False`` adds no ``p`` tag: a NIP-17 kind 14's ``p`` tags are its receivers, so a
profile named in a private message's text must not become one (docs/events.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from nostr_buzz.errors import Nip19Error
from nostr_buzz.nips import nip19
from nostr_buzz.signer import EventTemplate

__all__ = ["hashtags", "references", "tag_references", "with_references"]

Tag = tuple[str, ...]

#: A reference as NDK finds it: ``@`` or ``nostr:``, an entity prefix, letters and digits.
_REFERENCE: Final = re.compile(r"(@|nostr:)((?:npub|nprofile|note|nevent|naddr)[a-zA-Z0-9]+)")
#: JavaScript's ``\s`` (what NDK's hashtag pattern means by a space), not Python's.
_JS_SPACE: Final = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
#: A hashtag: ``#`` after a space or at the start, up to a space or punctuation.
_HASHTAG: Final = re.compile(
    rf"(?:(?<=[{_JS_SPACE}])|^)#([^{_JS_SPACE}!@#$%^&*()=+./,\[{{\]}};:'\"?><]+)"
)


def references(content: str, *, people: bool = True) -> tuple[str, list[Tag]]:
    """``content`` with each ``@`` code written as a ``nostr:`` one, and the tags its codes
    call for (repeats included): in the order they appear, but a quote without a relay hint
    after the rest, as NDK adds it (it looks for a hint first), so that of two quotes of one
    event the same one is kept."""
    found: list[Tag] = []
    later: list[Tag] = []

    def one(match: re.Match[str]) -> str:
        entity = match.group(2)
        tags = _tags_of(entity, people)
        if tags is None:
            return match.group(0)
        quote_without_hint = tags[:1] and tags[0][0] == "q" and not tags[0][2]
        (later if quote_without_hint else found).extend(tags)
        return f"nostr:{entity}"

    return _REFERENCE.sub(one, content), found + later


def _tags_of(entity: str, people: bool) -> list[Tag] | None:
    """The tags one code calls for; None when it does not decode."""
    try:
        if entity.startswith("naddr"):
            address = nip19.decode_address(entity)
            author = [("p", address.pubkey)] if people else []
            return [("q", address.coordinate, next(iter(address.relays), "")), *author]
        hrp, value = nip19.decode(entity)
    except Nip19Error:
        return None
    if isinstance(value, nip19.ProfilePointer):
        return [("p", value.pubkey)] if people else []
    if isinstance(value, nip19.EventPointer):
        author = [("p", value.author)] if people and value.author is not None else []
        return [("q", value.id, next(iter(value.relays), "")), *author]
    if hrp == "npub":
        return [("p", value)] if people else []
    return [("q", value, "")] if hrp == "note" else None


def hashtags(content: str) -> list[str]:
    """The hashtags of ``content`` without their ``#``, first use first, no repeats."""
    return list(dict.fromkeys(_HASHTAG.findall(content)))


def tag_references(
    content: str, tags: Sequence[Sequence[str]], *, people: bool = True
) -> tuple[str, tuple[Tag, ...]]:
    """``content`` (its ``@`` codes written ``nostr:``) and ``tags`` with the tags its
    references and hashtags call for added after them: a ``p`` or ``q`` tag only when no tag
    of its name (a ``p`` also no ``q``) has its value yet, a ``t`` tag only when no tag
    starts with it."""
    content, wanted = references(content, people=people)
    out: list[Tag] = [tuple(t) for t in tags]
    for tag in wanted:
        names = ("q", tag[0])
        if not any(len(t) >= 2 and t[0] in names and t[1] == tag[1] for t in out):
            out.append(tag)
    for word in hashtags(content):
        if not any(t[:2] == ("t", word) for t in out):
            out.append(("t", word))
    return content, tuple(out)


def with_references(unsigned: EventTemplate, *, people: bool = True) -> EventTemplate:
    """``unsigned`` with the tags its text calls for (:func:`tag_references`), ready for any
    signer."""
    content, tags = tag_references(unsigned.content, unsigned.tags, people=people)
    if content == unsigned.content and len(tags) == len(unsigned.tags):
        return unsigned
    return EventTemplate(unsigned.kind, content, tags, unsigned.created_at)
