"""The gate: what becomes of an incoming verified event, as a pure decision.

:func:`decide` says, for one event, whether it is an owner command, refused (with the reason a
bot reports), served by another shard (silently), or admitted to the queue, in which channel.
The rules:

* **Owner commands.** A kind 9 from the owner that mentions the agent, or the owner's private
  message, whose content, after leading ``nostr:npub…``/``@name`` tokens, starts with
  ``!cancel``, ``!new`` (the channel's next turn opens a new agent session), ``!shutdown``,
  ``!budget CAP VALUE`` (raises or lowers a budget cap, docs/bot.md "Budgets"), or
  ``!allow CODE`` / ``!deny CODE`` (the answer to a permission question; anyone's is passed on
  and refused unless it is the owner's).  Commands are never queued and bypass the shard
  filter.
* **Gate.** The agent's own events never start a turn (no loops).  Other agents (``known_agents``:
  configured, or seen with a NIP-24 ``bot`` profile) start one only when they mention this
  agent, even with ``mentions_required = False``.  ``owner-only`` admits the owner,
  ``allowlist`` the owner and the listed keys, ``anyone`` every key.
* **Subscriptions.** ``kinds`` names what the bot listens to: 9 chat, 14 NIP-17 private
  messages (gift wraps addressed to the agent, opened and checked before they get here), 1
  notes, 1111 comments.  ``channels`` restricts channel events; events without a channel are
  accepted when they mention the agent, except a plaintext kind 9 (anyone on the relay can
  read and write into it), refused unless ``plaintext_dm`` opts in.  A kind 14 is served only
  as a :class:`~nostr_buzz.nips.nip59.PrivateEvent`: a signed kind 14 sent in plaintext is no
  private message.
* **Shard** ``i/n``: a destination belongs to shard ``int(sha256(destination)) mod n``.
* **A running turn** is steered (or interrupted) only by its own authority: an event whose
  signing actor and destination equal the running batch's (:func:`in_flight_action`).
  Anything else waits in the queue.

``buzz run`` decides with these same functions (``nostr_buzz.bot.intake``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.core.choices import CHOICES, AuthorGate, InFlightPolicy, check_choice
from nostr_buzz.core.given import (
    given_bool,
    given_ints,
    given_key,
    given_key_set,
    given_strings,
    shown,
)
from nostr_buzz.errors import ConfigError
from nostr_buzz.event import Event, require_event
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.nip59 import PrivateEvent

__all__ = [
    "APPROVALS",
    "Admit",
    "AuthorGate",
    "Command",
    "CommandName",
    "Decision",
    "Gate",
    "InFlightAction",
    "InFlightPolicy",
    "Refuse",
    "Shard",
    "author_refusal",
    "authority_key",
    "command_of",
    "decide",
    "in_flight_action",
    "owner_command",
    "refusal",
    "shard_of",
]

_LEADING_MENTION: Final = re.compile(r"\s*(?:nostr:(?:npub|nprofile)1[0-9a-z]+|@\S+)")

CommandName = Literal["cancel", "new", "shutdown", "allow", "deny", "budget"]
_COMMANDS: Final[dict[str, CommandName]] = {
    "!cancel": "cancel",
    "!new": "new",
    "!shutdown": "shutdown",
    "!allow": "allow",
    "!deny": "deny",
    "!budget": "budget",  # !budget CAP VALUE (docs/bot.md, "Budgets")
}
#: The commands that answer a permission question: they take a code.
APPROVALS: Final = frozenset({"allow", "deny"})


@dataclass(frozen=True)
class Shard:
    """This process's part of the destinations when several share one agent key: ``index``
    of ``count`` (see :func:`shard_of`)."""

    index: int
    count: int


def shard_of(destination: str, count: int) -> int:
    """The stable shard of a destination: sha256 of its UTF-8 bytes, as an integer, mod n."""
    return int.from_bytes(hashlib.sha256(destination.encode("utf-8")).digest(), "big") % count


@dataclass(frozen=True)
class Gate:
    """What the gate decides with: the agent's and the owner's keys (hex), the subscribed
    ``kinds`` and ``channels`` (empty: every channel), whether a mention is required, whose
    events count (``mode``, ``allowlist``), this process's ``shard`` and whether a plaintext
    kind 9 outside any channel is served as a direct message (``plaintext_dm``).  A ``mode``
    other than :data:`~nostr_buzz.core.choices.AuthorGate`'s is a ``ConfigError`` here."""

    agent: str  # public keys: hex, npub1… or a PublicKey, kept as hex
    owner: str
    kinds: frozenset[int]
    channels: frozenset[str]
    mentions_required: bool
    mode: AuthorGate
    allowlist: frozenset[str]
    shard: Shard | None = None
    plaintext_dm: bool = False

    def __post_init__(self) -> None:
        # An unknown mode would match neither refusal below and admit everyone.
        check_choice(self.mode, CHOICES["gate.mode"], "Gate mode")
        # Keys in any form, compared as hex: an npub would never equal an event's pubkey.
        put = functools.partial(object.__setattr__, self)
        put("agent", given_key(self.agent, "Gate agent").hex)
        put("owner", given_key(self.owner, "Gate owner").hex)
        put("allowlist", given_key_set(self.allowlist, "Gate allowlist"))
        put("kinds", frozenset(given_ints(self.kinds, "Gate kinds")))
        put("channels", frozenset(given_strings(self.channels, "Gate channels")))
        given_bool(self.mentions_required, "Gate mentions_required")
        given_bool(self.plaintext_dm, "Gate plaintext_dm")
        if self.shard is not None and not isinstance(self.shard, Shard):
            raise ConfigError(f"Gate shard: expected a Shard or None, got {shown(self.shard)}")


@dataclass(frozen=True)
class Admit:
    """Queue it, in ``channel``."""

    channel: str


@dataclass(frozen=True)
class Refuse:
    """Do not queue it; ``reason`` is reported (None: another shard serves it, say nothing)."""

    reason: str | None


@dataclass(frozen=True)
class Command:
    """An owner command: obey it once, never queue it (``argument``: an approval's code)."""

    name: CommandName
    argument: str = ""


Decision = Admit | Refuse | Command


def owner_command(content: str) -> CommandName | None:
    """The command the content is (after leading mentions), else None; ``allow`` and
    ``deny`` only with their code (:func:`command_of`)."""
    command = command_of(content)
    return command.name if command is not None else None


def command_of(content: str) -> Command | None:
    """The command the content is, with its argument (an approval's code, required)."""
    rest = content
    while (match := _LEADING_MENTION.match(rest)) is not None:
        rest = rest[match.end() :]
    words = rest.split()
    name = _COMMANDS.get(words[0]) if words else None
    if name is None:
        return None
    if name in APPROVALS:
        return Command(name, words[1]) if len(words) == 2 else None
    return Command(name)


def refusal(event: Event, gate: Gate, known_agents: frozenset[str] | set[str]) -> str | None:
    """Why the gate refuses an event, or None."""
    actor = event.pubkey
    if actor == gate.agent:
        return "own_event"
    if event.kind not in gate.kinds:
        return "kind_not_subscribed"
    if event.kind == PRIVATE_MESSAGE_KIND and not isinstance(event, PrivateEvent):
        return "private_message_not_wrapped"
    mentioned = gate.agent in nip10.mentions(event)
    if gate.mentions_required and not mentioned:
        return "not_mentioned"
    if actor in known_agents and not mentioned:
        return "agent_not_mentioning"
    channel = nip10.channel(event)
    if channel is None and not mentioned:
        return "direct_without_mention"
    if channel is None and event.kind == CHAT_KIND and not gate.plaintext_dm:
        return "plaintext_direct_message"
    if channel is not None and gate.channels and channel not in gate.channels:
        return "channel_not_subscribed"
    return author_refusal(actor, gate)


def author_refusal(actor: str, gate: Gate) -> str | None:
    """Why the gate refuses ``actor``'s events whatever they say (``author_not_owner``,
    ``author_not_allowed``), or None."""
    if gate.mode == "anyone" or actor == gate.owner:
        return None
    if gate.mode == "allowlist" and actor in gate.allowlist:
        return None
    return "author_not_owner" if gate.mode == "owner-only" else "author_not_allowed"


def decide(event: Event, gate: Gate, known_agents: frozenset[str] | set[str]) -> Decision:
    """Command, refusal (with its reason), another shard's (reason None), or admission.

    A command comes in a kind 9 that mentions the agent or in a private message; the owner's
    are obeyed, and anyone's ``!allow``/``!deny CODE`` goes to the approvals, which refuse
    all but the owner's (``bot/approvals.py``).  ``event`` must be a verified
    :class:`~nostr_buzz.event.Event` (a dict or another library's event is an
    :class:`~nostr_buzz.errors.InvalidEvent` saying how to make one)."""
    event = require_event(event, "decide")
    if not isinstance(gate, Gate):
        raise ConfigError(f"decide: expected a Gate, got {shown(gate)}")
    private = event.kind == PRIVATE_MESSAGE_KIND and isinstance(event, PrivateEvent)
    addressed = event.kind == CHAT_KIND and gate.agent in nip10.mentions(event)
    command = command_of(event.content) if private or addressed else None
    owners = event.pubkey == gate.owner or (command is not None and command.name in APPROVALS)
    if command is not None and event.pubkey != gate.agent and owners:
        return command
    reason = refusal(event, gate, known_agents)
    if reason is not None:
        return Refuse(reason)
    shard = gate.shard
    if shard is not None and shard_of(nip10.destination(event), shard.count) != shard.index:
        return Refuse(None)
    return Admit(nip10.queue_channel(event))


#: What an admitted event does to its channel's running turn.
InFlightAction = Literal["queue", "steer", "interrupt"]


def authority_key(event: Event) -> tuple[str, str]:
    """Who speaks and where: the signing actor and the destination (the thread's root)."""
    return event.pubkey, nip10.destination(event)


def in_flight_action(policy: InFlightPolicy, running: Event, event: Event) -> InFlightAction:
    """What an admitted event does to its channel's running turn (whose newest event is
    ``running``).  Only the running batch's own authority — the same actor in the same
    thread — may steer or interrupt it; anything else waits in the queue for a turn of its
    own, whatever the policy."""
    if policy == "queue" or authority_key(event) != authority_key(running):
        return "queue"
    return policy
