"""The rule behind ``[agent] permissions``: may the agent run the tool it asks for now?
(docs/bot.md, "Permissions").

Pure: the caller says whose words reached the agent — in the turn that asks (its batch, the
cancelled events riding with it, the steers sent into it) and in the agent session since it
started — and :func:`decide` answers with the reason, for the ``permission_decision``
diagnostic.

``owner`` approves only when every one of those actors is the owner: an agent session keeps
what it was told, so a stranger's words in any earlier turn of the session, or in the
interrupted work a turn carries, could be what the agent acts on.  Thread history (the context
messages of a turn) is not counted here; docs/bot.md names that residual risk.

``ask`` puts every request of a live turn to the owner, and so does ``owner`` for a request it
cannot approve because someone else's words reached the session (:attr:`PermissionDecision.
asks_owner`); the owner's answer, or its absence, becomes the final decision (:func:`answered`).
The question names every actor other than the owner whose words reached the turn or its
session, and where (:func:`speakers`); a turn puts at most ``[agent] max_questions`` to the
owner, the rest are rejected unasked (``ask_limit``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from nostr_buzz.core.choices import Permissions

__all__ = [
    "OwnerAnswer",
    "Part",
    "PermissionDecision",
    "Policy",
    "Reason",
    "Speaker",
    "TurnProvenance",
    "answered",
    "decide",
    "speakers",
]

#: ``[agent] permissions`` (:mod:`nostr_buzz.core.choices`).
Policy = Permissions
#: Where a non-owner's words were found: the turn's batch, its cancelled (interrupted) events,
#: a steer sent into it, or an earlier turn of the agent session.
Part = Literal["batch", "cancelled", "steer", "session"]
#: Why a request was decided as it was: by the rules alone, by the owner's answer, or by what
#: became of a question put to the owner (``ask`` while it is open).
RuleReason = Literal["allowed", "owner_only", "policy_rejects", "no_live_turn", "not_owner"]
OwnerReason = Literal["owner_allowed", "owner_denied"]
AskReason = Literal["ask", "ask_timeout", "ask_withdrawn", "ask_unsent", "ask_limit"]
Reason = RuleReason | OwnerReason | AskReason
#: What became of a question put to the owner: answered ``!allow`` or ``!deny``, no answer in
#: time, the turn ended (or was cancelled) first, the question could not be sent, or it was
#: never sent because the turn had asked ``[agent] max_questions`` already.
OwnerAnswer = Literal["allowed", "denied", "timeout", "withdrawn", "unsent", "limit"]
_ANSWERED: dict[OwnerAnswer, Reason] = {
    "allowed": "owner_allowed",
    "denied": "owner_denied",
    "timeout": "ask_timeout",
    "withdrawn": "ask_withdrawn",
    "unsent": "ask_unsent",
    "limit": "ask_limit",
}


@dataclass(frozen=True)
class TurnProvenance:
    """Whose words reach the agent in one turn, by part (hex pubkeys, in any order)."""

    batch: tuple[str, ...]
    cancelled: tuple[str, ...] = ()
    steers: tuple[str, ...] = ()

    def actors(self) -> frozenset[str]:
        return frozenset((*self.batch, *self.cancelled, *self.steers))


@dataclass(frozen=True)
class Speaker:
    """An actor other than the owner whose words reached a turn or its agent session, and every
    part where they did (``session``: an earlier turn of the session)."""

    actor: str
    parts: tuple[Part, ...]


def speakers(owner: str, turn: TurnProvenance, earlier: Collection[str]) -> tuple[Speaker, ...]:
    """Everyone but ``owner`` whose words reach ``turn`` or reached its session before it
    (``earlier``: the session's actors when the turn's prompt went out), in the order found."""
    found: dict[str, list[Part]] = {}
    parts: tuple[tuple[Part, Collection[str]], ...] = (
        ("batch", turn.batch),
        ("cancelled", turn.cancelled),
        ("steer", turn.steers),
        ("session", sorted(earlier)),
    )
    for part, actors in parts:
        for actor in actors:
            if actor != owner and part not in found.setdefault(actor, []):
                found[actor].append(part)
    return tuple(Speaker(actor, tuple(where)) for actor, where in found.items())


@dataclass(frozen=True)
class PermissionDecision:
    """Approve or not, and why: ``part`` and ``actor`` name the first non-owner found."""

    approve: bool
    reason: Reason
    part: Part | None = None
    actor: str | None = None

    def payload(self) -> dict[str, str]:
        """The fields the ``permission_decision`` diagnostic adds."""
        fields: dict[str, str] = {"reason": self.reason}
        if self.part is not None:
            fields["part"] = self.part
        if self.actor is not None:
            fields["actor"] = self.actor
        return fields

    @property
    def asks_owner(self) -> bool:
        """The owner may still approve: ``ask``, or ``owner`` with someone else's words in the
        session."""
        return self.reason in ("ask", "not_owner")


def answered(decision: PermissionDecision, answer: OwnerAnswer) -> PermissionDecision:
    """The final decision once the owner was asked: only ``!allow`` approves (``part`` and
    ``actor`` still name whose words made the rule ask)."""
    return PermissionDecision(answer == "allowed", _ANSWERED[answer], decision.part, decision.actor)


def decide(
    policy: Policy, owner: str, turn: TurnProvenance | None, session: Collection[str]
) -> PermissionDecision:
    """The decision for a request made during ``turn`` (None: no turn of the asking session is
    live) of a session whose words came from ``session`` (every actor since it started)."""
    if policy not in ("owner", "allow", "ask"):
        return PermissionDecision(False, "policy_rejects")
    if turn is None or not turn.batch:
        return PermissionDecision(False, "no_live_turn")
    if policy == "allow":
        return PermissionDecision(True, "allowed")
    if policy == "ask":
        return PermissionDecision(False, "ask")
    parts: tuple[tuple[Part, Collection[str]], ...] = (
        ("batch", turn.batch),
        ("cancelled", turn.cancelled),
        ("steer", turn.steers),
        ("session", sorted(session)),  # sorted: the same session names the same actor
    )
    for part, actors in parts:
        for actor in actors:
            if actor != owner:
                return PermissionDecision(False, "not_owner", part, actor)
    return PermissionDecision(True, "owner_only")
