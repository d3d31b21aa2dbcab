"""Session receipts: what a restarted bot needs to continue each queue key's agent session
(docs/bot.md, "Sessions that survive a restart"; a key is a channel, or a thread of one under
``[sessions] scope = "thread"``), and what continues a session closed to keep ``max_live``.

A receipt is written, durably, before each prompt goes to the agent: the agent's session id,
which agent (name and version) holds it, how its standing context travelled and the standing
context itself (the manifest of a continued session keeps the layers of its start), when it
started, every actor whose words entered it (the permission rule follows them across the
restart) and the events it has already been given.  It is marked *in a turn* until the turn's
success commits with its replies and metric; a receipt still marked after a crash is
indeterminate — the agent may hold a half-finished exchange that the queue will run again — so
it is never continued: the channel opens a new session, and a diagnostic says why
(:func:`resume_refusal`).  A failed or cancelled turn leaves the mark too: its session is
retired or forgotten, never continued.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from nostr_buzz.acp.types import ReopenMethod, StandingStrategy
from nostr_buzz.core.session_key import THREAD_SEPARATOR
from nostr_buzz.core.turn_input import Standing

from .state_table import StateTable

__all__ = [
    "RECEIPTS_SCHEMA",
    "REMEMBERED_DELIVERED",
    "ResumeRefusal",
    "SessionReceipt",
    "SessionReceipts",
    "resume_refusal",
]

#: The events a receipt remembers as given to its session (the newest; an older one is at
#: worst given again as context).
REMEMBERED_DELIVERED: Final = 2_000

RECEIPTS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    channel TEXT PRIMARY KEY,   -- the queue channel
    receipt TEXT NOT NULL,      -- SessionReceipt, JSON
    in_turn INTEGER NOT NULL    -- 1 from before a prompt until its success commits
) WITHOUT ROWID;
"""

#: Why a receipt is not continued: it was left in a turn, another agent (or version) runs now,
#: the agent continues no session, or it refused this one.
ResumeRefusal = Literal["indeterminate", "agent_changed", "not_supported", "refused"]


class SessionReceipt(msgspec.Struct, frozen=True, rename="camel"):
    """One queue channel's agent session, as the state database keeps it."""

    session_id: str
    agent: str | None
    agent_version: str | None
    strategy: StandingStrategy
    standing: Standing
    started_at: float
    actors: tuple[str, ...] = ()
    delivered: tuple[str, ...] = ()


def resume_refusal(
    receipt: SessionReceipt,
    in_turn: bool,
    agent: str | None,
    agent_version: str | None,
    method: ReopenMethod | None,
) -> ResumeRefusal | None:
    """Why the running agent (``agent``, ``agent_version``, continuing by ``method``) may not
    continue ``receipt``'s session; None when it may."""
    if in_turn:
        return "indeterminate"
    if (receipt.agent, receipt.agent_version) != (agent, agent_version):
        return "agent_changed"
    if method is None:
        return "not_supported"
    return None


_DECODER: Final = msgspec.json.Decoder(SessionReceipt)


class SessionReceipts(StateTable):
    """The ``sessions`` table of the bot's state database (joins its transactions)."""

    def get(self, channel: str) -> tuple[SessionReceipt, bool] | None:
        """The channel's receipt and whether it was left in a turn; None when there is none
        (or it cannot be read: a new session is always safe)."""
        row = self._exec("SELECT receipt, in_turn FROM sessions WHERE channel = ?", (channel,))
        found = row.fetchone()
        if found is None:
            return None
        try:
            return _DECODER.decode(found[0]), bool(found[1])
        except msgspec.DecodeError:
            return None

    def begin_turn(self, channel: str, receipt: SessionReceipt) -> None:
        """Before a prompt: the session as it will be once the agent has it, marked in a
        turn; synced to disk before this returns."""
        encoded = msgspec.json.encode(_bounded(receipt)).decode()
        with self._transaction(durable=True):
            self._exec(
                "INSERT INTO sessions (channel, receipt, in_turn) VALUES (?, ?, 1) "
                "ON CONFLICT (channel) DO UPDATE SET receipt = excluded.receipt, in_turn = 1",
                (channel, encoded),
            )

    def complete_turn(self, channel: str, receipt: SessionReceipt) -> None:
        """The turn succeeded (call inside the transaction that commits its outcome)."""
        encoded = msgspec.json.encode(_bounded(receipt)).decode()
        self._exec(
            "UPDATE sessions SET receipt = ?, in_turn = 0 WHERE channel = ?", (encoded, channel)
        )

    def drop(self, channel: str) -> None:
        self._exec("DELETE FROM sessions WHERE channel = ?", (channel,))

    def drop_channel(self, channel: str) -> None:
        """Every receipt of ``channel``: its own and its threads' (``{channel}/{root}``)."""
        prefix = channel + THREAD_SEPARATOR
        self._exec(
            "DELETE FROM sessions WHERE channel = ? OR substr(channel, 1, ?) = ?",
            (channel, len(prefix), prefix),
        )


def _bounded(receipt: SessionReceipt) -> SessionReceipt:
    if len(receipt.delivered) <= REMEMBERED_DELIVERED:
        return receipt
    return msgspec.structs.replace(receipt, delivered=receipt.delivered[-REMEMBERED_DELIVERED:])
