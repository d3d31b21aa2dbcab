"""The bot's durable state: one SQLite database (WAL) in the state directory.

One file, ``bot.sqlite3``, holds everything a restarted bot continues from, so that a change
and its consequences commit together or not at all:

* ``queued`` — a journal of the admitted events that are still live (pending, in flight or
  stored as cancelled): the signed event, its prompt tag, when it was received and its push
  order number ``seq``; ``cancelled_ord`` is NULL for a pending event, else its place among
  the channel's stored cancelled events.  An admitted event costs one ``INSERT``; nothing
  rewrites the whole queue.  The events admitted in one step of the event loop (a burst read
  from a relay) commit together with the position, so a burst costs one commit; a crash
  before that commit loses those rows and the position together, and the replay at the next
  start finds the events on the relays again.  Any other transaction commits pending intake
  first.
* ``channels`` — per channel, what the pure :class:`DispatchQueue` keeps beyond its events:
  the retry set's size and attempt count, the cancel reason and its count, the backoff time.
* ``remembered`` — delivered and dead-lettered event ids (the queue's duplicate memory, the
  newest 10,000; also the events an earlier run had answered, ``bot/recall.py``), the owner's
  obeyed commands (the newest 100) and refused gift wraps by wrap id (``.refused_wraps``:
  the newest 10,000 that could not be opened, and the newest 10,000 the gate refused, kept
  only while the gate is configured the same): a replay does not open them again.
* ``owner_commands`` — per kind of owner command (``intake.command_kind``: ``!budget`` per cap,
  ``!cancel``/``!new`` per channel, ``!shutdown``), the last one obeyed,
  ``(created_at, id)``: an older command of its kind is never obeyed (the newest 1,000 kinds;
  only the owner's commands are written, so nobody else can push them out).  A database
  without this table (an earlier version) gets it when opened.
* ``meta`` — the position (newest ``created_at`` handled, never later than the clock) and the
  queue's next push order number.
* ``outbox`` — signed events waiting for a relay to accept them (the
  :class:`~nostr_buzz.io.outbox.Outbox` table, on this same connection).

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

Durability: ``synchronous=NORMAL`` in WAL mode, so a commit survives the process being killed
at any instant and the file is never left inconsistent; a power loss may roll back the newest
intake commits, which is harmless (the events are still on the relays and the position rolled
back with them).  Commits whose loss would repeat something already sent use
:meth:`BotStore.transaction` with ``durable=True`` (``synchronous=FULL`` for that commit).  A
checkpoint (which syncs the database file) runs off the event loop every few hundred commits
(:mod:`.checkpoint`); the connection's own, which finishes what that one left and lets the log
start over, once the log has grown by ``CHECKPOINT_PAGES`` pages (about 40 MB, not SQLite's
4 MB): with every admitted event its own commit, checkpoints on the loop cost more than the
rest of intake together.

A state directory written by an earlier nostr-buzz (``queue.json``, ``bot-state.json`` and
``outbox.sqlite3``) is imported once, when the database is created, and the old files are
renamed with an ``.imported`` suffix; a file that cannot be read is kept aside (``.corrupt``)
and reported, never silently dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Final, NamedTuple

import msgspec

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.queue import (
    REMEMBERED_IDS,
    CancelReason,
    ChannelState,
    DispatchQueue,
    QueuedEvent,
    StoredEvent,
)
from nostr_buzz.errors import ConfigError, InvalidEvent, Nip59Error, QueueError, StateError
from nostr_buzz.event import Event
from nostr_buzz.io.filemodes import make_private, private_dir, read_private
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip59
from nostr_buzz.nips.nip59 import PrivateEvent

from .budget_table import BUDGET_SCHEMA, BudgetTable
from .checkpoint import Checkpointer
from .own_lists import OWN_LISTS_SCHEMA, OwnLists
from .owner_commands import (
    OWNER_COMMANDS_SCHEMA,
    REMEMBERED_COMMAND_KINDS,
    OwnerCommands,
)
from .receipts import RECEIPTS_SCHEMA, SessionReceipts
from .refused_wraps import REMEMBERED_REFUSALS, RefusedWraps
from .state_table import remember_ids

__all__ = [
    "LEGACY_FILES",
    "REMEMBERED_COMMANDS",
    "REMEMBERED_COMMAND_KINDS",
    "REMEMBERED_REFUSALS",
    "STATE_DB",
    "BotStore",
]

STATE_DB: Final = "bot.sqlite3"
#: The owner's obeyed command ids remembered (a replay after a restart is not obeyed again).
REMEMBERED_COMMANDS: Final = 100
#: What earlier versions kept in the state directory: the queue snapshot, the position and
#: commands, the metric outbox.
LEGACY_FILES: Final = ("queue.json", "bot-state.json", "outbox.sqlite3")

#: Pages the write-ahead log grows by between two checkpoints (SQLite's default is 1,000): a
#: checkpoint syncs the database file, and at intake's 3 to 5 pages a commit the default made
#: it the largest cost of an admitted event (the module docstring, "Durability").
CHECKPOINT_PAGES: Final = 10_000
_SCHEMA_VERSION: Final = 2
# Rows of ``queued`` are kept in the order they were written (a rowid table), their ids in an
# index of their own: an admitted event appends its row.  Version 1 kept them in id order
# (WITHOUT ROWID), where each new row, of about 700 bytes, landed on a random page and split
# it, at a cost that grew with the number of rows; it is moved over once (``_MIGRATE_1``).
_QUEUED: Final = """
CREATE TABLE IF NOT EXISTS queued (
    n             INTEGER PRIMARY KEY,  -- the order rows were written in
    id            TEXT NOT NULL UNIQUE, -- event id (64 hex)
    channel       TEXT NOT NULL,
    seq           INTEGER NOT NULL,     -- the queue's push order number
    event         TEXT NOT NULL,        -- the signed event, canonical JSON
    prompt_tag    TEXT NOT NULL,
    received_at   REAL NOT NULL,
    cancelled_ord INTEGER               -- NULL: pending; else its place among stored cancelled
);
CREATE INDEX IF NOT EXISTS queued_channel ON queued (channel, seq);
"""
_COLUMNS: Final = "id, channel, seq, event, prompt_tag, received_at, cancelled_ord"
_MIGRATE_1: Final = f"""
BEGIN IMMEDIATE;
ALTER TABLE queued RENAME TO queued_1;
DROP INDEX queued_channel;
{_QUEUED}
INSERT INTO queued ({_COLUMNS}) SELECT {_COLUMNS} FROM queued_1 ORDER BY channel, seq;
DROP TABLE queued_1;
PRAGMA user_version={_SCHEMA_VERSION};
COMMIT;
"""
_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
{_QUEUED}
CREATE TABLE IF NOT EXISTS channels (
    name            TEXT PRIMARY KEY,
    retry_size      INTEGER NOT NULL,
    retry_count     INTEGER NOT NULL,
    cancel_reason   TEXT,
    cancelled_count INTEGER NOT NULL,
    backoff_until   REAL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS remembered (
    n    INTEGER PRIMARY KEY AUTOINCREMENT,
    id   TEXT NOT NULL,
    kind TEXT NOT NULL,                -- 'event' (delivered or dead-lettered), 'command',
                                       -- 'refusal' or 'refusal:<gate scope>' (a wrap id)
    UNIQUE (kind, id)
);
CREATE INDEX IF NOT EXISTS remembered_kind ON remembered (kind, n);
"""


class BotStore:
    """The database at ``state_dir / STATE_DB`` (created with its folder, private to the
    user).  One event loop uses it at a time; every failure is a :class:`StateError`."""

    def __init__(
        self,
        state_dir: Path,
        *,
        outbox_rng: Rng | None = None,
        agent_secret: SecretKey | None = None,
    ) -> None:
        self.path = state_dir / STATE_DB
        # A queued private message is stored as its gift wrap (encrypted, signed) and opened
        # again when the queue is loaded (with the agent's key, or by the caller through the
        # agent's signer: see queued_wraps): no plaintext at rest either.
        self._agent_secret = agent_secret
        fresh = not self.path.exists()
        try:
            private_dir(state_dir)  # 0700: nobody else lists or reads the bot's state
            make_private(self.path)  # 0600, narrowed again if it was left wider
            self._db = sqlite3.connect(
                self.path, isolation_level=None, timeout=5.0, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the bot state {self.path}: {exc}") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version == 1:
                self._db.executescript(_MIGRATE_1)
            elif version not in (0, _SCHEMA_VERSION):
                raise StateError(
                    f"the bot state {self.path} has schema version {version}; this nostr-buzz "
                    f"understands {_SCHEMA_VERSION} (use the newer version that wrote it)"
                )
            self._db.executescript(
                _SCHEMA + RECEIPTS_SCHEMA + BUDGET_SCHEMA + OWNER_COMMANDS_SCHEMA + OWN_LISTS_SCHEMA
            )
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            self.outbox = Outbox(self.path, rng=outbox_rng, connection=self._db)
            self.receipts = SessionReceipts(self._exec, self.transaction)
            self.budget = BudgetTable(self._exec, self.transaction)
            self.owner_commands = OwnerCommands(self._exec, self.transaction)
            self.own_lists = OwnLists(self._exec, self.transaction)
        except sqlite3.Error as exc:
            self._db.close()
            raise StateError(f"cannot open the bot state {self.path}: {exc}") from None
        except BaseException:
            self._db.close()
            raise
        self._depth = 0
        self._intake_open = False
        self.checkpoints = Checkpointer(self.path)
        self._meta_pending: dict[str, int] = {}
        self.refusals = RefusedWraps(self._exec, self.transaction, self._intake)
        #: Problems met while importing files of an earlier version (for a diagnostic).
        self.import_problems: list[str] = []
        if fresh:
            _import_legacy(self, state_dir)

    def close(self) -> None:
        with contextlib.suppress(StateError):
            self.flush()
        self.checkpoints.join()
        self._db.close()

    @property
    def changes(self) -> int:
        """Rows written through this connection so far (what intake costs, for tests)."""
        return self._db.total_changes

    # -- transactions -----------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[None]:
        """Everything inside commits together (nested calls join the outer one).  ``durable``:
        the commit is synced to disk before this returns (``synchronous=FULL``)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.flush()  # intake committed first: what follows may be sent right after its commit
        try:
            if durable:
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StateError(f"cannot write the bot state {self.path}: {exc}") from None
        self._depth = 1
        try:
            yield
            self._db.execute("COMMIT")
            self.checkpoints.committed()
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StateError(f"cannot write the bot state {self.path}: {exc}") from None
            raise
        finally:
            self._depth = 0
            if durable:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("PRAGMA synchronous=NORMAL")

    def _begin_intake(self) -> None:
        """Open (or keep open) the intake transaction, committed by :meth:`flush` at the end
        of the current event-loop step, so that a burst of events costs one commit."""
        if self._depth or self._intake_open:
            return
        self._exec("BEGIN IMMEDIATE")
        self._intake_open = True
        # Without a running loop (a synchronous caller) record_push commits at once itself.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        with contextlib.suppress(StateError):  # a failure shows at the next use of the file
            self.flush()

    def flush(self) -> None:
        """Commit the intake transaction, if one is open (its meta values written last)."""
        if not self._intake_open:
            return
        try:
            if self._meta_pending:  # one statement for them all: intake pays it every commit
                pairs = list(self._meta_pending.items())
                self._exec(
                    "INSERT INTO meta (key, value) VALUES "
                    + ", ".join(["(?, ?)"] * len(pairs))
                    + " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [x for pair in pairs for x in pair],
                )
            self._meta_pending.clear()
            self._exec("COMMIT")
            self.checkpoints.committed()
        except StateError:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        finally:
            self._intake_open = False

    def _exec(self, sql: str, args: Iterable[object] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(args))
        except sqlite3.Error as exc:
            raise StateError(f"cannot use the bot state {self.path}: {exc}") from None

    # -- meta -------------------------------------------------------------------------------

    def _meta(self, key: str) -> int | None:
        row = self._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def _set_meta(self, key: str, value: int) -> None:
        self._exec(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def position(self) -> int | None:
        """The newest ``created_at`` handled (never later than the clock at the time)."""
        return self._meta("position")

    def save_position(self, position: int) -> None:
        if self._intake_open:
            self._meta_pending["position"] = position
        else:
            self._set_meta("position", position)

    # -- remembered ids ---------------------------------------------------------------------

    def commands(self) -> list[str]:
        """Obeyed owner commands, oldest first."""
        rows = self._exec(
            "SELECT id FROM remembered WHERE kind = 'command' ORDER BY n DESC LIMIT ?",
            (REMEMBERED_COMMANDS,),
        ).fetchall()
        return [str(r[0]) for r in reversed(rows)]

    def remember_command(self, event: Event, kind: str | None, position: int) -> None:
        """The owner's command ``event`` is obeyed: its id is remembered and it is the last of
        its ``kind`` (None: an approval, which has none; the newest
        :data:`REMEMBERED_COMMAND_KINDS` kinds are kept, ``.owner_commands``), committed
        before it takes effect."""
        with self.transaction(durable=True):
            self._remember([event.id], "command", REMEMBERED_COMMANDS)
            self.save_position(position)
            if kind is not None:
                self.owner_commands.record(event, kind)

    def remember_handled(self, event_id: str, position: int) -> None:
        """An event handled without a turn (an earlier run answered it, ``bot/recall.py``):
        remembered with the delivered ones, committed with the intake and the position."""
        self._begin_intake()
        self._remember([event_id], "event", REMEMBERED_IDS)
        self._meta_pending["position"] = position
        self._end_intake()

    def _remember(self, ids: Iterable[str], kind: str, keep: int) -> None:
        remember_ids(self._exec, ids, kind, keep)

    # -- the queue --------------------------------------------------------------------------

    def record_push(
        self, queue: DispatchQueue, queued: QueuedEvent | None, dropped: list[str], position: int
    ) -> None:
        """One push: the accepted event's row (``queued``, None when it was not accepted), the
        events the cap dropped, the position.  Committed with the other pushes of the same
        event-loop step (outside a loop: at once): a crash before that commit loses these
        rows and the position together, and a replay finds the events on the relays again."""
        self._begin_intake()
        if queued is not None:
            event = queued.event
            self._exec(
                "INSERT OR REPLACE INTO queued (id, channel, seq, event, prompt_tag, "
                "received_at, cancelled_ord) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (
                    event.id,
                    queue.channel_of(event),
                    queue.next_seq - 1,
                    _stored_json(event),
                    queued.prompt_tag,
                    queued.received_at,
                ),
            )
        if dropped:
            channels = {
                str(r[0])
                for i in dropped
                for r in self._exec("SELECT channel FROM queued WHERE id = ?", (i,))
            }
            for channel in channels:
                self._sync(queue, channel)
        self._meta_pending["next_seq"] = queue.next_seq
        self._meta_pending["position"] = position
        self._end_intake()

    @contextlib.contextmanager
    def _intake(self) -> Iterator[None]:
        """Writes committed with the intake of the current event-loop step."""
        self._begin_intake()
        yield
        self._end_intake()

    def _end_intake(self) -> None:
        """Outside an event loop (a synchronous caller) the intake commits at once."""
        if not self._depth:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self.flush()

    def sync_channel(self, queue: DispatchQueue, channel: str) -> None:
        """Make ``channel``'s rows match the queue (after a settle, a steer, a drop)."""
        with self.transaction():
            self._sync(queue, channel)

    def _sync(self, queue: DispatchQueue, channel: str) -> None:
        state = queue.channel_state(channel)
        live: dict[str, int | None] = {}
        if state is not None:
            live.update((e.queued.event.id, None) for e in state.pending)
            live.update((e.queued.event.id, i) for i, e in enumerate(state.cancelled))
        rows = self._exec(
            "SELECT id, cancelled_ord FROM queued WHERE channel = ?", (channel,)
        ).fetchall()
        gone: list[str] = []
        for event_id, ord_ in rows:
            if event_id not in live:
                gone.append(event_id)
            elif live[event_id] != ord_:
                self._exec(
                    "UPDATE queued SET cancelled_ord = ? WHERE id = ?",
                    (live[event_id], event_id),
                )
        for event_id in gone:
            self._exec("DELETE FROM queued WHERE id = ?", (event_id,))
        self._remember((i for i in gone if queue.is_remembered(i)), "event", REMEMBERED_IDS)
        if state is None:
            self._exec("DELETE FROM channels WHERE name = ?", (channel,))
            return
        self._exec(
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
        meta: dict[str, tuple[int, int, str | None, int, float | None]] = {}
        for name, size, count, reason, cancelled_count, until in self._exec(
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
            for r in self._exec(
                "SELECT id FROM (SELECT id, n FROM remembered WHERE kind = 'event' "
                "ORDER BY n DESC LIMIT ?) ORDER BY n",
                (REMEMBERED_IDS,),
            )
        ]
        next_seq = self._meta("next_seq") or 0
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
            raise StateError(f"the bot state {self.path} is inconsistent: {exc}") from None
        if moved:
            self._store_moves(queue, moved)
        return queue

    def _store_moves(self, queue: DispatchQueue, moved: dict[str, _Move]) -> None:
        """Write the rerouted rows: each under its channel now, pending (see :func:`_reroute`),
        and every channel they left or joined synchronised."""
        with self.transaction():
            for event_id, move in moved.items():
                self._exec(
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
        for event_id, channel, seq, text, tag, received, ord_ in self._exec(
            "SELECT id, channel, seq, event, prompt_tag, received_at, cancelled_ord "
            "FROM queued ORDER BY channel, seq"
        ):
            try:
                event = self._load_event(text, opened)
            except (InvalidEvent, Nip59Error) as exc:
                raise StateError(f"the bot state {self.path}: event {event_id}: {exc}") from None
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
        for (text,) in self._exec("SELECT event FROM queued ORDER BY channel, seq"):
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
            raise StateError(f"the bot state {self.path} holds a private message: give the key")
        return nip59.open_gift_wrap(self._agent_secret, event).as_event()


# -- an earlier version's files ----------------------------------------------------------------


def _import_legacy(store: BotStore, state_dir: Path) -> None:
    """Import an earlier version's files once (docs/bot.md); what cannot be read is set aside."""
    queue_file, state_file, outbox_file = (state_dir / name for name in LEGACY_FILES)
    with store.transaction():
        if queue_file.exists():
            try:
                queue = DispatchQueue.restore(_read(queue_file))
            except (OSError, ConfigError, QueueError) as exc:
                _set_aside(store, queue_file, f"queue.json: {exc}")
            else:
                _import_queue(store, queue)
                _rename(queue_file, ".imported")
        if state_file.exists():
            try:
                legacy = msgspec.json.decode(_read(state_file), type=_LegacyState)
            except (OSError, ConfigError, msgspec.DecodeError) as exc:
                _set_aside(store, state_file, f"bot-state.json: {exc}")
            else:
                if legacy.position is not None:
                    store.save_position(legacy.position)
                store._remember(legacy.commands, "command", REMEMBERED_COMMANDS)
                _rename(state_file, ".imported")
        if outbox_file.exists():
            try:
                with Outbox(outbox_file) as old:
                    for entry in old.entries():
                        store.outbox.add(entry.event, now=entry.added_at)
            except Exception as exc:  # any trouble with the old file: keep it, report it
                _set_aside(store, outbox_file, f"outbox.sqlite3: {exc}")
            else:
                for suffix in ("", "-wal", "-shm"):
                    old_file = state_dir / (LEGACY_FILES[2] + suffix)
                    if old_file.exists():
                        _rename(old_file, ".imported")


def _import_queue(store: BotStore, queue: DispatchQueue) -> None:
    for name in queue.channel_names():
        state = queue.channel_state(name)
        assert state is not None
        for i, stored in enumerate([*state.pending, *state.cancelled]):
            ord_ = i - len(state.pending) if i >= len(state.pending) else None
            event = stored.queued.event
            store._exec(
                "INSERT OR REPLACE INTO queued (id, channel, seq, event, prompt_tag, "
                "received_at, cancelled_ord) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event.id,
                    name,
                    stored.seq,
                    event.to_json(),
                    stored.queued.prompt_tag,
                    stored.queued.received_at,
                    ord_,
                ),
            )
        store.sync_channel(queue, name)
    store._remember(queue.remembered_ids(), "event", REMEMBERED_IDS)
    store._set_meta("next_seq", queue.next_seq)


def _set_aside(store: BotStore, path: Path, problem: str) -> None:
    store.import_problems.append(problem)
    _rename(path, ".corrupt")


class _LegacyState(msgspec.Struct):
    """``bot-state.json`` of an earlier nostr-buzz: the position and the obeyed owner commands
    (other fields are ignored)."""

    position: Annotated[int, msgspec.Meta(ge=0)] | None = None
    commands: list[str] = msgspec.field(default_factory=list)


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
    meta: dict[str, tuple[int, int, str | None, int, float | None]],
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


def _read(path: Path) -> bytes:
    """An earlier version's file, never read through a symbolic link (ConfigError)."""
    with read_private(path) as fh:
        return fh.read()


def _rename(path: Path, suffix: str) -> None:
    with contextlib.suppress(OSError):
        os.replace(path, path.with_name(path.name + suffix))
