"""The ``budget_*`` tables of the bot's state database: the spend of the agent's settled turns,
the budget notices given, the owner's caps and the channels held (:mod:`.budget`)."""

from __future__ import annotations

from typing import Final

from nostr_buzz.core.budget import Spend

from .state_table import StateTable

__all__ = ["BUDGET_SCHEMA", "BudgetTable"]

BUDGET_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS budget_spend (
    key     TEXT PRIMARY KEY,   -- the metric's event id
    turn_id TEXT,
    at      REAL NOT NULL,      -- the metric's timestamp, Unix seconds
    cost    REAL,               -- USD, null when unknown
    tokens  INTEGER             -- null when unknown
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS budget_notes (
    name  TEXT PRIMARY KEY,     -- notice:<name>, cap:<cap>, held:<queue channel>
    value TEXT NOT NULL
) WITHOUT ROWID;
"""


class BudgetTable(StateTable):
    """The ``budget_*`` tables of the bot's state database (joins its transactions)."""

    def spends(self) -> list[Spend]:
        rows = self._exec("SELECT key, at, cost, tokens, turn_id FROM budget_spend", ())
        return [Spend(k, float(at), cost, tokens, turn) for k, at, cost, tokens, turn in rows]

    def add_spend(self, spend: Spend) -> None:
        self._exec(
            "INSERT OR IGNORE INTO budget_spend (key, turn_id, at, cost, tokens) "
            "VALUES (?, ?, ?, ?, ?)",
            (spend.key, spend.turn_id, spend.at, spend.cost_usd, spend.tokens),
        )

    def forget_before(self, start: float, now: float) -> None:
        """Drop spend from before ``start`` and the notices whose period ended by ``now``."""
        self._exec("DELETE FROM budget_spend WHERE at < ?", (start,))
        for name, until in self.notices().items():
            if until <= now:
                self._exec("DELETE FROM budget_notes WHERE name = ?", ("notice:" + name,))

    def notices(self) -> dict[str, float]:
        """The notices given and when each one's period ends."""
        found: dict[str, float] = {}
        for name, value in self.notes("notice:").items():
            try:
                found[name] = float(value)
            except ValueError:
                found[name] = 0.0  # unreadable: forgotten at the next decision
        return found

    def notes(self, prefix: str) -> dict[str, str]:
        rows = self._exec(
            "SELECT name, value FROM budget_notes WHERE substr(name, 1, ?) = ?",
            (len(prefix), prefix),
        )
        return {name[len(prefix) :]: value for name, value in rows}

    def note(self, name: str, value: str | None) -> None:
        """Set (``value``) or remove (None) a note."""
        with self._transaction():
            if value is None:
                self._exec("DELETE FROM budget_notes WHERE name = ?", (name,))
            else:
                self._exec(
                    "INSERT OR REPLACE INTO budget_notes (name, value) VALUES (?, ?)",
                    (name, value),
                )
