"""What the diagnostics (and so ``buzz run``'s stderr) may say about a private turn.

An agent working on a private message may repeat its text anywhere it writes: a tool call's
title or kind, an error message.  For the turns of a private conversation's queue channel
(:func:`nostr_buzz.nips.nip10.is_private_channel`) the records therefore carry only what the
bot itself names — the tool's ACP kind (any other value counts as ``other``) and the class of
an error — never the agent's free text.  Public turns keep the full text.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "AGENT_TEXT_KINDS",
    "TOOL_KINDS",
    "agent_error_class",
    "private_driver_payload",
    "result_error_class",
    "tool_kind",
]

#: ACP's tool kinds (``ToolKind``): the only kinds a private turn's records name.
TOOL_KINDS: Final = frozenset(
    {
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    }
)

#: The driver's records that may carry the agent's free text (a tool's title and kind, an
#: error's message).
AGENT_TEXT_KINDS: Final = frozenset(
    {"permission_decision", "permission_policy_failed", "tool_call"}
)

_JSON_RPC_CODE: Final = re.compile(r"JSON-RPC error (-?\d{1,6})\b")
_CLASS_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def tool_kind(value: object) -> str | None:
    """An ACP tool kind as a private record may name it: itself, ``other``, or None."""
    if value is None:
        return None
    return value if isinstance(value, str) and value in TOOL_KINDS else "other"


def result_error_class(error: str | None, terminal_evidence: str) -> str:
    """The class of a failed turn's error: the JSON-RPC error code the agent answered with,
    else how the turn ended (``timeout``, ``agent_exit``, ``error``…)."""
    match = _JSON_RPC_CODE.match(error or "")
    if match is not None:
        return f"JSON-RPC error {int(match.group(1))}"
    return terminal_evidence


def agent_error_class(error: str) -> str:
    """The class of an :class:`~nostr_buzz.errors.AgentError`'s message (a refused session,
    say): the JSON-RPC error code the agent answered with, ``timeout``, else ``error``.  The
    message quotes the agent's own text, which may repeat what a private turn told it."""
    match = _JSON_RPC_CODE.search(error)
    if match is not None:
        return f"JSON-RPC error {int(match.group(1))}"
    return "timeout" if "no answer in time" in error else "error"


def _exception_class(text: object) -> str:
    """The class name a ``repr(exc)`` starts with (``ValueError('…')`` → ``ValueError``)."""
    match = _CLASS_NAME.match(text) if isinstance(text, str) else None
    return match.group(0) if match is not None else "error"


def private_driver_payload(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A driver diagnostic's payload for a session that is not known to be public: a
    permission decision or a tool call keeps its decision or status and the tool's ACP kind
    (no title); a failed
    policy keeps the error's class.  Other kinds carry no text of the agent's."""
    if kind == "permission_decision" or kind == "tool_call":
        kept = {k: v for k, v in payload.items() if k != "title"}
        kept["toolKind"] = tool_kind(payload.get("toolKind"))
        return kept
    if kind == "permission_policy_failed":
        return {**payload, "error": _exception_class(payload.get("error"))}
    return payload
