"""Refused gift wraps, by wrap id: the newest :data:`REMEMBERED_REFUSALS` that could not be
opened, and the newest :data:`REMEMBERED_REFUSALS` the gate refused, kept per gate (a changed
gate may admit what the old one refused).  A wrap refused before is not opened again, so a
relay that replays a flood of them costs a lookup each (docs/bot.md, "Private messages").

Rows of the state database's ``remembered`` table (no schema of their own: an older
nostr-buzz reads only its own kinds), written with the intake of the same event-loop step."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Final

from .state_table import StateTable, remember_ids

__all__ = ["REMEMBERED_REFUSALS", "RefusedWraps"]

#: Refused gift wraps remembered (each kind of refusal: unopenable, refused by the gate).
REMEMBERED_REFUSALS: Final = 10_000

_UNOPENABLE: Final = "refusal"


class RefusedWraps(StateTable):
    """What the bot refused, in memory and in the database (joins its transactions)."""

    def __init__(
        self,
        execute: Callable[[str, Iterable[object]], sqlite3.Cursor],
        transaction: Callable[..., AbstractContextManager[None]],
        intake: Callable[[], AbstractContextManager[None]],
    ) -> None:
        super().__init__(execute, transaction)
        self._intake = intake
        # Refused wrap ids, oldest first: unopenable ones (False), the gate's (True).
        self._ids: dict[bool, dict[str, None]] = {False: {}, True: {}}
        self._gate_kind = "refusal:"  # set by load

    def load(self, scope: str) -> None:
        """Remember the refused wraps again: those that could not be opened, and those the gate
        of ``scope`` (:func:`~nostr_buzz.bot.intake.refusal_scope`) refused; refusals of any
        other gate are forgotten (a changed gate may admit them now)."""
        self._gate_kind = f"refusal:{scope}"
        with self._transaction():
            self._exec(
                "DELETE FROM remembered WHERE kind GLOB 'refusal:*' AND kind != ?",
                (self._gate_kind,),
            )
        for by_gate, kind in ((False, _UNOPENABLE), (True, self._gate_kind)):
            rows = self._exec(
                "SELECT id FROM (SELECT id, n FROM remembered WHERE kind = ? "
                "ORDER BY n DESC LIMIT ?) ORDER BY n",
                (kind, REMEMBERED_REFUSALS),
            )
            self._ids[by_gate] = dict.fromkeys(str(r[0]) for r in rows)

    def __contains__(self, wrap_id: object) -> bool:
        """Whether the gift wrap ``wrap_id`` was refused before (it need not be opened)."""
        return wrap_id in self._ids[False] or wrap_id in self._ids[True]

    def remember(self, wrap_id: str, *, by_gate: bool) -> None:
        """Gift wrap ``wrap_id`` was refused: it could not be opened (``by_gate`` False) or the
        gate refused what it holds.  Committed with the intake of the same event-loop step."""
        if wrap_id in self:
            return
        memory = self._ids[by_gate]
        memory[wrap_id] = None
        if len(memory) > REMEMBERED_REFUSALS:
            del memory[next(iter(memory))]
        with self._intake():
            kind = self._gate_kind if by_gate else _UNOPENABLE
            remember_ids(self._exec, [wrap_id], kind, REMEMBERED_REFUSALS)
