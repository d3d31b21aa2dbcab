"""The agent edge's former home, kept for one release: what it held is now in
:mod:`nostr_buzz.acp` (the sans-I/O types, facts, adapter profiles, wire and per-session
state machine) and :mod:`nostr_buzz.io.agent_driver` (the driver's I/O); importing a name
from here still works.

The prompt text it once wrote is the compiler's now
(:func:`nostr_buzz.core.compiler.standing_text`, ``<workspace>`` included), re-exported here too.
"""

from __future__ import annotations

from nostr_buzz.acp.types import (
    AgentInfo,
    PermissionRequest,
    SessionStart,
    StandingStrategy,
    SteerOutcome,
    TurnResult,
)
from nostr_buzz.core.compiler import WORKSPACE_BODY, standing_text, workspace_section
from nostr_buzz.io.agent_driver import (
    AgentDriver,
    DiagnosticCallback,
    PermissionPolicy,
    allow_during_turn,
    reject_always,
)
from nostr_buzz.nips.nip_am import Outcome, StopReason, TerminalEvidence

__all__ = [
    "WORKSPACE_BODY",
    "AgentDriver",
    "AgentInfo",
    "DiagnosticCallback",
    "Outcome",
    "PermissionPolicy",
    "PermissionRequest",
    "SessionStart",
    "StandingStrategy",
    "SteerOutcome",
    "StopReason",
    "TerminalEvidence",
    "TurnResult",
    "allow_during_turn",
    "reject_always",
    "standing_text",
    "workspace_section",
]
