"""The typed facts of a session: what the agent reported (parsed from the wire by
:mod:`.wire`) and what the driver did or saw happen (prompt sent, cancel asked, time passed).
The session state machine (:mod:`.state`) consumes them; a turn's stream is made of them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import PermissionRequest, SteerOutcome, TurnResult

__all__ = [
    "AgentFact",
    "AgentGone",
    "CancelAsked",
    "Compaction",
    "CompactionChunk",
    "Cost",
    "CumulativeUsage",
    "Ended",
    "Fact",
    "ModelFailed",
    "Occupancy",
    "OwnTurnBegan",
    "PermissionAsked",
    "PromptAnswered",
    "PromptFailed",
    "PromptSent",
    "PromptUsage",
    "RunId",
    "SteerAnswered",
    "SteerSent",
    "Text",
    "Tick",
    "ToolCall",
    "Update",
]

# -- what the agent reports during a turn (session/update and extensions) ---------------------


class Update(msgspec.Struct, frozen=True):
    """Any ``session/update``: its ``sessionUpdate`` kind (None: a kind the schema does not
    know; activity, nothing more)."""

    kind: str | None


class Text(msgspec.Struct, frozen=True):
    """An ``agent_message_chunk`` of text (thoughts are never part of the reply)."""

    text: str
    message_id: str | None = None


class ToolCall(msgspec.Struct, frozen=True):
    """A ``tool_call`` (``started``) or ``tool_call_update``: its id, ACP kind, title and
    status as the agent gave them (the agent's words: a private session's records keep only
    the kind)."""

    tool_call_id: str | None = None
    kind: str | None = None
    title: str | None = None
    status: str | None = None
    started: bool = False


class ModelFailed(msgspec.Struct, frozen=True):
    """The agent says the model call failed and the turn's text is the error, not an answer
    (codex-acp: ``_meta.codex.threadStatus.type == "systemError"``; docs/acp-adapters.md,
    "Errors")."""


class Cost(msgspec.Struct, frozen=True):
    """A ``usage_update`` cost in USD (cumulative over the session)."""

    usd: float


class Occupancy(msgspec.Struct, frozen=True):
    """A ``usage_update``'s ``used``/``size``: context occupancy, never usage."""

    used: int | None
    size: int | None


class Compaction(msgspec.Struct, frozen=True):
    """A ``compaction_update``: the agent compacted (or is compacting) the session's context,
    replacing its history with a summary (docs/acp-adapters.md, "Compaction").  ``status`` is
    as sent (``in_progress``, ``completed``, ``failed``, ``cancelled`` or another word);
    ``summary`` is the text of its ``summary`` blocks when it sent some (None: left out, so
    the summary so far stands; ``""``: cleared)."""

    compaction_id: str
    status: str
    summary: str | None = None

    @property
    def completed(self) -> bool:
        return self.status == "completed"


class CompactionChunk(msgspec.Struct, frozen=True):
    """A ``compaction_summary_chunk``: text appended to a compaction's summary."""

    compaction_id: str
    text: str


class RunId(msgspec.Struct, frozen=True):
    """goose's ``session_info_update._meta.goose.activeRunId``."""

    run_id: str


class CumulativeUsage(msgspec.Struct, frozen=True):
    """goose's ``_goose/unstable/session/update`` counters (cumulative over the session), as
    sent: the usage tracker keeps only valid counts."""

    input_tokens: Any = None
    output_tokens: Any = None
    cache_read_tokens: Any = None
    cache_write_tokens: Any = None
    total_tokens: Any = None
    cost_usd: Any = None


class PromptUsage(msgspec.Struct, frozen=True):
    """``PromptResponse.usage``: this prompt's counts."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None


class PermissionAsked(msgspec.Struct, frozen=True):
    """A ``session/request_permission`` and what was decided."""

    request: PermissionRequest
    approved: bool


# -- how the prompt ended, as the wire tells ---------------------------------------------------


class PromptAnswered(msgspec.Struct, frozen=True):
    """The ``session/prompt`` response: its ``stopReason`` (None when it had none)."""

    stop_reason: str | None


class PromptFailed(msgspec.Struct, frozen=True):
    """An error response to ``session/prompt`` (the reason, never the prompt)."""

    error: str


class AgentGone(msgspec.Struct, frozen=True):
    """The connection ended: the agent exited or was closed."""

    error: str


# -- what the driver did -----------------------------------------------------------------------


class PromptSent(msgspec.Struct, frozen=True):
    """``session/prompt`` went out."""


class CancelAsked(msgspec.Struct, frozen=True):
    """The caller asked to cancel the running turn."""


class Tick(msgspec.Struct, frozen=True):
    """Time passed (the facts carry no clock: ``now`` comes with each)."""


class SteerSent(msgspec.Struct, frozen=True):
    """A native steer went out."""


class SteerAnswered(msgspec.Struct, frozen=True):
    """The agent's answer to a steer."""

    outcome: SteerOutcome


class OwnTurnBegan(msgspec.Struct, frozen=True):
    """The agent began a turn of its own (after answering a steer ``startedNewTurn``)."""


class Ended(msgspec.Struct, frozen=True):
    """The turn's last fact."""

    result: TurnResult


#: What the agent reports about a running turn.
AgentFact = (
    Update
    | Text
    | ToolCall
    | ModelFailed
    | Cost
    | Occupancy
    | RunId
    | CumulativeUsage
    | PromptUsage
    | Compaction
    | CompactionChunk
)
Fact = (
    AgentFact
    | PermissionAsked
    | PromptAnswered
    | PromptFailed
    | AgentGone
    | PromptSent
    | CancelAsked
    | Tick
    | SteerSent
    | SteerAnswered
    | OwnTurnBegan
    | Ended
)
