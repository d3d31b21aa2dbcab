"""What the agent edge says to its callers: the agent, a session, a permission request, a
turn's result (docs/bot.md, "Driving an agent over ACP").  Plain values, no I/O."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from nostr_buzz.core.usage import UsageRecord
from nostr_buzz.nips.nip_am import Outcome, StopReason, TerminalEvidence

__all__ = [
    "AgentInfo",
    "Ending",
    "Outcome",
    "PermissionRequest",
    "ReopenMethod",
    "SessionStart",
    "StandingStrategy",
    "SteerOutcome",
    "TerminalEvidence",
    "TurnResult",
]

StandingStrategy = Literal["goose", "claude_meta", "system_prompt", "legacy"]
#: How an earlier session is continued (docs/acp-adapters.md, "Sessions that survive a restart").
ReopenMethod = Literal["resume", "load"]
SteerOutcome = Literal["injected", "started_new_turn", "failed", "released"]


class AgentInfo(msgspec.Struct, frozen=True):
    """What ``initialize`` told about the agent."""

    protocol_version: int
    name: str | None
    version: str | None
    capabilities: dict[str, Any]
    steering_supported: bool
    system_prompt_append: bool
    pid: int
    #: ``sessionCapabilities.systemPrompt``: the standard ``systemPrompt {mode, content}``.
    system_prompt_capability: bool = False
    #: ``sessionCapabilities.close``: ``session/close`` releases a session.
    session_close: bool = False
    #: ``sessionCapabilities.resume``: ``session/resume`` continues a session without replay.
    session_resume: bool = False
    #: ``loadSession``: ``session/load`` continues a session, replaying its history first.
    load_session: bool = False


class PermissionRequest(msgspec.Struct, frozen=True):
    """A ``session/request_permission`` of the agent, as a policy sees it."""

    session_id: str
    title: str
    kind: str | None
    tool_call_id: str | None
    #: A turn of this session is running: its prompt is unanswered and not being cancelled
    #: (the policy is only asked when it is).
    turn_running: bool


class SessionStart(msgspec.Struct, frozen=True):
    """A new ACP session and how its standing context travels.

    ``system_prompt_support`` and ``standing_context_sent`` go into the session's first
    :class:`~nostr_buzz.core.turn_input.TurnInput`; legacy delivery means the compiler prepends
    the standing sections to that first turn.
    """

    session_id: str
    strategy: StandingStrategy
    #: How the session was continued from an earlier run (None: opened new).
    reopened: ReopenMethod | None = None

    @property
    def system_prompt_support(self) -> bool:
        return self.strategy != "legacy"

    @property
    def standing_context_sent(self) -> bool:
        """Delivered beside the prompt, or already in the history of a continued session."""
        return self.strategy != "legacy" or self.reopened is not None


class Ending(msgspec.Struct, frozen=True):
    """How a turn ended, before its text and usage are attached."""

    stop_reason: StopReason
    outcome: Outcome
    evidence: TerminalEvidence
    native: str | None = None
    error: str | None = None


class TurnResult(msgspec.Struct, frozen=True):
    """How one ``session/prompt`` ended, in NIP-AM terms (docs/bot.md, "Driving an agent over
    ACP")."""

    reply: str
    final_message: str
    usage: UsageRecord | None
    stop_reason: StopReason
    outcome: Outcome
    terminal_evidence: TerminalEvidence
    native_stop_reason: str | None
    adapter_session_id: str
    run_id: str | None
    started_at: datetime
    ended_at: datetime
    error: str | None = None
    #: The last ``usage_update`` ``used``/``size`` of the turn: context occupancy (tokens).
    context_used: int | None = None
    context_size: int | None = None
    #: The turn's position in its session (``usage.turn_seq`` when usage was observed; the
    #: next number of the same sequence when it was not).
    turn_seq: int | None = None
    #: The model that answered, when the agent said (an in-process agent's ``AgentReply``).
    model: str | None = None
    #: The failure's class when the agent raised (an in-process agent's exception): all that a
    #: private conversation's ``turn_failed`` shows of it.
    error_class: str | None = None
    #: UTF-8 bytes of the agent's text dropped past the reply cap (``[agent] max_reply_bytes``):
    #: the reply is cut there, and says so (docs/bot.md, "Bounded replies").
    reply_dropped_bytes: int = 0
    #: Context compactions the agent completed in this turn (or, idle, since the last one),
    #: and the summary of the last of them when the agent sent one (docs/acp-adapters.md,
    #: "Compaction"; at most ``acp.wire.MAX_SUMMARY_BYTES``).
    compactions: int = 0
    compaction_summary: str | None = None

    @classmethod
    def of(
        cls,
        ending: Ending,
        *,
        reply: str,
        usage: UsageRecord | None,
        session_id: str,
        started_at: datetime,
        ended_at: datetime,
        final_message: str | None = None,
        run_id: str | None = None,
        **details: Any,
    ) -> TurnResult:
        """The result of a turn that ended as ``ending`` (``final_message``: the reply unless
        given; ``details``: the optional fields)."""
        return cls(
            reply,
            reply if final_message is None else final_message,
            usage,
            ending.stop_reason,
            ending.outcome,
            ending.evidence,
            ending.native,
            session_id,
            run_id,
            started_at,
            ended_at,
            ending.error,
            **details,
        )
