"""The queue's journal in the bot's state database (:mod:`.state`): the ``queued`` rows (the
admitted events still live) and the ``channels`` rows (what the pure :class:`DispatchQueue`
keeps of a channel beyond its events), written as the queue changes and read back into a
rebuilt queue at start.

How the pure queue maps onto rows: the queue is never serialised whole.  Intake appends its
row; when a turn settles (or a steer is answered, or a push drops an event) the channel it
touched is synchronised: rows of events that left the queue are deleted (and their ids added to
``remembered`` when the queue remembers them), the stored cancelled events get their order, and
the channel row is rewritten — O(events of that channel), once per turn.  Batches in flight are
not written at all: at start the queue is rebuilt with :meth:`DispatchQueue.rebuild` from the
rows, where a batch that was running is simply back at the front of its channel (pending rows
ordered by ``seq``; a returned batch always holds its channel's lowest numbers), exactly what a
restore after a crash must give.  A row filed under another channel than its event's queue
channel now (an earlier version queued private messages in the author's ``dm-`` channel, with the
public notes) is moved there on load, as pending, and the move is written back.

A queued private message is stored as its gift wrap (encrypted, signed) and opened again when
the queue is loaded (with the agent's key, or by the caller through the agent's signer:
:meth:`QueueJournal.queued_wraps`): no plaintext at rest either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.queue import (
    REMEMBERED_IDS,
    CancelReason,
    ChannelState,
    DispatchQueue,
    QueuedEvent,
    StoredEvent,
)
from nostr_buzz.errors import InvalidEvent, Nip59Error, QueueError, StateError
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip59
from nostr_buzz.nips.nip59 import PrivateEvent

from .state_db import StateDatabase

__all__ = ["QueueJournal"]

#: A channel row: retry set size and attempts, cancel reason and count, backoff time.
_ChannelRow = tuple[int, int, str | None, int, float | None]


class QueueJournal:
    """The queue's rows in the state database ``db`` (see the module docstring), kept as the
    store's other tables are; ``agent_secret`` opens a queued gift wrap that the caller did
    not open (:meth:`load_queue`)."""

    def __init__(self, db: StateDatabase, *, agent_secret: SecretKey | None) -> None:
        self._db = db
        self._agent_secret = agent_secret

    def store_row(self, channel: str, stored: StoredEvent, cancelled_ord: int | None) -> None:
        """``stored``'s row under ``channel``: pending (``cancelled_ord`` None), else its place
        among the channel's stored cancelled events (joins the caller's transaction)."""
        queued = stored.queued
        self._db.execute(
            "INSERT OR REPLACE INTO queued (id, channel, seq, event, prompt_tag, "
            "received_at, cancelled_ord) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                queued.event.id,
                channel,
                stored.seq,
                _stored_json(queued.event),
                queued.prompt_tag,
                queued.received_at,
                cancelled_ord,
            ),
        )

    def record_push(
        self, queue: DispatchQueue, queued: QueuedEvent | None, dropped: list[str], position: int
    ) -> None:
        """One push: the accepted event's row (``queued``, None when it was not accepted), the
        events the cap dropped, the position.  Committed with the other pushes of the same
        event-loop step (outside a loop: at once): a crash before that commit loses these
        rows and the position together, and a replay finds the events on the relays again."""
        with self._db.intake():
            if queued is not None:
                stored = StoredEvent(queued, queue.next_seq - 1)
                self.store_row(queue.channel_of(queued.event), stored, None)
            if dropped:
                channels = {
                    str(r[0])
                    for i in dropped
                    for r in self._db.execute("SELECT channel FROM queued WHERE id = ?", (i,))
                }
                for channel in channels:
                    self._sync(queue, channel)
            self._db.set_meta_with_intake("next_seq", queue.next_seq)
            self._db.set_meta_with_intake("position", position)

    def sync_channel(self, queue: DispatchQueue, channel: str) -> None:
        """Make ``channel``'s rows match the queue (after a settle, a steer, a drop)."""
        with self._db.transaction():
            self._sync(queue, channel)

    def _sync(self, queue: DispatchQueue, channel: str) -> None:
        state = queue.channel_state(channel)
        live: dict[str, int | None] = {}
        if state is not None:
            live.update((e.queued.event.id, None) for e in state.pending)
            live.update((e.queued.event.id, i) for i, e in enumerate(state.cancelled))
        rows = self._db.execute(
            "SELECT id, cancelled_ord FROM queued WHERE channel = ?", (channel,)
        ).fetchall()
        gone: list[str] = []
        for event_id, ord_ in rows:
            if event_id not in live:
                gone.append(event_id)
            elif live[event_id] != ord_:
                self._db.execute(
                    "UPDATE queued SET cancelled_ord = ? WHERE id = ?",
                    (live[event_id], event_id),
                )
        for event_id in gone:
            self._db.execute("DELETE FROM queued WHERE id = ?", (event_id,))
        self._db.remember((i for i in gone if queue.is_remembered(i)), "event", REMEMBERED_IDS)
        if state is None:
            self._db.execute("DELETE FROM channels WHERE name = ?", (channel,))
            return
        self._db.execute(
            "INSERT OR REPLACE INTO channels (name, retry_size, retry_count, "
            "cancel_reason, cancelled_count, backoff_until) VALUES (?, ?, ?, ?, ?, ?)",
            (
                channel,
                state.retry_size,
                state.retry_count,
                state.cancel_reason,
                state.cancelled_count,
                state.backoff_until,
            ),
        )

    def load_queue(
        self,
        rng: Rng | None = None,
        *,
        max_attempts: int = 10,
        owner: str | None = None,
        max_stranger_channels: int | None = None,
        opened: Mapping[str, Event] | None = None,
        channel_of: Callable[[Event], str] = nip10.queue_channel,
    ) -> DispatchQueue:
        """The queue rebuilt from the rows (batches that were running are back in front);
        ``owner`` and ``max_stranger_channels`` as :class:`DispatchQueue` takes them;
        ``opened``: the private messages of :meth:`queued_wraps`, by wrap id; ``channel_of``:
        each event's key (the session scope's, docs/bot.md "Session scope"): a row filed under
        another key (the scope changed) moves to its key now."""
        meta: dict[str, _ChannelRow] = {}
        for name, size, count, reason, cancelled_count, until in self._db.execute(
            "SELECT name, retry_size, retry_count, cancel_reason, cancelled_count, "
            "backoff_until FROM channels"
        ):
            meta[str(name)] = (int(size), int(count), reason, int(cancelled_count), until)
        pending, cancelled, moved = self._queued_rows(opened or {}, channel_of)
        _reroute(moved.values(), meta, pending, cancelled)
        states = []
        for name in {*pending, *cancelled, *meta}:
            size, count, reason, cancelled_count, until = meta.get(name, (0, 0, None, 0, None))
            states.append(
                ChannelState(
                    name=name,
                    pending=pending.get(name, []),
                    retry_size=size,
                    retry_count=count,
                    cancelled=[s for _, s in sorted(cancelled.get(name, []), key=_first)],
                    cancel_reason=_reason(reason),
                    cancelled_count=cancelled_count,
                    backoff_until=None if until is None else float(until),
                )
            )
        remembered = [
            str(r[0])
            for r in self._db.execute(
                "SELECT id FROM (SELECT id, n FROM remembered WHERE kind = 'event' "
                "ORDER BY n DESC LIMIT ?) ORDER BY n",
                (REMEMBERED_IDS,),
            )
        ]
        next_seq = self._db.meta("next_seq") or 0
        try:
            queue = DispatchQueue.rebuild(
                states,
                remembered,
                next_seq,
                rng,
                max_attempts=max_attempts,
                owner=owner,
                max_stranger_channels=max_stranger_channels,
                channel_of=channel_of,
            )
        except QueueError as exc:
            raise StateError(f"the bot state {self._db.path} is inconsistent: {exc}") from None
        if moved:
            self._store_moves(queue, moved)
        return queue

    def _store_moves(self, queue: DispatchQueue, moved: dict[str, _Move]) -> None:
        """Write the rerouted rows: each under its channel now, pending (see :func:`_reroute`),
        and every channel they left or joined synchronised."""
        with self._db.transaction():
            for event_id, move in moved.items():
                self._db.execute(
                    "UPDATE queued SET channel = ?, cancelled_ord = NULL WHERE id = ?",
                    (move.to, event_id),
                )
            for channel in sorted(
                {m.filed for m in moved.values()} | {m.to for m in moved.values()}
            ):
                self._sync(queue, channel)

    def _queued_rows(
        self, opened: Mapping[str, Event], channel_of: Callable[[Event], str]
    ) -> tuple[
        dict[str, list[StoredEvent]], dict[str, list[tuple[int, StoredEvent]]], dict[str, _Move]
    ]:
        """The queued rows by key: pending, cancelled (with their order), and the rows filed
        under another key than their event's now (an earlier version's, or another scope's)."""
        pending: dict[str, list[StoredEvent]] = {}
        cancelled: dict[str, list[tuple[int, StoredEvent]]] = {}
        moved: dict[str, _Move] = {}
        for event_id, channel, seq, text, tag, received, ord_ in self._db.execute(
            "SELECT id, channel, seq, event, prompt_tag, received_at, cancelled_ord "
            "FROM queued ORDER BY channel, seq"
        ):
            try:
                event = self._load_event(text, opened)
            except (InvalidEvent, Nip59Error) as exc:
                raise StateError(
                    f"the bot state {self._db.path}: event {event_id}: {exc}"
                ) from None
            stored = StoredEvent(QueuedEvent(event, tag, float(received)), int(seq))
            key = channel_of(event)
            if key != channel:
                moved[str(event_id)] = _Move(channel, key, ord_ is None)
                pending.setdefault(key, []).append(stored)
            elif ord_ is None:
                pending.setdefault(channel, []).append(stored)
            else:
                cancelled.setdefault(channel, []).append((int(ord_), stored))
        return pending, cancelled, moved

    def queued_wraps(self) -> list[Event]:
        """The gift wraps of the queued private messages, to open before :meth:`load_queue`."""
        wraps = []
        for (text,) in self._db.execute("SELECT event FROM queued ORDER BY channel, seq"):
            with contextlib.suppress(InvalidEvent):  # load_queue reports a broken row
                event = Event.from_json(text)
                wraps += [event] if event.kind in nip59.WRAP_KINDS else []
        return wraps

    def _load_event(self, text: str, opened: Mapping[str, Event]) -> Event:
        event = Event.from_json(text)
        if event.kind not in nip59.WRAP_KINDS:
            return event
        if event.id in opened:
            return opened[event.id]
        if self._agent_secret is None:
            raise StateError(f"the bot state {self._db.path} holds a private message: give the key")
        return nip59.open_gift_wrap(self._agent_secret, event).as_event()


def _stored_json(event: Event) -> str:
    """What a queue row holds: the event, or for a private message the gift wrap it came in."""
    return event.wrap.to_json() if isinstance(event, PrivateEvent) else event.to_json()


def _first(pair: tuple[int, StoredEvent]) -> int:
    return pair[0]


def _seq(stored: StoredEvent) -> int:
    return stored.seq


class _Move(NamedTuple):
    """A queued row filed under another channel than its event's queue channel now."""

    filed: str
    to: str
    pending: bool


def _reroute(
    moves: Iterable[_Move],
    meta: dict[str, _ChannelRow],
    pending: dict[str, list[StoredEvent]],
    cancelled: dict[str, list[tuple[int, StoredEvent]]],
) -> None:
    """Rows move to the channel their event belongs in now (an earlier version queued private
    messages in the author's ``dm-`` channel, with the public notes; the session scope changed
    between ``channel`` and ``thread``), where they are pending,
    in push order.  A channel a pending event left may have lost part of its retry set: the
    set, its attempts and backoff are dropped (the events run again); one left without stored
    cancelled events loses its cancel reason; one left empty, its row."""
    moves = list(moves)
    for name in {m.to for m in moves}:
        pending[name].sort(key=_seq)
    for name in {m.filed for m in moves} & meta.keys():
        size, count, reason, cancelled_count, until = meta[name]
        if any(m.pending and m.filed == name for m in moves):
            size, count, until = 0, 0, None
        if name not in cancelled:
            reason, cancelled_count = None, 0
        meta[name] = (size, count, reason, cancelled_count, until)
        if name not in pending and name not in cancelled:
            del meta[name]


def _reason(value: object) -> CancelReason | None:
    if value is None:
        return None
    if value == "interrupt":
        return "interrupt"
    if value == "steer":
        return "steer"
    raise StateError(f"unknown cancel reason {str(value)[:20]!r} in the bot state")
