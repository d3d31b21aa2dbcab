"""What differs between ACP adapters, as data (docs/acp-adapters.md).

Every adapter-specific choice of the agent edge is a field of :class:`AdapterProfile`; the
driver and the session state machine read the profile and never test an agent's name.  An
agent gets the profile of the first known adapter its ``initialize`` name mentions
(:func:`profile_for`), else :data:`GENERIC`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal, get_args

from nostr_buzz.core.choices import check_choice

from .types import AgentInfo, ReopenMethod, StandingStrategy

__all__ = [
    "ASKING_MODES",
    "CLAUDE",
    "CODEX",
    "GENERIC",
    "GOOSE",
    "GOOSE_STEER",
    "GOOSE_SYSTEM_PROMPT",
    "GOOSE_UPDATE",
    "SESSION_STEERING",
    "AdapterProfile",
    "choose_strategy",
    "profile_for",
    "reopen_method",
    "steer_route",
]

#: The session modes, by advertised id, in which an adapter asks the client before a tool
#: runs (docs/acp-adapters.md, "Permission modes"): claude-agent-acp's and gemini-cli's
#: ``default``, codex-acp's ``read-only``.  Their defaults (``auto``, ``agent``) let the adapter
#: decide on its own.
ASKING_MODES: Final = ("default", "read-only")
GOOSE_SYSTEM_PROMPT: Final = "_goose/unstable/session/system-prompt/set"
GOOSE_STEER: Final = "_goose/unstable/session/steer"
GOOSE_UPDATE: Final = "_goose/unstable/session/update"
SESSION_STEERING: Final = "_session/steering"

#: What the agent's usage reports mean: per-prompt ``PromptResponse.usage`` (and USD
#: ``usage_update.cost``, cumulative), or goose's cumulative counters notification.
UsageMeaning = Literal["per_prompt", "cumulative_notification"]


@dataclass(frozen=True)
class AdapterProfile:
    """One adapter's behaviour on the wire (docs/acp-adapters.md)."""

    name: str
    #: A standing-context delivery tried before any capability (goose's ``system-prompt/set``
    #: after ``session/new``; any error of it falls back to legacy).
    standing: StandingStrategy | None = None
    #: ``_meta.systemPrompt.append`` in ``session/new`` is honoured even when not advertised
    #: (claude-agent-acp: "Standing context").
    claude_meta: bool = False
    #: A steer method that needs the agent's current run id (goose: ``expectedRunId``, from
    #: ``session_info_update._meta.goose.activeRunId``); any success answer means injected.
    run_id_steer: str | None = None
    #: The session stays usable after ``session/cancel`` (claude-agent-acp's does not: "Cancel:
    #: claude's session does not survive it").
    survives_cancel: bool = True
    #: A failed turn retires its session (codex-acp: a prompt sent while its own turn is still
    #: ending is never answered; every agent, to be safe).
    retire_after_failure: bool = True
    #: A turn after a cancel that ends within this many seconds with no text, no tool call and
    #: no usage is the broken session answering at once (claude-agent-acp), not an answer.
    hollow_window: float = 2.0
    usage: UsageMeaning = "per_prompt"
    #: A session of an earlier agent process may be continued (``session/resume`` where the
    #: agent advertises it, else ``session/load``): off for an adapter whose continued
    #: sessions are known not to hold their history (docs/acp-adapters.md, "Sessions that
    #: survive a restart").
    resumes_sessions: bool = True

    def __post_init__(self) -> None:
        if self.standing is not None:
            check_choice(self.standing, get_args(StandingStrategy), "AdapterProfile standing")
        check_choice(self.usage, get_args(UsageMeaning), "AdapterProfile usage")


GENERIC: Final = AdapterProfile("generic")
GOOSE: Final = replace(
    GENERIC,
    name="goose",
    standing="goose",
    run_id_steer=GOOSE_STEER,
    usage="cumulative_notification",
)
CLAUDE: Final = replace(GENERIC, name="claude", claude_meta=True, survives_cancel=False)
CODEX: Final = replace(GENERIC, name="codex")


def profile_for(agent_name: str | None) -> AdapterProfile:
    """The profile of the agent that ``initialize`` named (goose only by its exact name)."""
    name = (agent_name or "").lower()
    if name == "goose":
        return GOOSE
    if "claude" in name:
        return CLAUDE
    if "codex" in name:
        return CODEX
    return GENERIC


def choose_strategy(profile: AdapterProfile, info: AgentInfo) -> StandingStrategy:
    """How the standing context travels, by the first delivery the agent supports: the
    profile's own, the standard ``systemPrompt`` capability, claude's ``_meta`` (the profile's,
    or advertised as ``_meta.systemPrompt.append``), a top-level ``systemPrompt`` for protocol
    ≥ 2, else legacy (compiled into the first prompt)."""
    if profile.standing is not None:
        return profile.standing
    if info.system_prompt_capability or (
        info.protocol_version >= 2 and not (profile.claude_meta or info.system_prompt_append)
    ):
        return "system_prompt"
    if profile.claude_meta or info.system_prompt_append:
        return "claude_meta"
    return "legacy"


def reopen_method(profile: AdapterProfile, info: AgentInfo) -> ReopenMethod | None:
    """How a session of an earlier agent process is continued: ``session/resume`` where
    advertised (no history replayed), else ``session/load`` (the history is replayed first and
    kept out of replies and usage), else None (a new session, with the standing context)."""
    if not profile.resumes_sessions:
        return None
    if info.session_resume:
        return "resume"
    if info.load_session:
        return "load"
    return None


def steer_route(
    profile: AdapterProfile, info: AgentInfo | None, run_id: str | None
) -> tuple[str, str | None] | None:
    """(method, run id) of the native steer transport, or None (docs/bot.md, "Steering"): the
    profile's run-id steer while the agent named its current run, else the standard
    ``_session/steering`` where advertised."""
    if info is None:
        return None
    if profile.run_id_steer is not None and run_id is not None:
        return profile.run_id_steer, run_id
    if info.steering_supported:
        return SESSION_STEERING, None
    return None
