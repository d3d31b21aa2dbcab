"""A table of the bot's state database, kept by a module of its own (:mod:`.receipts`,
:mod:`.budget_table`): it runs SQL through the database's connection and joins its
transactions (:class:`~.state.BotStore` makes each one)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

__all__ = ["StateTable"]


class StateTable:
    """Statements through ``execute``; writes that go together inside ``transaction()``."""

    def __init__(
        self,
        execute: Callable[[str, Iterable[object]], sqlite3.Cursor],
        transaction: Callable[..., AbstractContextManager[None]],
    ) -> None:
        self._exec = execute
        self._transaction = transaction
