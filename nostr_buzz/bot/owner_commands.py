"""The ``owner_commands`` table of the bot's state database: per kind of owner command
(:func:`~nostr_buzz.bot.intake.command_kind`: ``!budget`` per cap, ``!cancel``/``!new`` per
channel, ``!shutdown``), the last one obeyed, so that an older command of its kind is never
obeyed again (docs/bot.md, "Owner commands").  Only the owner's commands are written: nobody
else can push them out."""

from __future__ import annotations

from typing import Final

from nostr_buzz.event import Event

from .state_table import StateTable

__all__ = ["OWNER_COMMANDS_SCHEMA", "REMEMBERED_COMMAND_KINDS", "OwnerCommands"]

#: Kinds of owner command whose last obeyed one is kept, the newest.
REMEMBERED_COMMAND_KINDS: Final = 1_000

OWNER_COMMANDS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS owner_commands (
    kind       TEXT PRIMARY KEY,       -- what the command is ordered against (command_kind)
    created_at INTEGER NOT NULL,       -- the last obeyed command of that kind
    id         TEXT NOT NULL
) WITHOUT ROWID;
"""


class OwnerCommands(StateTable):
    """The ``owner_commands`` table (joins the database's transactions)."""

    def last(self, kind: str) -> tuple[int, str] | None:
        """``(created_at, id)`` of the owner's last obeyed command of ``kind``, if kept."""
        row = self._exec(
            "SELECT created_at, id FROM owner_commands WHERE kind = ?", (kind,)
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def record(self, event: Event, kind: str) -> None:
        """``event`` is now the last obeyed command of ``kind`` (inside the caller's
        transaction); only the newest :data:`REMEMBERED_COMMAND_KINDS` kinds are kept."""
        self._exec(
            "INSERT OR REPLACE INTO owner_commands (kind, created_at, id) VALUES (?, ?, ?)",
            (kind, event.created_at, event.id),
        )
        self._exec(
            "DELETE FROM owner_commands WHERE kind NOT IN (SELECT kind FROM owner_commands "
            "ORDER BY created_at DESC, id DESC LIMIT ?)",
            (REMEMBERED_COMMAND_KINDS,),
        )
