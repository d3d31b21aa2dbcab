"""The typed facts of a session: what the agent reported (parsed from the wire by
:mod:`.wire`) and what the driver did or saw happen (prompt sent, cancel asked, time passed).
The session state machine (:mod:`.state`) consumes them; a turn's stream is made of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Update:
    """Any ``session/update``: its ``sessionUpdate`` kind (None: a kind the schema does not
    know; activity, nothing more)."""

    kind: str | None


@dataclass(frozen=True)
class Text:
    """An ``agent_message_chunk`` of text (thoughts are never part of the reply)."""

    text: str
    message_id: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """A ``tool_call`` (``started``) or ``tool_call_update``: its id, ACP kind, title and
    status as the agent gave them (the agent's words: a private session's records keep only
    the kind)."""

    tool_call_id: str | None = None
    kind: str | None = None
    title: str | None = None
    status: str | None = None
    started: bool = False


@dataclass(frozen=True)
class ModelFailed:
    """The agent says the model call failed and the turn's text is the error, not an answer
    (codex-acp: ``_meta.codex.threadStatus.type == "systemError"``; docs/acp-adapters.md,
    "Errors")."""


@dataclass(frozen=True)
class Cost:
    """A ``usage_update`` cost in USD (cumulative over the session)."""

    usd: float


@dataclass(frozen=True)
class Occupancy:
    """A ``usage_update``'s ``used``/``size``: context occupancy, never usage."""

    used: int | None
    size: int | None


@dataclass(frozen=True)
class Compaction:
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


@dataclass(frozen=True)
class CompactionChunk:
    """A ``compaction_summary_chunk``: text appended to a compaction's summary."""

    compaction_id: str
    text: str


@dataclass(frozen=True)
class RunId:
    """goose's ``session_info_update._meta.goose.activeRunId``."""

    run_id: str


@dataclass(frozen=True)
class CumulativeUsage:
    """goose's ``_goose/unstable/session/update`` counters (cumulative over the session), as
    sent: the usage tracker keeps only valid counts."""

    input_tokens: Any = None
    output_tokens: Any = None
    cache_read_tokens: Any = None
    cache_write_tokens: Any = None
    total_tokens: Any = None
    cost_usd: Any = None


@dataclass(frozen=True)
class PromptUsage:
    """``PromptResponse.usage``: this prompt's counts."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None


@dataclass(frozen=True)
class PermissionAsked:
    """A ``session/request_permission`` and what was decided."""

    request: PermissionRequest
    approved: bool


# -- how the prompt ended, as the wire tells ---------------------------------------------------


@dataclass(frozen=True)
class PromptAnswered:
    """The ``session/prompt`` response: its ``stopReason`` (None when it had none)."""

    stop_reason: str | None


@dataclass(frozen=True)
class PromptFailed:
    """An error response to ``session/prompt`` (the reason, never the prompt)."""

    error: str


@dataclass(frozen=True)
class AgentGone:
    """The connection ended: the agent exited or was closed."""

    error: str


# -- what the driver did -----------------------------------------------------------------------


@dataclass(frozen=True)
class PromptSent:
    """``session/prompt`` went out."""


@dataclass(frozen=True)
class CancelAsked:
    """The caller asked to cancel the running turn."""


@dataclass(frozen=True)
class Tick:
    """Time passed (the facts carry no clock: ``now`` comes with each)."""


@dataclass(frozen=True)
class SteerSent:
    """A native steer went out."""


@dataclass(frozen=True)
class SteerAnswered:
    """The agent's answer to a steer."""

    outcome: SteerOutcome


@dataclass(frozen=True)
class OwnTurnBegan:
    """The agent began a turn of its own (after answering a steer ``startedNewTurn``)."""


@dataclass(frozen=True)
class Ended:
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
