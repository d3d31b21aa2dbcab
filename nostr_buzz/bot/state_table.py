"""A table of the bot's state database, kept by a module of its own (:mod:`.receipts`,
:mod:`.budget_table`): it runs SQL through the database's connection and joins its
transactions (:class:`~.state.BotStore` makes each one)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Final

__all__ = ["REMEMBERED_COMMANDS", "StateTable", "remember_ids"]

#: The owner's obeyed command ids remembered (a replay after a restart is not obeyed again).
REMEMBERED_COMMANDS: Final = 100


class StateTable:
    """Statements through ``execute``; writes that go together inside ``transaction()``."""

    def __init__(
        self,
        execute: Callable[[str, Iterable[object]], sqlite3.Cursor],
        transaction: Callable[..., AbstractContextManager[None]],
    ) -> None:
        self._exec = execute
        self._transaction = transaction


def remember_ids(
    execute: Callable[[str, Iterable[object]], sqlite3.Cursor],
    ids: Iterable[str],
    kind: str,
    keep: int,
) -> None:
    """Rows of the ``remembered`` table: ``ids`` added under ``kind``, of which only the newest
    ``keep`` stay."""
    added = False
    for event_id in ids:
        execute("INSERT OR IGNORE INTO remembered (id, kind) VALUES (?, ?)", (event_id, kind))
        added = True
    if added:
        execute(
            "DELETE FROM remembered WHERE kind = ? AND n <= "
            "(SELECT n FROM remembered WHERE kind = ? ORDER BY n DESC LIMIT 1 OFFSET ?)",
            (kind, kind, keep),
        )
