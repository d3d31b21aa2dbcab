"""The agent edge without I/O, in the shape of h11/wsproto (docs/architecture.md).

* :mod:`.types` — what callers see: :class:`AgentInfo`, :class:`SessionStart`,
  :class:`PermissionRequest`, :class:`TurnResult`;
* :mod:`.facts` — the typed facts of a session: what the agent reported (text, tool calls,
  usage, permission asked…) and what the driver did (prompt sent, cancel asked, steer sent…);
* :mod:`.profiles` — every adapter-specific choice, as data (docs/acp-adapters.md);
* :mod:`.wire` — ACP frames ↔ typed values;
* :mod:`.state` — one session's state machine: ``receive(fact, now) → actions``.

Nothing here reads a clock, awaits or touches a process: the driver that does
(:class:`nostr_buzz.io.agent_driver.AgentDriver`) feeds the facts in with the time and
performs the actions.
"""

from __future__ import annotations

from .profiles import AdapterProfile, profile_for
from .types import AgentInfo, PermissionRequest, SessionStart, SteerOutcome, TurnResult

__all__ = [
    "AdapterProfile",
    "AgentInfo",
    "PermissionRequest",
    "SessionStart",
    "SteerOutcome",
    "TurnResult",
    "profile_for",
]
