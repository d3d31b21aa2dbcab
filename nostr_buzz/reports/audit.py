"""Auditing a turn: the layers of a metric's context manifest against the signed events they
name (docs/cli.md, "buzz audit"), pure.

A layer whose ``version`` is 64 lowercase hex characters names a signed event (docs/envelope.md:
``current_instruction`` of a single-event batch, and of each accepted steer); every other
version is a ``sha256:`` hash of the text the agent was given, which no relay can vouch for:
such a layer is reported as known only by hash.  The caller fetches each named event from the
relays (a :class:`Lookup`); :func:`audit_metric` then judges each layer:

* the event must be on some relay with a valid id and signature (``missing``, ``forged``:
  no valid copy, only what failed verification, ``unreachable``: no relay answered);
* its kind must be one the layer takes (:data:`LAYER_RULES`, ``wrong_kind``);
* its author must be one the layer trusts: for the current instruction, the event must be one
  the configured gate admits (``wrong_author`` when the gate refuses its author,
  ``not_admitted`` for another of the gate's reasons); for a channel canvas the owner, the
  agent or a ``[gate] trusted`` key; for core memory the agent alone (nips/STANDING.md, "Who
  is trusted"); for a thread checkpoint the agent alone, its tags laid out as nips/NIP-TC.md
  says and, where the auditor can decrypt it, a checkpoint of the metric's own channel
  (``malformed``, ``wrong_channel`` otherwise); an event a tool handed over mid-turn
  (``retrieved_event``, docs/envelope.md, "Retrievals") may be anyone's of any kind but a
  private one: the agent asked for it, and the tool told it what the gate says of its author.

A NIP-17 private message's current instruction is named by its rumor's id: the rumor is never
on a relay (only the gift wraps that carry it are), so a turn of a private channel
(``dm-private-{actor}``) reports that layer as ``private`` rather than failing.  Since no relay
can vouch for such a turn, the metric itself must (:class:`ChannelAudit`): it passes only when
it is signed by one of the owner's configured agents and the gate admits private messages from
the channel's actor; otherwise anyone could encrypt a metric to the owner naming a private
channel and have it audit clean.  A layer this module
has no rule for whose version is an event id fails (``no_rule``): nothing here can say whose
event it should be.  No I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import msgspec

from nostr_buzz.core.session_key import channel_of
from nostr_buzz.errors import CheckpointError
from nostr_buzz.event import Event
from nostr_buzz.manifest import Layer
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip10 import TEXT_NOTE_KIND
from nostr_buzz.nips.nip22 import COMMENT_KIND
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.nip_tc import CHECKPOINT_KIND, check_layout
from nostr_buzz.nips.standing import CANVAS_KIND, CORE_MEMORY_KIND
from nostr_buzz.reports.metrics_report import OpenedMetric

__all__ = [
    "FAILED",
    "LAYER_RULES",
    "PRIVATE_KINDS",
    "Authority",
    "ChannelAudit",
    "LayerAudit",
    "LayerRule",
    "Lookup",
    "MetricAudit",
    "Verdict",
    "audit_metric",
    "event_ids",
    "is_event_version",
]

Verdict = Literal[
    "verified",  # the event is on a relay, valid, of a kind and by an author the layer takes
    "hash_only",  # the version is a hash: no event to check
    "private",  # a private message's rumor id: not on relays
    "missing",  # relays answered, none has the event
    "forged",  # no valid copy, and relays served what failed its id or signature check
    "unreachable",  # no relay answered the query for it
    "wrong_kind",
    "wrong_author",  # the gate refuses its author, or the layer does not trust it
    "not_admitted",  # the gate refuses the event for another reason (channel, mention, …)
    "malformed",  # the event is not laid out as its kind requires (a checkpoint's tags)
    "wrong_channel",  # a checkpoint of another channel or conversation than the metric's
    "no_rule",  # an event id in a layer this audit has no rule for
]
#: Verdicts that make an audit fail (exit 4); ``unreachable`` fails as a network problem.
FAILED: Final[frozenset[Verdict]] = frozenset(
    {
        "missing",
        "forged",
        "wrong_kind",
        "wrong_author",
        "not_admitted",
        "malformed",
        "wrong_channel",
        "no_rule",
    }
)
#: The gate's reasons (``nostr_buzz.bot.intake.refusal``) that are about who signed.
_AUTHOR_REASONS: Final = frozenset({"own_event", "author_not_owner", "author_not_allowed"})

_EVENT_ID: Final = re.compile(r"[0-9a-f]{64}")

AuthorRule = Literal["gate", "trusted", "agent", "any"]


@dataclass(frozen=True)
class LayerRule:
    """What a layer whose version is an event id may name: its kinds, and whose event counts
    (``gate``: one the configured gate admits; ``trusted``: the owner, the agent or a
    ``[gate] trusted`` key; ``agent``: the agent alone; ``any``: anyone).  ``kinds`` None: any
    kind but a private message's wrapping (:data:`PRIVATE_KINDS`)."""

    kinds: frozenset[int] | None
    authors: AuthorRule


#: The layers that can name an event.  This project's compiler names one only in
#: ``current_instruction`` (kinds the bot answers in public: 9 chat, 1 notes, 1111 comments;
#: a kind 14 private message is never on relays); canvases and core memory are versioned by the
#: hash of their rendered section, and their rules apply to a manifest that names their events.
LAYER_RULES: Final[Mapping[str, LayerRule]] = {
    "current_instruction": LayerRule(frozenset({CHAT_KIND, TEXT_NOTE_KIND, COMMENT_KIND}), "gate"),
    "channel_canvas": LayerRule(frozenset({CANVAS_KIND}), "trusted"),
    "core_memory": LayerRule(frozenset({CORE_MEMORY_KIND}), "agent"),
    # A new session's thread checkpoint (nips/NIP-TC.md): the agent's own, to its owner.
    "thread_checkpoint": LayerRule(frozenset({CHECKPOINT_KIND}), "agent"),
    "retrieved_event": LayerRule(None, "any"),
}
#: Seals, private messages and gift wraps: never what a tool hands over from a relay.
PRIVATE_KINDS: Final = nip17.PRIVATE_KINDS
#: Layers a turn of a private channel fills with a rumor's id.
_PRIVATE_LAYERS: Final = frozenset({"current_instruction"})
#: A retrieval's source for a message of the session's own private conversation (a rumor).
_PRIVATE_RETRIEVAL: Final = "private_conversation"


def is_event_version(version: str) -> bool:
    """Whether a layer's version is an event id (64 lowercase hex), not a ``sha256:`` hash."""
    return _EVENT_ID.fullmatch(version) is not None


@dataclass(frozen=True)
class Authority:
    """Who counts for one metric's turn: the owner, the agent that signed the metric, the
    ``[gate] trusted`` keys (hex), the gate's verdict on an event and on a private message from
    an actor (its refusal reason, or None when it admits it), and whether the metric's signer
    is one of the owner's configured agents (``agent_known``)."""

    owner: str
    agent: str
    trusted: frozenset[str]
    gate_refusal: Callable[[Event], str | None]
    private_refusal: Callable[[str], str | None]
    agent_known: bool
    #: The session key a thread checkpoint of the agent's to the owner holds, decrypted (None:
    #: it does not open so); None when the auditor cannot decrypt (its layout alone is checked).
    checkpoint_key: Callable[[Event], str | None] | None = None


@dataclass(frozen=True)
class Lookup:
    """What the relays said about one event id: the verified ``event`` (None when no relay
    served a valid copy), whether any relay answered at all, the relays that served it, the
    relays that served forgeries (→ the checks they failed) and the relays that did not answer
    (→ why)."""

    event: Event | None
    answered: bool
    served_by: tuple[str, ...] = ()
    forgers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unanswered: Mapping[str, str] = field(default_factory=dict)


class LayerAudit(msgspec.Struct, frozen=True, rename="camel"):
    """One layer's verdict; ``kind`` and ``author`` are the fetched event's (None without
    one); ``served_by`` and ``forgers`` name relays."""

    order: int
    layer: str
    version: str
    verdict: Verdict
    detail: str
    kind: int | None = None
    author: str | None = None
    served_by: tuple[str, ...] = ()
    forgers: dict[str, tuple[str, ...]] = {}

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED


class ChannelAudit(msgspec.Struct, frozen=True, rename="camel"):
    """A private channel's metric, judged as a whole: ``private`` when one of the owner's
    agents signed it and the gate admits private messages from ``actor`` (the channel's,
    None when its name holds no key); else ``wrong_author`` or ``not_admitted``."""

    actor: str | None
    verdict: Verdict
    detail: str

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED


class MetricAudit(msgspec.Struct, frozen=True, rename="camel"):
    """One metric's audit: its manifest's layers, each judged; ``manifest_valid`` is None
    without a manifest; ``channel`` is a private channel's verdict (None for any other);
    ``ok`` when no layer failed, none was unreachable, the manifest's hash matches its layers
    and a private channel's verdict is ``private``."""

    event_id: str
    agent: str
    timestamp: str
    channel_id: str | None
    manifest_hash: str | None
    manifest_valid: bool | None
    layers: tuple[LayerAudit, ...]
    ok: bool
    channel: ChannelAudit | None = None


def _private(metric: OpenedMetric) -> bool:
    channel = metric.payload.channel_id
    return channel is not None and nip10.is_private_channel(channel)


def event_ids(metric: OpenedMetric) -> list[str]:
    """The event ids the relays must be asked for to audit ``metric``, in manifest order."""
    manifest = metric.payload.context_manifest
    if manifest is None:
        return []
    private = _private(metric)
    return list(
        dict.fromkeys(
            layer.version
            for layer in manifest.layers
            if is_event_version(layer.version)
            and layer.layer in LAYER_RULES
            and not (private and layer.layer in _PRIVATE_LAYERS)
            and layer.source != _PRIVATE_RETRIEVAL
        )
    )


def _who(pubkey: str, authority: Authority) -> str:
    if pubkey == authority.owner:
        return "the owner"
    if pubkey == authority.agent:
        return "the agent"
    return pubkey[:16] + "…"


def _forgers_text(forgers: Mapping[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{url} ({', '.join(why)})" for url, why in forgers.items())


def _author_problem(
    event: Event, rule: LayerRule, authority: Authority
) -> tuple[Verdict, str] | None:
    who = _who(event.pubkey, authority)
    if rule.authors == "gate":
        reason = authority.gate_refusal(event)
        if reason is None:
            return None
        verdict: Verdict = "wrong_author" if reason in _AUTHOR_REASONS else "not_admitted"
        return verdict, f"signed by {who}: the gate refuses it ({reason})"
    if rule.authors == "any":
        return None
    if rule.authors == "agent":
        if event.pubkey == authority.agent:
            return None
        return "wrong_author", f"signed by {who}: only the agent's own event counts here"
    if event.pubkey in {authority.owner, authority.agent} or event.pubkey in authority.trusted:
        return None
    return "wrong_author", f"signed by {who}: not the owner, the agent or a [gate] trusted key"


def _checkpoint_problem(
    event: Event, authority: Authority, channel: str | None
) -> tuple[Verdict, str] | None:
    """A thread checkpoint must be the agent's to the owner and of the metric's channel."""
    try:
        check_layout(event, authority.agent, authority.owner)
    except CheckpointError as exc:
        return "malformed", f"not a checkpoint of the agent's to you: {exc}"
    if authority.checkpoint_key is None:
        return None
    key = authority.checkpoint_key(event)
    if key is None:
        return "malformed", "it does not open as a checkpoint of the agent's to you"
    if channel is None or channel_of(key) != channel:
        return "wrong_channel", "a checkpoint of another channel or conversation than the turn's"
    return None


def _judge(
    layer: Layer, rule: LayerRule, lookup: Lookup, authority: Authority, channel: str | None
) -> LayerAudit:
    def verdict(v: Verdict, detail: str, event: Event | None = None) -> LayerAudit:
        return LayerAudit(
            order=layer.order,
            layer=layer.layer,
            version=layer.version,
            verdict=v,
            detail=detail,
            kind=None if event is None else event.kind,
            author=None if event is None else event.pubkey,
            served_by=lookup.served_by,
            forgers=dict(lookup.forgers),
        )

    event = lookup.event
    forged = _forgers_text(lookup.forgers)
    if event is None:
        if lookup.forgers:
            return verdict(
                "forged", f"no relay served a valid copy; failing verification: {forged}"
            )
        if lookup.answered:
            silent = "; ".join(
                f"{url} did not answer ({why})" for url, why in lookup.unanswered.items()
            )
            return verdict("missing", "no relay has this event" + (f"; {silent}" if silent else ""))
        return verdict("unreachable", "no relay answered the query for this event")
    if rule.kinds is None and event.kind in PRIVATE_KINDS:
        return verdict("wrong_kind", f"kind {event.kind}: a private message's wrapping", event)
    if rule.kinds is not None and event.kind not in rule.kinds:
        kinds = ", ".join(map(str, sorted(rule.kinds)))
        return verdict("wrong_kind", f"kind {event.kind}; {layer.layer} takes {kinds}", event)
    problem = _author_problem(event, rule, authority)
    if problem is not None:
        return verdict(*problem, event)
    if event.kind == CHECKPOINT_KIND:
        problem = _checkpoint_problem(event, authority, channel)
        if problem is not None:
            return verdict(*problem, event)
    detail = f"kind {event.kind} by {_who(event.pubkey, authority)}"
    detail += f", on {len(lookup.served_by)} relay(s)"
    if forged:
        detail += f"; failing verification: {forged}"
    return verdict("verified", detail, event)


def _audit_channel(metric: OpenedMetric, authority: Authority) -> ChannelAudit | None:
    """A private channel's metric: vouched for by its signer and its channel's actor, since
    no relay holds what the turn answered."""
    channel = metric.payload.channel_id
    if channel is None or not nip10.is_private_channel(channel):
        return None
    actor = channel.removeprefix(nip10.PRIVATE_CHANNEL_PREFIX)
    if _EVENT_ID.fullmatch(actor) is None:
        return ChannelAudit(None, "not_admitted", "the private channel's name holds no key")
    who = _who(actor, authority)
    if not authority.agent_known:
        return ChannelAudit(
            actor,
            "wrong_author",
            f"signed by {_who(authority.agent, authority)}, which is not one of your agents "
            "(agents in buzz.toml or --agent): a private conversation is on no relay, so only "
            "your own agent's metric can vouch for one",
        )
    reason = authority.private_refusal(actor)
    if reason is not None:
        verdict: Verdict = "wrong_author" if reason in _AUTHOR_REASONS else "not_admitted"
        return ChannelAudit(
            actor, verdict, f"a private conversation with {who}: the gate refuses it ({reason})"
        )
    return ChannelAudit(
        actor, "private", f"a private conversation with {who}, which the gate admits"
    )


def _audit_layer(
    layer: Layer, lookups: Mapping[str, Lookup], authority: Authority, metric: OpenedMetric
) -> LayerAudit:
    def plain(v: Verdict, detail: str) -> LayerAudit:
        return LayerAudit(layer.order, layer.layer, layer.version, v, detail)

    if not is_event_version(layer.version):
        return plain("hash_only", "known only by the hash of the text the agent was given")
    rule = LAYER_RULES.get(layer.layer)
    if rule is None:
        return plain("no_rule", "an event id in a layer whose events this audit cannot judge")
    if _private(metric) and layer.layer in _PRIVATE_LAYERS:
        return plain(
            "private", "a NIP-17 private message's rumor: never on relays, not auditable there"
        )
    if layer.source == _PRIVATE_RETRIEVAL:
        if _private(metric):
            return plain("private", "a message of this private conversation, handed over mid-turn")
        return plain("not_admitted", "a private message handed over outside a private conversation")
    lookup = lookups.get(layer.version)
    if lookup is None:
        return plain("unreachable", "not looked up")
    return _judge(layer, rule, lookup, authority, metric.payload.channel_id)


def audit_metric(
    metric: OpenedMetric, lookups: Mapping[str, Lookup], authority: Authority
) -> MetricAudit:
    """Judge every layer of ``metric``'s manifest; ``lookups`` maps each of
    :func:`event_ids` to what the relays said about it."""
    manifest = metric.payload.context_manifest
    layers: Iterable[Layer] = () if manifest is None else manifest.layers
    audits = tuple(_audit_layer(layer, lookups, authority, metric) for layer in layers)
    valid = None if manifest is None else manifest.hash_matches()
    channel = _audit_channel(metric, authority)
    ok = valid is not False and not any(a.failed or a.verdict == "unreachable" for a in audits)
    ok = ok and not (channel is not None and channel.failed)
    return MetricAudit(
        event_id=metric.event_id,
        agent=metric.agent,
        timestamp=metric.payload.timestamp,
        channel_id=metric.payload.channel_id,
        manifest_hash=None if manifest is None else manifest.hash,
        manifest_valid=valid,
        layers=audits,
        ok=ok,
        channel=channel,
    )
