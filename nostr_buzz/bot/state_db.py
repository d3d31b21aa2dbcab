"""The connection to the bot's state database (``bot.sqlite3``, :mod:`.state`): the file opened
private to the user in WAL mode with its core tables (and an earlier schema version moved over),
the transactions, the intake transaction that commits a burst of admitted events together, the
``meta`` values and the ``remembered`` ids.

Durability: ``synchronous=NORMAL`` in WAL mode, so a commit survives the process being killed
at any instant and the file is never left inconsistent; a power loss may roll back the newest
intake commits, which is harmless (the events are still on the relays and the position rolled
back with them).  Commits whose loss would repeat something already sent use
:meth:`StateDatabase.transaction` with ``durable=True`` (``synchronous=FULL`` for that commit).
A checkpoint (which syncs the database file) runs off the event loop every few hundred commits
(:mod:`.checkpoint`); the connection's own, which finishes what that one left and lets the log
start over, once the log has grown by ``CHECKPOINT_PAGES`` pages (about 40 MB, not SQLite's
4 MB): with every admitted event its own commit, checkpoints on the loop cost more than the
rest of intake together.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from nostr_buzz.errors import StateError
from nostr_buzz.io.filemodes import make_private, private_dir

from .checkpoint import Checkpointer
from .state_table import remember_ids

__all__ = ["CHECKPOINT_PAGES", "SCHEMA_VERSION", "StateDatabase"]

#: Pages the write-ahead log grows by between two checkpoints (SQLite's default is 1,000): a
#: checkpoint syncs the database file, and at intake's 3 to 5 pages a commit the default made
#: it the largest cost of an admitted event (the module docstring, "Durability").
CHECKPOINT_PAGES: Final = 10_000
SCHEMA_VERSION: Final = 2
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
PRAGMA user_version={SCHEMA_VERSION};
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


class StateDatabase:
    """The database at ``path`` (created with its folder, private to the user), with the core
    tables and the ``tables`` of the modules that keep one of their own.  One event loop uses
    it at a time; every failure is a :class:`StateError`."""

    def __init__(self, path: Path, tables: str = "") -> None:
        self.path = path
        try:
            private_dir(path.parent)  # 0700: nobody else lists or reads the bot's state
            make_private(path)  # 0600, narrowed again if it was left wider
            self._db = sqlite3.connect(
                path, isolation_level=None, timeout=5.0, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the bot state {path}: {exc}") from None
        with self.closed_on_failure():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version == 1:
                self._db.executescript(_MIGRATE_1)
            elif version not in (0, SCHEMA_VERSION):
                raise StateError(
                    f"the bot state {path} has schema version {version}; this nostr-buzz "
                    f"understands {SCHEMA_VERSION} (use the newer version that wrote it)"
                )
            self._db.executescript(_SCHEMA + tables)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._depth = 0
        self._intake_open = False
        self.checkpoints = Checkpointer(path)
        self._meta_pending: dict[str, int] = {}

    @contextlib.contextmanager
    def closed_on_failure(self) -> Iterator[None]:
        """While the database is being set up: what fails closes the connection (an SQLite
        error as a :class:`StateError`)."""
        try:
            yield
        except sqlite3.Error as exc:
            self._db.close()
            raise StateError(f"cannot open the bot state {self.path}: {exc}") from None
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        with contextlib.suppress(StateError):
            self.flush()
        self.checkpoints.join()
        self._db.close()

    @property
    def changes(self) -> int:
        """Rows written through this connection so far (what intake costs, for tests)."""
        return self._db.total_changes

    def execute(self, sql: str, args: Iterable[object] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(args))
        except sqlite3.Error as exc:
            raise StateError(f"cannot use the bot state {self.path}: {exc}") from None

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

    # -- intake -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def intake(self) -> Iterator[None]:
        """Writes committed with the intake of the current event-loop step (outside an event
        loop, a synchronous caller: at once)."""
        self._begin_intake()
        yield
        self._end_intake()

    def _begin_intake(self) -> None:
        """Open (or keep open) the intake transaction, committed by :meth:`flush` at the end
        of the current event-loop step, so that a burst of events costs one commit."""
        if self._depth or self._intake_open:
            return
        self.execute("BEGIN IMMEDIATE")
        self._intake_open = True
        # Without a running loop (a synchronous caller) the intake commits at once itself.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_soon(self._flush_soon)

    def _end_intake(self) -> None:
        """Outside an event loop (a synchronous caller) the intake commits at once."""
        if not self._depth:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self.flush()

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
                self.execute(
                    "INSERT INTO meta (key, value) VALUES "
                    + ", ".join(["(?, ?)"] * len(pairs))
                    + " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [x for pair in pairs for x in pair],
                )
            self._meta_pending.clear()
            self.execute("COMMIT")
            self.checkpoints.committed()
        except StateError:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        finally:
            self._intake_open = False

    # -- meta and remembered ids ------------------------------------------------------------

    def meta(self, key: str) -> int | None:
        row = self.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def set_meta(self, key: str, value: int) -> None:
        """Write ``key`` now (joins the caller's transaction)."""
        self.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def set_meta_with_intake(self, key: str, value: int) -> None:
        """Write ``key`` with the commit of the intake (:meth:`flush`), last."""
        self._meta_pending[key] = value

    def position(self) -> int | None:
        """The newest ``created_at`` handled (never later than the clock at the time)."""
        return self.meta("position")

    def save_position(self, position: int) -> None:
        """The position: with the intake when one is open, else at once."""
        if self._intake_open:
            self.set_meta_with_intake("position", position)
        else:
            self.set_meta("position", position)

    def remember(self, ids: Iterable[str], kind: str, keep: int) -> None:
        """``ids`` added to the ``remembered`` rows of ``kind``, the newest ``keep`` kept."""
        remember_ids(self.execute, ids, kind, keep)
