"""The durable metric outbox: signed events waiting for enough relays to store them
(docs/metrics.md).

An edge around one SQLite file (stdlib ``sqlite3``, WAL journal, ``synchronous=FULL``) in the
state directory.  It holds only signed events as their canonical JSON — for NIP-AM that is the
NIP-44 ciphertext, never a plaintext payload and never a key.  :meth:`Outbox.add` commits before
it returns, so the publisher can write an entry *before* the first send and a crash after that
loses nothing; a new :class:`Outbox` on the same file sees every entry.

The clock and the jitter source are passed in: ``now`` on each call, ``rng`` (a
:class:`~nostr_buzz.core.backoff.Rng`; one ``uniform(0, 1)`` draw per attempt) at construction
or per call.  The SQL is the only I/O.

An entry is not kept forever: :meth:`Outbox.expired` lists those added at least
:data:`GIVE_UP_AFTER` (or the caller's bound) ago, which the publisher removes and reports as
given up, so that relays that refuse or never answer cannot keep the bot sending for ever.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

import msgspec

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.delivery_state import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    RelayRecord,
    after_answer,
    backoff_delay,
)
from nostr_buzz.core.delivery_state import next_attempt as first_due
from nostr_buzz.errors import InvalidEvent, OutboxError
from nostr_buzz.event import Event

from .filemodes import make_private, private_dir
from .relay import Verdict

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "GIVE_UP_AFTER",
    "OUTBOX_FILE",
    "Outbox",
    "OutboxEntry",
    "RelayRecord",
    "backoff_delay",
]

#: An entry no relay took within this long (7 days, in seconds) is given up.
GIVE_UP_AFTER: Final = 7 * 86400.0
#: The outbox's file name inside the state directory (``state_dir`` in ``buzz.toml``).
OUTBOX_FILE: Final = "metrics-outbox.sqlite3"
#: Longest relay message kept as the last error of an entry.
_ERROR_CHARS: Final = 500

#: 2: a record per relay (``outbox_relay``); a version 1 file is migrated when opened.
_SCHEMA_VERSION: Final = 2
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS outbox (
    id           TEXT PRIMARY KEY,          -- the event id (64 hex)
    event        TEXT NOT NULL,             -- the signed event, canonical JSON
    kind         INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    added_at     REAL NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL NOT NULL,
    accepted_by  TEXT NOT NULL DEFAULT '[]', -- JSON list of relays that have the event
    last_error   TEXT,
    relays       TEXT                       -- JSON list of where it goes; NULL: the default
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt);
"""
#: One row per entry and relay it is meant for (core/delivery_state.py): accepted, or waiting
#: with its own attempts, next attempt and last error.
_RELAY_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS outbox_relay (
    id           TEXT NOT NULL,             -- the event id, as in outbox
    relay        TEXT NOT NULL,
    accepted_at  REAL,                      -- NULL: not yet
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL NOT NULL DEFAULT 0,
    last_error   TEXT,
    PRIMARY KEY (id, relay)
) WITHOUT ROWID;
"""
#: What an entry written before the per-relay rows already knew: the relays that took it.
_BACKFILL: Final = """
INSERT OR IGNORE INTO outbox_relay (id, relay, accepted_at)
SELECT outbox.id, json_each.value, outbox.added_at FROM outbox, json_each(outbox.accepted_by)
WHERE json_valid(outbox.accepted_by);
DELETE FROM outbox_relay WHERE id NOT IN (SELECT id FROM outbox);
"""


@dataclass(frozen=True)
class OutboxEntry:
    """One event waiting in the outbox.

    ``accepted_by``: relays that answered ``OK true`` or ``duplicate:`` in any attempt so far
    (they are counted together towards the publisher's ``min_ok``).
    """

    event: Event
    added_at: float
    attempts: int
    next_attempt: float
    accepted_by: tuple[str, ...]
    last_error: str | None
    #: Where this event goes; empty: the publisher's relays.
    relays: tuple[str, ...] = ()
    #: Where it stands on each relay tried or meant (core/delivery_state.py).
    relay_records: tuple[RelayRecord, ...] = ()

    @property
    def id(self) -> str:
        return self.event.id


def _summarise(verdicts: Iterable[Verdict]) -> str | None:
    """The refusals of one attempt, one ``relay: reason`` per failing relay."""
    parts = [f"{v.relay}: {v.reason}" for v in verdicts if not v.ok]
    if not parts:
        return None
    return _clip("; ".join(parts))


def _clip(text: str) -> str:
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"


class Outbox:
    """A SQLite outbox at ``path`` (its folder is created; a new file is private to the
    user).  Use as a context manager or call :meth:`close`, from one thread at a time.  Every
    method raises :class:`~nostr_buzz.errors.OutboxError` when the database cannot be used."""

    @classmethod
    def in_state_dir(cls, state_dir: str | Path, *, rng: Rng | None = None) -> Outbox:
        """The outbox at ``state_dir / OUTBOX_FILE``."""
        return cls(Path(state_dir) / OUTBOX_FILE, rng=rng)

    def __init__(
        self,
        path: str | Path,
        *,
        rng: Rng | None = None,
        connection: sqlite3.Connection | None = None,
    ) -> None:
        """``connection``: an open connection to ``path`` to share (its owner keeps it open and
        closes it; its own transactions may then include this outbox's writes), else the
        outbox opens and owns one."""
        self.path = Path(path)
        # Jitter needs no cryptographic quality; the OS seeds it unless a test pins it.
        self._rng: Rng = rng if rng is not None else random.Random()
        #: Ids of rows that no longer verify as events (disk damage, manual edits): skipped.
        self.damaged: set[str] = set()
        self._owns_db = connection is None
        if connection is not None:
            self._db = connection
        else:
            self._db = self._connect()
        try:
            if self._owns_db:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")  # a committed add survives power loss
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if self._owns_db and version not in (0, 1, _SCHEMA_VERSION):
                raise OutboxError(
                    f"the outbox {self.path} has schema version {version}; this nostr-buzz "
                    f"understands {_SCHEMA_VERSION} (use the newer version that wrote it)"
                )
            self._db.executescript(_SCHEMA)
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(outbox)")]
            if "relays" not in columns:  # a file written before events had relays of their own
                self._db.execute("ALTER TABLE outbox ADD COLUMN relays TEXT")
            self._migrate_relay_records()
            if self._owns_db:
                self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            self.close()
            raise OutboxError(f"cannot open the outbox {self.path}: {exc}") from None
        except OutboxError:
            self.close()
            raise

    def _migrate_relay_records(self) -> None:
        """Create the per-relay table; on a file that had none (schema 1, or a bot's state
        database written before it), one accepted row per relay each entry named as having
        it, so that none of them is sent the event again."""
        new = not self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_relay'"
        ).fetchone()
        self._db.executescript(_RELAY_SCHEMA)
        if new:
            self._db.executescript(_BACKFILL)

    def _connect(self) -> sqlite3.Connection:
        try:
            private_dir(self.path.parent)
            # Who published what and when is nobody else's business: 0600 (SQLite gives its
            # -wal and -shm files the same mode).
            make_private(self.path)
            # isolation_level=None: transactions are explicit, so each write commits at once.
            # check_same_thread=False: a bot may open it before starting its event loop's
            # thread; calls never overlap (the publisher runs on one loop).
            return sqlite3.connect(
                self.path, isolation_level=None, timeout=5.0, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise OutboxError(f"cannot open the outbox {self.path}: {exc}") from None

    def __enter__(self) -> Outbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, unless it is shared (its owner closes it)."""
        if self._owns_db:
            self._db.close()

    # -- writes ---------------------------------------------------------------------------

    def add(
        self,
        event: Event,
        *,
        now: float = 0.0,
        relays: tuple[str, ...] = (),
        due: float = 0.0,
    ) -> bool:
        """Store ``event`` durably (committed on return, or with the transaction the caller
        has open on a shared connection), due at ``due`` (default: at once); idempotent by id.
        ``relays``: where this event goes (default: the publisher's relays).

        Returns True when it was new.  Only signed, verified :class:`Event` objects are
        accepted, so nothing but ciphertext and signatures ever reaches the file.
        """
        if not isinstance(event, Event):
            raise OutboxError("the outbox stores only signed Event objects")
        try:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO outbox (id, event, kind, created_at, added_at, "
                "next_attempt, relays) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event.id,
                    event.to_json(),
                    event.kind,
                    event.created_at,
                    now,
                    due,
                    json.dumps(list(relays)) if relays else None,
                ),
            )
            if cursor.rowcount == 1:
                self._db.executemany(
                    "INSERT OR IGNORE INTO outbox_relay (id, relay, next_attempt) VALUES (?, ?, ?)",
                    [(event.id, url, due) for url in dict.fromkeys(relays)],
                )
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot write to the outbox {self.path}: {exc}") from None
        return cursor.rowcount == 1

    def record_attempt(
        self,
        event_id: str,
        now: float,
        verdicts: Mapping[str, Verdict] | Iterable[Verdict],
        *,
        rng: Rng | None = None,
        error: str | None = None,
        not_before: float | None = None,
    ) -> OutboxEntry | None:
        """Record one send attempt: each relay that answered gets its record
        (:func:`~nostr_buzz.core.delivery_state.after_answer`: accepted, or retried after its
        own backoff, not before ``not_before``, a rate-limited relay's pause); the entry counts
        the attempt, remembers which relays have it and falls due when its first waiting relay
        does (after :func:`backoff_delay` when no relay answered).  ``error``: what went wrong,
        kept as the entry's ``last_error`` (default: the relays' refusals).  A relay still on
        the wire is recorded by a later call with its verdict alone.  None when ``event_id`` is
        not in the outbox (already removed)."""
        listed = list(verdicts.values() if isinstance(verdicts, Mapping) else verdicts)
        u = (rng or self._rng).uniform(0.0, 1.0)
        try:
            # A savepoint, not BEGIN: on a connection shared with an open transaction it
            # nests inside it (and commits with it) instead of failing.
            self._db.execute("SAVEPOINT outbox_attempt")
            try:
                found = self._record(event_id, now, listed, u, error, not_before)
                self._db.execute("RELEASE outbox_attempt")
            except BaseException:
                self._db.execute("ROLLBACK TO outbox_attempt")
                self._db.execute("RELEASE outbox_attempt")
                raise
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot write to the outbox {self.path}: {exc}") from None
        return self.get(event_id) if found else None

    def _record(
        self,
        event_id: str,
        now: float,
        listed: list[Verdict],
        u: float,
        error: str | None,
        not_before: float | None,
    ) -> bool:
        """:meth:`record_attempt`'s writes, inside its savepoint; False: no such entry."""
        row = self._db.execute(
            "SELECT attempts, accepted_by, relays FROM outbox WHERE id = ?", (event_id,)
        ).fetchone()
        if row is None:
            return False
        attempts = int(row[0]) + 1
        accepted = list(dict.fromkeys([*_relays(row[1]), *(v.relay for v in listed if v.ok)]))
        held = {r.relay: r for r in self._relay_records(event_id)}
        for verdict in listed:
            reason = None if verdict.ok else _clip(verdict.reason)
            record = after_answer(
                held.get(verdict.relay),
                verdict.relay,
                ok=verdict.ok,
                error=reason,
                now=now,
                u=u,
                not_before=not_before,
            )
            held[verdict.relay] = record
            self._db.execute(
                "INSERT OR REPLACE INTO outbox_relay (id, relay, accepted_at, attempts, "
                "next_attempt, last_error) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    record.relay,
                    record.accepted_at,
                    record.attempts,
                    record.next_attempt,
                    record.last_error,
                ),
            )
        targets = (_relays(row[2]) if row[2] else ()) or tuple(held)
        due = first_due(targets, held.values()) if listed else None
        if due is None:  # nobody answered (or all have it): the entry's own backoff
            due = now + backoff_delay(attempts, u)
        self._db.execute(
            "UPDATE outbox SET attempts = ?, next_attempt = ?, accepted_by = ?, "
            "last_error = ? WHERE id = ?",
            (
                attempts,
                max(due, not_before or 0.0),
                json.dumps(accepted),
                _clip(error) if error else _summarise(listed),
                event_id,
            ),
        )
        return True

    def _relay_records(self, event_id: str) -> list[RelayRecord]:
        rows = self._db.execute(
            "SELECT relay, accepted_at, attempts, next_attempt, last_error FROM outbox_relay "
            "WHERE id = ? ORDER BY relay",
            (event_id,),
        ).fetchall()
        return [RelayRecord(str(r[0]), r[1], int(r[2]), float(r[3]), r[4]) for r in rows]

    def make_due(self, now: float) -> int:
        """Every entry due at ``now`` (a relay came back: no need to wait out the backoff);
        how many were waiting."""
        try:
            cursor = self._db.execute(
                "UPDATE outbox SET next_attempt = ? WHERE next_attempt > ?", (now, now)
            )
            self._db.execute(
                "UPDATE outbox_relay SET next_attempt = ? WHERE next_attempt > ?", (now, now)
            )
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot write to the outbox {self.path}: {exc}") from None
        return cursor.rowcount

    def remove(self, event_id: str) -> bool:
        """Forget an entry (enough relays have it); True when it was there."""
        try:
            cursor = self._db.execute("DELETE FROM outbox WHERE id = ?", (event_id,))
            self._db.execute("DELETE FROM outbox_relay WHERE id = ?", (event_id,))
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot write to the outbox {self.path}: {exc}") from None
        return cursor.rowcount == 1

    # -- reads ----------------------------------------------------------------------------

    def get(self, event_id: str) -> OutboxEntry | None:
        rows = self._select("WHERE id = ?", (event_id,))
        return rows[0] if rows else None

    def due(self, now: float, *, limit: int = 100) -> list[OutboxEntry]:
        """Entries whose next attempt time has come, oldest schedule first."""
        return self._select(
            "WHERE next_attempt <= ? ORDER BY next_attempt, id LIMIT ?", (now, limit)
        )

    def expired(self, before: float, *, limit: int = 100) -> list[OutboxEntry]:
        """Entries added at or before ``before`` (now minus the give-up bound), oldest first."""
        return self._select("WHERE added_at <= ? ORDER BY added_at, id LIMIT ?", (before, limit))

    def entries(self) -> list[OutboxEntry]:
        """Every entry, soonest first (for diagnostics)."""
        return self._select("ORDER BY next_attempt, id", ())

    def pending_count(self) -> int:
        try:
            row = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot read the outbox {self.path}: {exc}") from None
        return int(row[0])

    def next_due(self) -> float | None:
        """The earliest next attempt time, or None when the outbox is empty."""
        try:
            row = self._db.execute("SELECT min(next_attempt) FROM outbox").fetchone()
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot read the outbox {self.path}: {exc}") from None
        return None if row[0] is None else float(row[0])

    def _select(self, where: str, args: tuple[object, ...]) -> list[OutboxEntry]:
        query = (
            "SELECT id, event, added_at, attempts, next_attempt, accepted_by, last_error, "
            f"relays FROM outbox {where}"
        )
        try:
            rows = self._db.execute(query, args).fetchall()
            records = {str(row[0]): self._relay_records(str(row[0])) for row in rows}
        except sqlite3.Error as exc:
            raise OutboxError(f"cannot read the outbox {self.path}: {exc}") from None
        entries = []
        for event_id, text, added_at, attempts, next_attempt, accepted_by, error, to in rows:
            try:
                # Re-verified on the way out: a damaged row is never sent as if it were valid.
                event = Event.from_json(text)
            except InvalidEvent:
                # Skipped (not deleted: the file is the user's evidence); listed in ``damaged``.
                self.damaged.add(str(event_id))
                continue
            entries.append(
                OutboxEntry(
                    event=event,
                    added_at=float(added_at),
                    attempts=int(attempts),
                    next_attempt=float(next_attempt),
                    accepted_by=_relays(accepted_by),
                    last_error=error,
                    relays=_relays(to) if to else (),
                    relay_records=tuple(records[str(event_id)]),
                )
            )
        return entries


def _relays(text: str) -> tuple[str, ...]:
    """A stored JSON list of relay URLs; a damaged one counts as none."""
    try:
        return msgspec.json.decode(text, type=tuple[str, ...])
    except msgspec.DecodeError:
        return ()
