"""Reading a bot's state directory for ``buzz watch``, read-only (docs/cli.md, "buzz watch").

The watcher runs beside ``buzz run`` and changes nothing: it needs no key, writes no file and
never takes a write lock.

* **The directory** must be a bot's: it is checked as the bot checks it
  (:func:`~nostr_buzz.io.filemodes.check_private_dir`: not a symbolic link, this user's, not
  writable by group or others, nor any directory above it), changing nothing, and must hold
  the bot's database, a regular file of this user.  Anything else is a
  :class:`~nostr_buzz.errors.StateDirError`.
* **The database** is opened with SQLite's read-only URI (``mode=ro``); one read transaction
  per snapshot, so the counts agree with each other.  While a bot has it open its WAL file
  exists and the reader shares it; without one (no bot runs) it is opened ``immutable``, so
  that not even SQLite's shared-memory file is created.  A database without the bot's tables
  or with another schema version is refused (``not_a_bot``).
* **The diagnostics feed** is followed as it grows (:class:`FeedTail`): the rotated file
  first, then the current one; a rotation is noticed by the file's inode changing.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final
from urllib.parse import quote

import msgspec

from nostr_buzz.core.budget import Caps, Spend
from nostr_buzz.core.delivery_state import RelayRecord
from nostr_buzz.errors import ConfigError, StateDirError, StateError
from nostr_buzz.io.filemodes import check_private_dir, read_private
from nostr_buzz.reports.watch import (
    FeedRecord,
    FeedSummary,
    Moment,
    OutboxRow,
    QueuedRow,
    RetryRow,
    StateSnapshot,
    WatchView,
    watch_view,
)
from nostr_buzz.timestamps import rfc3339_ms

__all__ = [
    "FEED_FILE",
    "STATE_DB",
    "FeedTail",
    "Watcher",
    "check_state_dir",
    "moment",
    "read_snapshot",
]

#: The bot's database and diagnostics feed in its state directory (the names
#: :mod:`nostr_buzz.bot.state` and :mod:`nostr_buzz.bot.plugin` write; the watcher does not
#: load the bot).
STATE_DB: Final = "bot.sqlite3"
FEED_FILE: Final = "diagnostics.jsonl"
#: The bot's schema versions (``PRAGMA user_version``) this reader understands: the columns it
#: reads are the same in both (2 only changed how ``queued`` rows are ordered on disk).
_SCHEMA_VERSIONS: Final = (1, 2)
_TABLES: Final = frozenset({"meta", "queued", "channels", "outbox"})


def check_state_dir(path: Path) -> Path:
    """``path`` as an absolute bot state directory, checked (see the module docstring)."""
    try:
        directory = check_private_dir(path)
    except FileNotFoundError:
        raise StateDirError("missing", f"no state directory {Path(path).absolute()}") from None
    except NotADirectoryError:
        raise StateDirError("not_a_bot", f"{Path(path).absolute()} is not a directory") from None
    except ConfigError as exc:
        raise StateDirError("unsafe", str(exc)) from None
    database = directory / STATE_DB
    try:
        read_private(database).close()
    except FileNotFoundError:
        raise StateDirError(
            "missing",
            f"no bot state in {directory} (no {STATE_DB}): give the state_dir of a bot that has "
            "run (--state-dir, --config)",
        ) from None
    except ConfigError as exc:
        raise StateDirError("unsafe", str(exc)) from None
    except OSError as exc:
        raise StateDirError("not_a_bot", f"cannot read {database}: {exc.strerror}") from None
    return directory


class _Signed(msgspec.Struct):
    pubkey: str = ""


_SIGNER: Final = msgspec.json.Decoder(_Signed)


def _signer(event_json: str) -> str:
    try:
        return _SIGNER.decode(event_json).pubkey
    except msgspec.DecodeError:
        return ""


def read_snapshot(directory: Path) -> StateSnapshot:
    """The checked state directory's database in one read transaction (never written)."""
    database = directory / STATE_DB
    uri = f"file:{quote(str(database))}?mode=ro"
    if not os.path.exists(f"{database}-wal"):  # no bot has it open: nothing may change it
        uri += "&immutable=1"
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=2.0)
    except sqlite3.Error as exc:
        raise StateError(f"cannot open the bot state {database}: {exc}") from None
    try:
        db.execute("BEGIN")
        _check_schema(db, database)
        queued = tuple(
            QueuedRow(i, channel, _signer(event), float(received), cancelled is not None)
            for i, channel, event, received, cancelled in db.execute(
                "SELECT id, channel, event, received_at, cancelled_ord FROM queued"
            )
        )
        retries = tuple(
            RetryRow(name, int(attempts), until)
            for name, attempts, until in db.execute(
                "SELECT name, retry_count, backoff_until FROM channels"
            )
        )
        outbox = _outbox(db)
        spends, notes = _budget(db)
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise StateDirError("not_a_bot", f"{database} is not a SQLite database") from None
        raise StateError(f"cannot read the bot state {database}: {exc}") from None
    finally:
        db.close()
    return StateSnapshot(queued, retries, outbox, spends, notes)


def _outbox(db: sqlite3.Connection) -> tuple[OutboxRow, ...]:
    """The outbox's entries, each with its relays and its record on each (none in a database
    written before the outbox kept one per relay)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    records: dict[str, list[RelayRecord]] = {}
    if "outbox_relay" in tables:
        for event_id, relay, accepted_at, attempts, next_attempt, error in db.execute(
            "SELECT id, relay, accepted_at, attempts, next_attempt, last_error FROM outbox_relay"
        ):
            record = RelayRecord(
                str(relay),
                None if accepted_at is None else float(accepted_at),
                int(attempts),
                float(next_attempt),
                None if error is None else str(error),
            )
            records.setdefault(str(event_id), []).append(record)
    return tuple(
        OutboxRow(
            int(kind),
            float(added),
            int(attempts),
            str(event_id),
            _relay_list(relays),
            tuple(records.get(str(event_id), ())),
        )
        for event_id, kind, added, attempts, relays in db.execute(
            "SELECT id, kind, added_at, attempts, relays FROM outbox"
        )
    )


def _relay_list(text: object) -> tuple[str, ...]:
    """A stored JSON list of relays; none when missing or damaged."""
    if not isinstance(text, str):
        return ()
    try:
        return msgspec.json.decode(text, type=tuple[str, ...])
    except msgspec.DecodeError:
        return ()


def _budget(db: sqlite3.Connection) -> tuple[tuple[Spend, ...], tuple[tuple[str, str], ...]]:
    """The budget's settled spend and notes (none in a database written before budgets)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"budget_spend", "budget_notes"} <= tables:
        return (), ()
    spends = tuple(
        Spend(str(key), float(at), cost, tokens, turn)
        for key, at, cost, tokens, turn in db.execute(
            "SELECT key, at, cost, tokens, turn_id FROM budget_spend"
        )
    )
    notes = tuple(
        (str(name), str(value))
        for name, value in db.execute("SELECT name, value FROM budget_notes")
    )
    return spends, notes


def _check_schema(db: sqlite3.Connection, database: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables >= _TABLES:
        raise StateDirError("not_a_bot", f"{database} is not a bot's database (no bot tables)")
    if version not in _SCHEMA_VERSIONS:
        raise StateDirError(
            "not_a_bot",
            f"{database} has schema version {version}; this buzz watch reads "
            f"{_SCHEMA_VERSIONS[0]} to {_SCHEMA_VERSIONS[-1]} "
            "(use the nostr-buzz that runs the bot)",
        )


def _seconds(timestamp: str) -> float | None:
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_RECORD: Final = msgspec.json.Decoder(FeedRecord)


class FeedTail:
    """The records of a diagnostics feed, read as it grows: each :meth:`read` returns the
    complete records written since the last (a torn last line waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._partial = b""
        self._began = False

    def read(self) -> list[tuple[FeedRecord, float]]:
        out: list[tuple[FeedRecord, float]] = []
        if not self._began:
            self._began = True
            out += self._whole(self.path.with_name(self.path.name + ".1"))
        if self._file is None:
            self._file = self._open()
            self._partial = b""
            if self._file is None:
                return out
        out += self._lines(self._file.read())
        if self._rotated():
            # The file we follow is NAME.1 now: what was added to it, then the new file.
            out += self._lines(self._file.read())
            self._file.close()
            self._file = None
            out += self.read()
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> IO[bytes] | None:
        try:
            return read_private(self.path)
        except FileNotFoundError:
            return None
        except ConfigError as exc:
            raise StateDirError("unsafe", str(exc)) from None

    def _rotated(self) -> bool:
        assert self._file is not None
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            return False  # between the rename and the new file: the next read sees it
        return current != os.fstat(self._file.fileno()).st_ino

    def _whole(self, path: Path) -> list[tuple[FeedRecord, float]]:
        try:
            with read_private(path) as fh:
                data = fh.read()
        except FileNotFoundError:
            return []
        except ConfigError as exc:
            raise StateDirError("unsafe", str(exc)) from None
        return self._lines(data, whole=True)

    def _lines(self, data: bytes, *, whole: bool = False) -> list[tuple[FeedRecord, float]]:
        lines = data.split(b"\n") if whole else (self._partial + data).split(b"\n")
        rest = lines.pop()
        if not whole:
            self._partial = rest
        out = []
        for line in lines:
            try:
                record = _RECORD.decode(line)
            except msgspec.DecodeError:
                continue  # a line torn by a crash
            at = _seconds(record.timestamp)
            if at is not None:
                out.append((record, at))
        return out


def moment(now: float) -> Moment:
    """``now`` (Unix seconds) as the view's moment: its timestamp and UTC day."""
    when = datetime.fromtimestamp(now, UTC)
    return Moment(now, rfc3339_ms(when), when.strftime("%Y-%m-%d"))


class Watcher:
    """One state directory, watched: :meth:`view` reads the database, then what the feed
    added since the last call (a turn that started in between is in both)."""

    def __init__(
        self, state_dir: Path, *, clock: Callable[[], float], caps: Caps | None = None
    ) -> None:
        self.state_dir = check_state_dir(state_dir)
        self._clock = clock
        self._caps = caps  # the configuration's [budget]
        self._tail = FeedTail(self.state_dir / FEED_FILE)
        self._summary = FeedSummary()

    def view(self) -> WatchView:
        snapshot = read_snapshot(self.state_dir)
        self._summary.add_all(self._tail.read())
        return watch_view(
            snapshot,
            self._summary,
            moment=moment(self._clock()),
            state_dir=str(self.state_dir),
            caps=self._caps,
        )

    def close(self) -> None:
        self._tail.close()
