"""The agent edge's former home, kept for one release: what it held is now in
:mod:`nostr_buzz.acp` (the sans-I/O types, facts, adapter profiles, wire and per-session
state machine) and :mod:`nostr_buzz.io.agent_driver` (the driver's I/O); importing a name
from here still works.

The prompt text the driver writes itself stays here: :func:`workspace_section` (the
``<workspace>`` section) and :func:`standing_text` (the system-role text of a session).
"""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path
from typing import Any, Final

from nostr_buzz.core.compiler import standing_sections
from nostr_buzz.core.escape import escape_text
from nostr_buzz.core.turn_input import Standing

__all__ = ["WORKSPACE_BODY", "standing_text", "workspace_section"]

#: Where each moved name lives now (imported on first use: the driver imports this module).
_MOVED: Final = {
    "AgentDriver": "nostr_buzz.io.agent_driver",
    "DiagnosticCallback": "nostr_buzz.io.agent_driver",
    "PermissionPolicy": "nostr_buzz.io.agent_driver",
    "allow_during_turn": "nostr_buzz.io.agent_driver",
    "reject_always": "nostr_buzz.io.agent_driver",
    "AgentInfo": "nostr_buzz.acp.types",
    "PermissionRequest": "nostr_buzz.acp.types",
    "SessionStart": "nostr_buzz.acp.types",
    "StandingStrategy": "nostr_buzz.acp.types",
    "SteerOutcome": "nostr_buzz.acp.types",
    "TurnResult": "nostr_buzz.acp.types",
    "Outcome": "nostr_buzz.nips.nip_am",
    "TerminalEvidence": "nostr_buzz.nips.nip_am",
    "StopReason": "nostr_buzz.nips.nip_am",
}

WORKSPACE_BODY: Final = (
    "Your working directory is {cwd}. Keep the files you create and the repositories you "
    "clone there."
)


def workspace_section(cwd: str | Path | None) -> str | None:
    """``<workspace>`` for an absolute working directory other than ``/`` (written exactly as
    configured), else None."""
    if cwd is None:
        return None
    cwd = str(cwd)
    if not os.path.isabs(cwd) or cwd == "/":
        return None
    return f"<workspace>\n{escape_text(WORKSPACE_BODY.format(cwd=cwd))}\n</workspace>"


def standing_text(standing: Standing, cwd: str | None) -> str:
    """The system-role text: :func:`workspace_section` and the compiler's standing sections,
    joined by blank lines; "" when there is nothing to say."""
    workspace = workspace_section(cwd)
    parts = [workspace] if workspace is not None else []
    parts.extend(text for _, text in standing_sections(standing))
    return "\n\n".join(parts)


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)
