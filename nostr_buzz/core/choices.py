"""The enumerated settings and their choices: one table for every path a value takes.

``buzz.toml``, its flags and ``BUZZ_*`` variables (``nostr_buzz.config``), a
:class:`~nostr_buzz.bot.config.PluginConfig` and a :class:`~nostr_buzz.core.gate.Gate` built in
Python all check a value against :data:`CHOICES` with :func:`check_choice`, so a misspelt mode
is refused the same way wherever it is given (docs/bot.md, "Values are checked where they are
given").  Code compares these values with ``==`` (``mode == "owner-only"``): an unknown value
would match no branch and fall through to the most permissive one, so none may get that far.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal, NoReturn, get_args

from nostr_buzz.errors import ConfigError, describe_input

__all__ = [
    "CHOICES",
    "AuthorGate",
    "BudgetAction",
    "InFlightPolicy",
    "Permissions",
    "RelayListsMode",
    "ReplyMode",
    "SessionScope",
    "check_choice",
    "refuse_choice",
]

#: Whose events start a turn: the owner's only, the owner's and an allowlist's, anyone's.
AuthorGate = Literal["owner-only", "allowlist", "anyone"]
#: What an event arriving during its channel's running turn may do (``in_flight``).
InFlightPolicy = Literal["queue", "steer", "interrupt"]
#: How the agent's permission requests (run a command, edit a file) are answered: ``owner``
#: approves only while a turn runs whose triggering events are all the owner's; ``allow``
#: approves during any turn; ``reject`` never approves; ``ask`` asks the owner by NIP-17 DM for
#: each request (so does ``owner`` when someone else's words reached the session), and only the
#: owner's ``!allow CODE`` approves.  Outside a turn: always rejected.
Permissions = Literal["owner", "allow", "reject", "ask"]
#: Who posts the reply: the bot, from the agent's answer, or the agent itself (its own tool).
ReplyMode = Literal["auto", "agent"]
#: Over a budget cap: tell the owner once per period, or run no turn until it ends.
BudgetAction = Literal["warn", "stop"]

#: What keys an agent session (and the queue): one per channel, or one per thread of a
#: channel (its root with its channel; a private conversation stays one session).
SessionScope = Literal["channel", "thread"]
#: Thread checkpoints (nips/NIP-TC.md): none; the agent's own compaction summaries; or those
#: and a summary asked for before the bot closes a session the agent cannot continue.
CheckpointMode = Literal["off", "compaction", "summary_on_close"]

#: What the bot does with its own relay lists (kind 10002, and 10050 when it reads private
#: messages) when it starts listening: ``merge`` keeps the relays of the list it finds and adds
#: its own, ``publish`` replaces a list it made itself (or none), never one it did not make;
#: ``leave`` publishes none (docs/bot.md, "Its own relay lists").
RelayListsMode = Literal["merge", "publish", "leave"]

#: Every enumerated setting, by its dotted ``buzz.toml`` name, and its choices.
CHOICES: Final[Mapping[str, tuple[str, ...]]] = {
    "gate.mode": get_args(AuthorGate),
    "in_flight": get_args(InFlightPolicy),
    "agent.permissions": get_args(Permissions),
    "reply_mode": get_args(ReplyMode),
    "budget.action": get_args(BudgetAction),
    "sessions.scope": get_args(SessionScope),
    "relay_lists": get_args(RelayListsMode),
    "sessions.checkpoint": get_args(CheckpointMode),
}


def check_choice(value: object, choices: Sequence[str], where: str) -> str:
    """``value`` when it is one of ``choices`` (exactly: case and spelling); else a
    :class:`ConfigError` that says ``where``, the choices and the value given."""
    if isinstance(value, str) and value in choices:
        return value
    refuse_choice(value, choices, where)


def refuse_choice(value: object, choices: Sequence[str], where: str) -> NoReturn:
    """The :class:`ConfigError` for a value that is none of ``choices``; the value is shown
    cut short, and never when it looks like a secret key."""
    if isinstance(value, str):
        shown = describe_input(value, limit=40, hex_may_be_secret=True)
    else:
        shown = "None" if value is None else f"a {type(value).__name__}"
    raise ConfigError(f"{where}: expected one of {', '.join(choices)}, got {shown}")
