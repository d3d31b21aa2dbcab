"""Intake: what becomes of an incoming verified event, as pure decisions.

:func:`decide` says, for one event, whether it is an owner command, refused (with the reason
reported as an ``event_rejected`` diagnostic), served by another shard (silently), or admitted
to the queue.  The rules:

* **Owner commands.** A kind 9 from the owner that mentions the agent and whose content, after
  leading ``nostr:npub…``/``@name`` tokens, starts with ``!cancel``, ``!new`` (the channel's next
  turn opens a new agent session) or ``!shutdown``.  Commands
  are never queued and bypass the shard filter.
* **Gate.** The agent's own events never start a turn (no loops).  Other agents (``gate.agents``
  or a NIP-24 ``bot`` profile seen earlier) start one only when they mention this agent, even
  with ``mentions_required = false``.  ``owner-only`` admits the owner, ``allowlist`` the owner
  and the listed keys, ``anyone`` every key.
* **Subscriptions.** ``kinds`` names what the bot listens to: 9 chat, 14 NIP-17 private
  messages (gift wraps addressed to the agent, opened and checked before they get here), 1
  notes, 1111 comments.  ``channels`` restricts channel events; events without a channel are
  accepted when they mention the agent, except a plaintext kind 9 (anyone on the relay can
  read and write into it), refused unless ``plaintext_dm`` opts in.  A kind 14 is served only
  as a :class:`~nostr_buzz.nips.nip59.PrivateEvent`: a signed kind 14 sent in plaintext is no
  private message.
* **Shard** ``i/n``: a destination belongs to shard ``int(sha256(destination)) mod n``.
* **A running turn** is steered (or interrupted) only by its own authority: an event whose
  signing actor and destination equal the running batch's.  Anything else waits in the queue.

Also here: the position a handled event moves the bot to (never later than the clock), the
scope a remembered refusal holds in (:func:`refusal_scope`), and the date before which a private
message is never answered (:func:`private_before`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.config import AuthorGate, InFlightPolicy
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.nip59 import PrivateEvent

from .config import PluginConfig, Shard, shard_of

__all__ = [
    "Admit",
    "Command",
    "Decision",
    "Gate",
    "Refuse",
    "advance",
    "authority_key",
    "command_of",
    "decide",
    "in_flight_action",
    "owner_command",
    "private_before",
    "refusal",
    "refusal_scope",
]

_LEADING_MENTION: Final = re.compile(r"\s*(?:nostr:(?:npub|nprofile)1[0-9a-z]+|@\S+)")

CommandName = Literal["cancel", "new", "shutdown", "allow", "deny"]
_COMMANDS: Final[dict[str, CommandName]] = {
    "!cancel": "cancel",
    "!new": "new",
    "!shutdown": "shutdown",
    "!allow": "allow",
    "!deny": "deny",
}
#: The commands that answer a permission question: they take a code.
APPROVALS: Final = frozenset({"allow", "deny"})


@dataclass(frozen=True)
class Gate:
    """The part of the configuration intake decides with."""

    agent: str  # hex pubkeys
    owner: str
    kinds: frozenset[int]
    channels: frozenset[str]
    mentions_required: bool
    mode: AuthorGate
    allowlist: frozenset[str]
    shard: Shard | None = None
    plaintext_dm: bool = False

    @classmethod
    def of(cls, config: PluginConfig) -> Gate:
        return cls(
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
    if gate.mode == "owner-only" and actor != gate.owner:
        return "author_not_owner"
    if gate.mode == "allowlist" and actor != gate.owner and actor not in gate.allowlist:
        return "author_not_allowed"
    return None


def decide(event: Event, gate: Gate, known_agents: frozenset[str] | set[str]) -> Decision:
    """Command, refusal (with its reason), another shard's (reason None), or admission."""
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
