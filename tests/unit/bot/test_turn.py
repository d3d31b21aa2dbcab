"""A turn's permission decisions and its settlement, as pure functions of the turn."""

from __future__ import annotations

import pytest

from nostr_buzz.acp.types import PermissionRequest, SessionStart
from nostr_buzz.bot.running import Phase, RunningTurns, Turn, settlement, turn_permission
from nostr_buzz.bot.supervisor import ChannelSession
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.keys import SecretKey
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER

FRIEND = SecretKey.from_str("33" * 32)
OWNER_HEX, FRIEND_HEX = OWNER.public_key.hex, FRIEND.public_key.hex


def turn_of(author: SecretKey = OWNER, phase: Phase = Phase.LIVE, session: str = "s1") -> Turn:
    q = DispatchQueue()
    q.push(chat(author, 1000, content="task", channel="eng", mention=AGENT), now=1.0)
    batch = q.flush_next(2.0)
    assert batch is not None
    turn = Turn.of(batch)
    turn.session = ChannelSession(SessionStart(session, "legacy"), "m1")
    turn.session.actors.update(turn.provenance().actors())
    if phase > Phase.PREPARING:
        turn.advance(phase)
    return turn


@pytest.mark.parametrize(
    ("outcome", "reason", "expected"),
    [
        ("success", None, "complete"),
        ("success", "interrupt", "complete"),  # it finished before the cancel took
        ("cancelled", "interrupt", "requeue"),
        ("cancelled", "steer", "requeue"),
        ("cancelled", "owner", "drop"),
        ("cancelled", None, "drop"),  # the agent cancelled on its own
        ("failed", None, "fail"),
        ("failed", "owner", "fail"),
        ("unknown", None, "fail"),
    ],
)
def test_settlement(outcome: str, reason: str | None, expected: str) -> None:
    assert settlement(outcome, reason) == expected  # type: ignore[arg-type]


def test_only_a_live_uncancelled_turn_may_be_approved() -> None:
    for phase in (Phase.PREPARING, Phase.ENDED, Phase.SETTLED):
        assert turn_permission(turn_of(phase=phase), "allow", OWNER_HEX) == PermissionDecision(
            False, "no_live_turn"
        )
    live = turn_of()
    assert turn_permission(live, "allow", OWNER_HEX).approve
    assert turn_permission(live, "owner", OWNER_HEX) == PermissionDecision(True, "owner_only")
    assert turn_permission(live, "reject", OWNER_HEX) == PermissionDecision(False, "policy_rejects")
    live.cancel_reason = "interrupt"
    assert turn_permission(live, "allow", OWNER_HEX).reason == "no_live_turn"
    assert turn_permission(None, "allow", OWNER_HEX).reason == "no_live_turn"


def test_under_owner_a_strangers_words_in_the_turn_or_its_session_refuse() -> None:
    stranger = turn_of(FRIEND)
    assert turn_permission(stranger, "owner", OWNER_HEX) == PermissionDecision(
        False, "not_owner", "batch", FRIEND_HEX
    )
    steered = turn_of()
    steered.steer_actors.append(FRIEND_HEX)
    assert turn_permission(steered, "owner", OWNER_HEX).part == "steer"
    earlier = turn_of()
    assert earlier.session is not None
    earlier.session.actors.add(FRIEND_HEX)  # an earlier turn of the session was a stranger's
    assert turn_permission(earlier, "owner", OWNER_HEX).part == "session"


def test_running_turns_answer_by_adapter_session() -> None:
    turns = RunningTurns("owner", OWNER_HEX)
    mine, other = turn_of(session="s1"), turn_of(FRIEND, session="s2")
    turns["eng"], turns["ops"] = mine, other

    def ask(session: str) -> PermissionRequest:
        return PermissionRequest(session, "ls", "execute", "c1", True)

    assert turns.permission(ask("s1")).approve
    assert turns.permission(ask("s2")).reason == "not_owner"
    assert turns.permission(ask("s3")).reason == "no_live_turn"
    assert turns.locate("s1") == mine.ids.as_kwargs() and turns.locate("s3") is None


def test_restart_accounting() -> None:
    from datetime import UTC, datetime

    from nostr_buzz.acp.types import TurnResult
    from nostr_buzz.bot.supervisor import restart_accounting

    def result(outcome: str, evidence: str) -> TurnResult:
        at = datetime(2026, 1, 1, tzinfo=UTC)
        return TurnResult("", "", None, "end_turn", outcome, evidence, None, "s", None, at, at)  # type: ignore[arg-type]

    assert restart_accounting(result("failed", "agent_exit"), True, 2) == (True, 3)
    assert restart_accounting(None, False, 0) == (True, 1)  # the agent is gone
    assert restart_accounting(None, True, 2) == (False, 2)
    assert restart_accounting(result("success", "prompt_response"), True, 4) == (False, 0)
    assert restart_accounting(result("failed", "timeout"), True, 4) == (False, 4)


def test_an_out_of_range_context_occupancy_costs_the_turn_only_that_field() -> None:
    from datetime import UTC, datetime

    from nostr_buzz.acp.types import TurnResult
    from nostr_buzz.bot.outputs import TurnIds, metric_payload

    at = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    event = chat(OWNER, content="hello")
    for used, size, kept in ((2**60, 200_000, (None, 200_000)), (-1, 5, (None, 5)), (7, 9, (7, 9))):
        result = TurnResult(
            "",
            "",
            None,
            "end_turn",
            "success",
            "prompt_response",
            None,
            "s",
            None,
            at,
            at,
            context_used=used,
            context_size=size,
        )
        payload = metric_payload(
            harness="goose",
            model=None,
            ids=TurnIds("c", "s", "t"),
            result=result,
            triggering=[event],
            manifest=None,
            started_at=at,
        )
        assert (payload.context_used_tokens, payload.context_window_tokens) == kept
