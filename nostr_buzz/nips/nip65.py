"""NIP-65 relay list metadata (kind 10002), pure: where a key writes and where it reads.

A kind 10002 event lists relays as ``r`` tags: ``["r", url]`` for both reading and writing,
``["r", url, "read"]`` or ``["r", url, "write"]`` for one of them.  Its author *writes* (publishes
its own events) to its write relays and *reads* (finds what others address to it) on its read
relays, so an answer to someone goes to their read relays and their thread is read from their
write relays (the "outbox model").

Anyone can publish a relay list, so reading one is strict and bounded: only the first
:data:`MAX_TAGS` tags are looked at, a URL that is not ws:// or wss:// or a marker that is
neither ``read`` nor ``write`` is skipped, and :func:`relays_to_use` keeps at most
:data:`MAX_RELAYS_PER_PERSON` of them, never an address on the reader's own host or networks,
however spelt (:mod:`~nostr_buzz.nips.relay_address`), that the reader has not configured
itself (:func:`~nostr_buzz.nips.nip17.dm_relays_to_use`): one list of
300 relays, or of addresses on the bot's own network, cannot make it open hundreds of
connections or reach its own services.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from nostr_buzz.errors import RelayError
from nostr_buzz.event import Event
from nostr_buzz.nips.nip17 import dm_relays_to_use
from nostr_buzz.nips.relay_url import check_relay_url
from nostr_buzz.signer import EventTemplate, template

__all__ = [
    "KIND",
    "MAX_RELAYS_PER_PERSON",
    "MAX_TAGS",
    "RelayList",
    "newest",
    "relay_list",
    "relay_list_template",
    "relays_to_use",
]

#: The relay list's kind (a replaceable event: the newest one counts).
KIND: Final = 10002
#: Tags of one relay list looked at; the rest are ignored (real lists name a handful).
MAX_TAGS: Final = 100
#: Relays of one person's list used for one direction (NIP-65 asks lists to stay small).
MAX_RELAYS_PER_PERSON: Final = 3


class RelayList(msgspec.Struct, frozen=True):
    """A key's read and write relays, in the list's order, without repeats."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()


def relay_list_template(
    read: Iterable[str], write: Iterable[str], *, created_at: int
) -> EventTemplate:
    """The unsigned kind 10002 of a key that reads on ``read`` and writes to ``write``: a
    relay in both is one unmarked ``r`` tag.  Bad URLs raise
    :class:`~nostr_buzz.errors.RelayError`."""
    reads = list(dict.fromkeys(check_relay_url(u) for u in read))
    writes = list(dict.fromkeys(check_relay_url(u) for u in write))
    tags: list[list[str]] = []
    for url in dict.fromkeys([*writes, *reads]):
        if url in reads and url in writes:
            tags.append(["r", url])
        else:
            tags.append(["r", url, "read" if url in reads else "write"])
    return template(kind=KIND, content="", tags=tags, created_at=created_at)


def relay_list(event: Event) -> RelayList:
    """The read and write relays of a kind 10002 (see the module docstring for what is
    skipped); another kind raises :class:`~nostr_buzz.errors.RelayError`."""
    if event.kind != KIND:
        raise RelayError(f"kind {event.kind} is not a relay list ({KIND})")
    read: list[str] = []
    write: list[str] = []
    for tag in event.tags[:MAX_TAGS]:
        if len(tag) < 2 or tag[0] != "r" or len(tag) > 3:
            continue
        marker = tag[2] if len(tag) == 3 else None
        if marker not in (None, "read", "write"):
            continue
        try:
            url = check_relay_url(tag[1])
        except RelayError:
            continue
        if marker != "write":
            read.append(url)
        if marker != "read":
            write.append(url)
    return RelayList(tuple(dict.fromkeys(read)), tuple(dict.fromkeys(write)))


def newest(events: Iterable[Event], authors: Iterable[str]) -> dict[str, Event]:
    """Each author's newest kind 10002 among ``events`` (a replaceable event: the newest wins,
    the lower id on a tie, NIP-01); events of other kinds or authors are ignored."""
    wanted = set(authors)
    found: dict[str, Event] = {}
    for event in events:
        if event.kind != KIND or event.pubkey not in wanted:
            continue
        held = found.get(event.pubkey)
        if held is None or (event.created_at, held.id) > (held.created_at, event.id):
            found[event.pubkey] = event
    return found


def relays_to_use(
    urls: Iterable[str], configured: Iterable[str], *, limit: int = MAX_RELAYS_PER_PERSON
) -> tuple[str, ...]:
    """At most ``limit`` of someone's relays (in order), a local address only when it is one
    of ``configured`` (the reader's own relays)."""
    return dm_relays_to_use(urls, configured, limit=limit)
