"""Intake: what becomes of an incoming verified event in ``buzz run``, as pure decisions.

The gate itself — owner command, refusal with its reason, another shard's, admission — is the
public :mod:`nostr_buzz.core.gate` (:func:`decide`), which a bot of its own uses too; here is
what only this bot adds: its gate from its configuration (:func:`gate_of`), the position a
handled event moves the bot to (never later than the clock), the scope a remembered refusal
holds in (:func:`refusal_scope`), the date before which a private message is never
answered (:func:`private_before`), and when an owner command is obeyed
(:func:`command_kind`, :func:`stale_command`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Final

from nostr_buzz.core.gate import (
    APPROVALS,
    Admit,
    Command,
    CommandName,
    Decision,
    Gate,
    Refuse,
    authority_key,
    command_of,
    decide,
    in_flight_action,
    owner_command,
    refusal,
)
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip59 import PrivateEvent

from .config import PluginConfig

__all__ = [
    "APPROVALS",
    "Admit",
    "Command",
    "CommandName",
    "Decision",
    "Gate",
    "Refuse",
    "advance",
    "authority_key",
    "command_kind",
    "command_of",
    "decide",
    "gate_of",
    "in_flight_action",
    "owner_command",
    "private_before",
    "refusal",
    "refusal_scope",
    "stale_command",
]

#: Characters of a ``!budget`` cap's name kept in its command's kind.
_KIND_ARGUMENT: Final = 64


def gate_of(config: PluginConfig) -> Gate:
    """The gate of a plugin's configuration."""
    return Gate(
        agent=config.signer.public_key.hex,
        owner=config.owner.hex,
        kinds=frozenset(config.kinds),
        channels=frozenset(config.channels),
        mentions_required=config.mentions_required,
        mode=config.gate,
        allowlist=config.allowlist,
        shard=config.shard,
        plaintext_dm=config.plaintext_dm,
    )


def command_kind(command: Command, event: Event) -> str | None:
    """What an owner command is ordered against (docs/bot.md, "Owner commands"): ``!budget``
    per cap, ``!cancel`` and ``!new`` per queue channel, ``!shutdown`` alone; an older command
    of a kind never follows a newer one.  None for ``!allow``/``!deny``: each code answers its
    one question once, which the approvals see to (``bot/approvals.py``)."""
    name = command.name
    if name in APPROVALS:
        return None
    if name == "budget":
        words = event.content.split()
        at = next((i for i, w in enumerate(words) if w == "!budget"), len(words))
        cap = words[at + 1] if at + 1 < len(words) else ""
        return f"budget:{cap[:_KIND_ARGUMENT]}"
    if name in ("cancel", "new"):
        return f"{name}:{nip10.queue_channel(event)}"
    return name


def stale_command(event: Event, last: tuple[int, str] | None, floor: int) -> str | None:
    """Why the owner's command ``event`` is not obeyed, else None: dated before ``floor``
    (the run's start minus the clock skew: ``command_before_start``), or not newer — by
    ``created_at``, then id — than ``last``, the last obeyed command of its kind
    (``command_not_newer``: a replay, or an older command a relay held back)."""
    if event.created_at < floor:
        return "command_before_start"
    if last is not None and (event.created_at, event.id) <= last:
        return "command_not_newer"
    return None


def advance(position: int | None, created_at: int, now: float) -> int:
    """The position after handling an event dated ``created_at``: the newest date handled,
    capped at the clock, so that an event dated in the future never makes a restart or a
    reconnect skip everything sent before that date."""
    seen = min(created_at, int(now))
    return seen if position is None or seen > position else position


def private_before(event: Event, floor: int) -> bool:
    """A private message dated before ``floor`` (the position saved when the bot started, or
    on a first start the start itself, minus the clock skew): never answered.  Its date is the
    rumor's ``created_at``, read once the wrap is open: a gift wrap's own date is backdated up
    to two days at random, which is why the wrap filter looks that far back."""
    return isinstance(event, PrivateEvent) and event.created_at < floor


def refusal_scope(gate: Gate) -> str:
    """The gate's configuration as 16 hex digits: a gift wrap the gate refused is remembered
    (and not opened again on replay) only while this stays the same."""

    def plain(value: object) -> object:
        if isinstance(value, frozenset):
            return sorted(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return repr(value)

    fields = [[f.name, getattr(gate, f.name)] for f in dataclasses.fields(gate)]
    text = json.dumps(fields, default=plain, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
