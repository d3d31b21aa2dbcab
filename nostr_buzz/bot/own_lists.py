"""The agent's own relay lists, published when the bot starts listening: its kind 10002
(NIP-65: where it writes and reads) and, when it reads private messages, its kind 10050
(NIP-17: where to send them), each reported as a diagnostic (docs/bot.md, "Its own relay
lists").

The agent's key may be a host bot's, whose lists name relays of its own: a list is never
published blind.  The current list is read first as state (:meth:`RelayPool.query_state`, the
newest on every write relay; a relay that does not answer leaves the list as it is), then
``relay_lists`` (:class:`~nostr_buzz.core.choices.RelayListsMode`) decides:

* ``merge`` (the default): the list found keeps every tag, less those the bot added before and
  no longer serves, and gains the bot's relays it does not name yet (a missing direction of a
  relay it names: an ``r`` tag of that direction);
* ``publish``: the bot's list replaces the list found only when that list is the bot's own
  (the one it published last, or older) or there is none;
* ``leave``: nothing is read or published.

A published list is dated after the list it replaces, and what the bot added to it is kept in
the state database (``own_lists``), so that a later start with other relays takes its own back
and never the host's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

import msgspec

from nostr_buzz.core.choices import RelayListsMode
from nostr_buzz.errors import BuzzError, RelayError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip17, nip65
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.relay_url import normalize_relay_url
from nostr_buzz.signer import EventTemplate, signed

from .config import PluginConfig
from .state_table import StateTable

__all__ = ["OWN_LISTS_SCHEMA", "OwnLists", "merged", "publish_relay_lists"]

Tag = tuple[str, ...]
Tags = tuple[Tag, ...]

OWN_LISTS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS own_lists (
    kind       INTEGER PRIMARY KEY,   -- 10002 or 10050
    id         TEXT NOT NULL,         -- the list the bot published last
    created_at INTEGER NOT NULL,
    added      TEXT NOT NULL          -- JSON: the tags the bot added to the list it found
) WITHOUT ROWID;
"""

#: What each list's diagnostics are called: published, failed, kept as found.
_REPORTS: Final[dict[int, tuple[DiagnosticKind, DiagnosticKind, DiagnosticKind]]] = {
    nip65.KIND: ("relay_list_published", "relay_list_failed", "relay_list_kept"),
    nip17.DM_RELAYS_KIND: ("dm_relays_published", "dm_relays_failed", "dm_relays_kept"),
}


class Published(NamedTuple):
    """The list the bot published last of a kind, and the tags it added to it."""

    id: str
    created_at: int
    added: Tags


class OwnLists(StateTable):
    """The ``own_lists`` table (joins the database's transactions)."""

    def last(self, kind: int) -> Published | None:
        row = self._exec(
            "SELECT id, created_at, added FROM own_lists WHERE kind = ?", (kind,)
        ).fetchone()
        if row is None:
            return None
        added = msgspec.json.decode(row[2], type=tuple[tuple[str, ...], ...])
        return Published(str(row[0]), int(row[1]), added)

    def record(self, event: Event, added: Tags) -> None:
        with self._transaction(durable=True):
            self._exec(
                "INSERT OR REPLACE INTO own_lists (kind, id, created_at, added) "
                "VALUES (?, ?, ?, ?)",
                (event.kind, event.id, event.created_at, msgspec.json.encode(added).decode()),
            )


def _entry(tag: Tag) -> tuple[str, frozenset[str]] | None:
    """A relay tag's relay (normalised) and what it is for; None for any other tag."""
    try:
        if tag[0] == "relay" and len(tag) >= 2:
            return normalize_relay_url(tag[1]), frozenset({"dm"})
        if tag[0] == "r" and len(tag) in (2, 3):
            marks = frozenset({"read", "write"}) if len(tag) == 2 else frozenset(tag[2:])
            return normalize_relay_url(tag[1]), marks
    except RelayError:
        return None
    return None


def merged(found: Tags, ours: Tags, added_before: Tags) -> tuple[Tags, Tags]:
    """``found`` (less the tags the bot added before) with ``ours`` added where it does not
    name them yet, and the tags added now.  A relay ``found`` names for one direction only gets
    an ``r`` tag for the other."""
    kept = [t for t in found if t not in added_before]
    covered: dict[str, set[str]] = {}
    for tag in kept:
        if (entry := _entry(tag)) is not None:
            covered.setdefault(entry[0], set()).update(entry[1])
    added: list[Tag] = []
    for tag in ours:
        entry = _entry(tag)
        if entry is None:
            continue
        url, marks = entry
        missing = marks - covered.get(url, set())
        if not missing:
            continue
        added.append(tag if missing == marks else ("r", tag[1], *sorted(missing)))
        covered.setdefault(url, set()).update(missing)
    return (*kept, *added), tuple(added)


def _plan(
    mode: RelayListsMode, found: Event | None, last: Published | None, ours: Tags
) -> tuple[Tags, Tags] | str:
    """The tags to publish and those the bot adds, or why the list found stays."""
    if found is None:
        return ours, ours
    if mode == "publish":
        mine = last is not None and (found.id == last.id or found.created_at < last.created_at)
        if not mine:
            return "not_the_bots"
        tags, added = ours, ours
    else:
        tags, added = merged(found.tags, ours, last.added if last is not None else ())
    return "unchanged" if tags == found.tags else (tags, added)


async def publish_relay_lists(
    config: PluginConfig,
    write_pool: RelayPool,
    diagnostics: DiagnosticsFeed,
    clock: Callable[[], float],
    table: OwnLists,
) -> None:
    """Publish (or keep: see the module docstring) the agent's kind 10002 and, when it reads
    private messages, its kind 10050 (concurrently) on ``write_pool``."""
    now = int(clock())
    # Its write relays are where its replies are found; its read relays where it is addressed.
    lists = [nip65.relay_list_template(config.read_relays, config.write_relays, created_at=now)]
    if nip17.PRIVATE_MESSAGE_KIND in config.kinds:
        # Its read relays are where it reads private messages.
        lists.append(nip17.dm_relay_list_template(config.read_relays, created_at=now))
    await asyncio.gather(
        *(_publish_own(config, write_pool, diagnostics, ours, table) for ours in lists)
    )


async def _publish_own(
    config: PluginConfig,
    pool: RelayPool,
    diagnostics: DiagnosticsFeed,
    ours: EventTemplate,
    table: OwnLists,
) -> None:
    """One of the agent's own lists: read, decided on, signed and published, reported as
    published, failed or kept."""
    published, failed, kept = _REPORTS[ours.kind]
    if config.relay_lists == "leave":
        diagnostics.emit(kept, payload={"reason": "leave"})
        return
    try:
        found = await _current(config, pool, ours.kind)
        plan = _plan(config.relay_lists, found, table.last(ours.kind), ours.tags)
        if isinstance(plan, str):
            diagnostics.emit(kept, payload={"reason": plan, "eventId": _id(found)})
            return
        tags, added = plan
        at = max(ours.created_at, found.created_at + 1 if found is not None else 0)
        event = await signed(config.signer, EventTemplate(ours.kind, "", tags, at))
    except BuzzError as exc:
        diagnostics.emit(failed, payload={"error": str(exc)})
        return
    result = await pool.publish(event)
    if result.ok:
        table.record(event, added)
    diagnostics.emit(
        published if result.ok else failed,
        payload={"eventId": event.id, "relays": result.accepted},
    )


def _id(event: Event | None) -> str | None:
    return event.id if event is not None else None


async def _current(config: PluginConfig, pool: RelayPool, kind: int) -> Event | None:
    """The agent's newest list of ``kind`` on every relay of ``pool``; a relay that does not
    answer is a :class:`RelayError` (a newer list may be there: none is published)."""
    me = config.signer.public_key.hex
    read = await pool.query_state(
        Filter(authors=(me,), kinds=(kind,)), timeout=config.relay_timeout
    )
    if read.unconfirmed or not read.any_finished:
        unread = ", ".join(sorted(read.unconfirmed)) or "no relay answered"
        raise RelayError(f"the current kind {kind} could not be read ({unread}): left as it is")
    return _newest([e for e in read.events if e.kind == kind and e.pubkey == me])


def _newest(events: Sequence[Event]) -> Event | None:
    """The replaceable event that counts: the newest, the lower id on a tie (NIP-01)."""
    return min(events, key=lambda e: (-e.created_at, e.id), default=None)
