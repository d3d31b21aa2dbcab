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

Who keeps what: :mod:`.state_db` the connection (WAL, the schema and its versions, the
transactions, the intake transaction a burst of admitted events commits in, ``meta`` and
``remembered``; also how durable a commit is); :mod:`.queue_journal` the ``queued`` and
``channels`` rows (how the pure queue maps onto them, and the queue rebuilt from them at start);
:mod:`.legacy_state` the import of an earlier version's files; a module per other table
(:mod:`.receipts`, :mod:`.budget_table`, :mod:`.owner_commands`, :mod:`.own_lists`,
:mod:`.refused_wraps`), the queue's journal among them (``store.journal``).  :class:`BotStore`
is the database with all of them.

A state directory written by an earlier nostr-buzz (``queue.json``, ``bot-state.json`` and
``outbox.sqlite3``) is imported once, when the database is created, and the old files are
renamed with an ``.imported`` suffix; a file that cannot be read is kept aside (``.corrupt``)
and reported, never silently dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.queue import REMEMBERED_IDS
from nostr_buzz.event import Event
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.keys import SecretKey

from .budget_table import BUDGET_SCHEMA, BudgetTable
from .legacy_state import LEGACY_FILES, import_legacy
from .own_lists import OWN_LISTS_SCHEMA, OwnLists
from .owner_commands import (
    OWNER_COMMANDS_SCHEMA,
    REMEMBERED_COMMAND_KINDS,
    OwnerCommands,
)
from .queue_journal import QueueJournal
from .receipts import RECEIPTS_SCHEMA, SessionReceipts
from .refused_wraps import REMEMBERED_REFUSALS, RefusedWraps
from .state_db import StateDatabase
from .state_table import REMEMBERED_COMMANDS

__all__ = [
    "LEGACY_FILES",
    "REMEMBERED_COMMANDS",
    "REMEMBERED_COMMAND_KINDS",
    "REMEMBERED_REFUSALS",
    "STATE_DB",
    "BotStore",
]

STATE_DB: Final = "bot.sqlite3"
#: The tables kept by modules of their own, created with the database's core tables.
_TABLES: Final = RECEIPTS_SCHEMA + BUDGET_SCHEMA + OWNER_COMMANDS_SCHEMA + OWN_LISTS_SCHEMA


class BotStore(StateDatabase):
    """The database at ``state_dir / STATE_DB`` (created with its folder, private to the
    user) with every table of the bot's state: the connection and its transactions as
    :mod:`.state_db` has them, the owner's obeyed commands here, and an object for each other
    table, the queue's journal (:mod:`.queue_journal`) among them.  One event loop uses it
    at a time; every failure is a :class:`StateError`."""

    def __init__(
        self,
        state_dir: Path,
        *,
        outbox_rng: Rng | None = None,  # the outbox's retry jitter (a test pins it)
        agent_secret: SecretKey | None = None,  # opens a queued private message at load
    ) -> None:
        path = state_dir / STATE_DB
        fresh = not path.exists()
        super().__init__(path, _TABLES)
        with self.closed_on_failure():
            #: The queue's rows: what intake appends, a settled turn synchronises, a start loads.
            self.journal = QueueJournal(self, agent_secret=agent_secret)
            self.outbox = Outbox(path, rng=outbox_rng, connection=self._db)
            self.receipts = SessionReceipts(self.execute, self.transaction)
            self.budget = BudgetTable(self.execute, self.transaction)
            self.owner_commands = OwnerCommands(self.execute, self.transaction)
            self.own_lists = OwnLists(self.execute, self.transaction)
        self.refusals = RefusedWraps(self.execute, self.transaction, self.intake)
        #: Problems met while importing files of an earlier version (for a diagnostic).
        self.import_problems = (
            import_legacy(self, self.journal, self.outbox, state_dir) if fresh else []
        )

    def commands(self) -> list[str]:
        """Obeyed owner commands, oldest first."""
        rows = self.execute(
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
            self.remember([event.id], "command", REMEMBERED_COMMANDS)
            self.save_position(position)
            if kind is not None:
                self.owner_commands.record(event, kind)

    def remember_handled(self, event_id: str, position: int) -> None:
        """An event handled without a turn (an earlier run answered it, ``bot/recall.py``):
        remembered with the delivered ones, committed with the intake and the position."""
        with self.intake():
            self.remember([event_id], "event", REMEMBERED_IDS)
            self.set_meta_with_intake("position", position)
