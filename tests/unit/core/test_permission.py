"""The permission rule: ``owner`` approves only when the owner alone spoke in the turn and in
its session; ``allow`` approves any live turn; ``reject`` and no live turn never approve."""

from __future__ import annotations

import pytest

from nostr_buzz.core.permission import (
    Part,
    PermissionDecision,
    Policy,
    Reason,
    TurnProvenance,
    decide,
)

OWNER = "0" * 64
ALICE = "a" * 64
BOB = "b" * 64

OWNERS_TURN = TurnProvenance(batch=(OWNER, OWNER))

Case = tuple[str, Policy, TurnProvenance | None, set[str], bool, Reason, Part | None, str | None]
CASES: list[Case] = [
    # name, policy, turn, session, approve, reason, part, actor
    ("owner alone", "owner", OWNERS_TURN, {OWNER}, True, "owner_only", None, None),
    ("owner, session not yet recorded", "owner", OWNERS_TURN, set(), True, "owner_only", None,
     None),
    ("owner, owner's steer", "owner", TurnProvenance((OWNER,), steers=(OWNER,)), {OWNER}, True,
     "owner_only", None, None),
    ("stranger in the batch", "owner", TurnProvenance((OWNER, ALICE)), {OWNER, ALICE}, False,
     "not_owner", "batch", ALICE),
    ("stranger's cancelled batch rides along", "owner",
     TurnProvenance((OWNER,), cancelled=(ALICE,)), {OWNER}, False, "not_owner", "cancelled", ALICE),
    ("stranger's steer", "owner", TurnProvenance((OWNER,), steers=(ALICE,)), {OWNER}, False,
     "not_owner", "steer", ALICE),
    ("stranger in an earlier turn of the session", "owner", OWNERS_TURN, {OWNER, ALICE}, False,
     "not_owner", "session", ALICE),
    ("the turn is named before the session", "owner", TurnProvenance((OWNER,), cancelled=(BOB,)),
     {OWNER, ALICE}, False, "not_owner", "cancelled", BOB),
    ("the session's first non-owner in order", "owner", OWNERS_TURN, {BOB, OWNER, ALICE}, False,
     "not_owner", "session", ALICE),
    ("an empty batch is no turn", "owner", TurnProvenance(()), {OWNER}, False, "no_live_turn",
     None, None),
    ("owner, no live turn", "owner", None, {OWNER}, False, "no_live_turn", None, None),
    ("allow, stranger everywhere", "allow", TurnProvenance((ALICE,), (BOB,), (ALICE,)),
     {ALICE, BOB}, True, "allowed", None, None),
    ("allow, no live turn", "allow", None, set(), False, "no_live_turn", None, None),
    ("reject, owner alone", "reject", OWNERS_TURN, {OWNER}, False, "policy_rejects", None, None),
    ("reject, no live turn", "reject", None, set(), False, "policy_rejects", None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "turn", "session", "approve", "reason", "part", "actor"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decide(
    policy: Policy,
    turn: TurnProvenance | None,
    session: set[str],
    approve: bool,
    reason: Reason,
    part: Part | None,
    actor: str | None,
) -> None:
    assert decide(policy, OWNER, turn, session) == PermissionDecision(approve, reason, part, actor)


def test_an_unknown_policy_never_approves() -> None:
    assert not decide("sometimes", OWNER, OWNERS_TURN, {OWNER}).approve  # type: ignore[arg-type]


def test_the_diagnostic_names_the_part_and_the_actor() -> None:
    decision = decide("owner", OWNER, TurnProvenance((OWNER,), cancelled=(ALICE,)), {OWNER})
    assert decision.payload() == {"reason": "not_owner", "part": "cancelled", "actor": ALICE}
    assert decide("owner", OWNER, OWNERS_TURN, {OWNER}).payload() == {"reason": "owner_only"}


def test_provenance_actors_cover_every_part() -> None:
    assert TurnProvenance((OWNER,), (ALICE,), (BOB,)).actors() == {OWNER, ALICE, BOB}
