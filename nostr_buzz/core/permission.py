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
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

__all__ = ["Part", "PermissionDecision", "Policy", "Reason", "TurnProvenance", "decide"]

#: ``[agent] permissions``.
Policy = Literal["owner", "allow", "reject"]
#: Where a non-owner's words were found: the turn's batch, its cancelled (interrupted) events,
#: a steer sent into it, or an earlier turn of the agent session.
Part = Literal["batch", "cancelled", "steer", "session"]
Reason = Literal["allowed", "owner_only", "policy_rejects", "no_live_turn", "not_owner"]


@dataclass(frozen=True)
class TurnProvenance:
    """Whose words reach the agent in one turn, by part (hex pubkeys, in any order)."""

    batch: tuple[str, ...]
    cancelled: tuple[str, ...] = ()
    steers: tuple[str, ...] = ()

    def actors(self) -> frozenset[str]:
        return frozenset((*self.batch, *self.cancelled, *self.steers))


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


def decide(
    policy: Policy, owner: str, turn: TurnProvenance | None, session: Collection[str]
) -> PermissionDecision:
    """The decision for a request made during ``turn`` (None: no turn of the asking session is
    live) of a session whose words came from ``session`` (every actor since it started)."""
    if policy not in ("owner", "allow"):
        return PermissionDecision(False, "policy_rejects")
    if turn is None or not turn.batch:
        return PermissionDecision(False, "no_live_turn")
    if policy == "allow":
        return PermissionDecision(True, "allowed")
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
