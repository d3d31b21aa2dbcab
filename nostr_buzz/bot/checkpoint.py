"""Checkpoints of the state database's write-ahead log, off the event loop.

A checkpoint copies the pages the log holds into the database file and syncs that file: with
every admitted event its own commit (:mod:`.state`, intake), run by SQLite on the committing
connection it stalled intake for milliseconds every few thousand events and was the largest
part of an admitted event's wall time.  Here a thread of its own, with a connection of its own,
runs a ``PASSIVE`` checkpoint every ``COMMITS`` commits (one at a time): it takes no lock a
writer waits for, and SQLite's sqlite3 module releases the GIL while it runs.  What it leaves
(frames committed meanwhile) the committing connection's own automatic checkpoint finishes,
which is then short, and only that one lets the log start over.  A failed checkpoint is
harmless (the log just grows until the next one), so its errors are not reported.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Final

__all__ = ["COMMITS", "Checkpointer"]

#: Commits between two checkpoints started off the event loop (each writes 3 to 5 log pages).
COMMITS: Final = 500


class Checkpointer:
    """Counts commits and checkpoints ``path`` from a thread every :data:`COMMITS` of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs = 0  # checkpoints finished (for tests)
        self._commits = 0
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """One more commit; a checkpoint starts when enough have gone by and none is running."""
        self._commits += 1
        if self._commits < COMMITS or (self._thread is not None and self._thread.is_alive()):
            return
        self._commits = 0
        self._thread = threading.Thread(target=self._run, name="buzz-checkpoint", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for a running checkpoint (before the database is closed)."""
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            # mode=rw: a database removed meanwhile is not created again, empty.
            uri = f"{self.path.absolute().as_uri()}?mode=rw"
            db = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.runs += 1
            finally:
                db.close()
