"""The agent's ``session/request_permission``, answered without I/O (docs/acp-adapters.md,
"Permission requests").

A request is put to the policy only while a turn of the asking session runs (its prompt
unanswered and not being cancelled): real adapters also ask after the turn has ended, and
those requests are rejected without asking.  A policy that raises rejects, it never approves.
Approval picks the ``allow_once`` option (else ``allow_always``), rejection ``reject_once``
(else ``reject_always``, else the ``cancelled`` outcome).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nostr_buzz.core.permission import PermissionDecision

from . import wire
from .types import PermissionRequest

__all__ = ["Answer", "PermissionPolicy", "answer"]

#: ``policy(request) -> approve?`` (a decision also says why, for the diagnostic); called only
#: while a turn of the session runs.
PermissionPolicy = Callable[[PermissionRequest], bool | PermissionDecision]


@dataclass(frozen=True)
class Answer:
    """The JSON-RPC result, the request as the policy saw it, the ``permission_decision``
    diagnostic's payload, and the policy's error when it raised."""

    result: dict[str, Any]
    request: PermissionRequest
    payload: dict[str, Any]
    policy_error: str | None = None


def answer(params: Any, *, running: bool, policy: PermissionPolicy) -> Answer:
    """Decide one request (``running``: a turn of the asking session runs)."""
    request = wire.permission_request(params, turn_running=running)
    approve, why, error = False, {"reason": "no_live_turn"}, None
    if request.turn_running:
        try:
            verdict = policy(request)
        except Exception as exc:  # a broken policy rejects, it never approves
            why, error = {"reason": "policy_failed"}, repr(exc)
        else:
            if isinstance(verdict, PermissionDecision):
                approve, why = verdict.approve, verdict.payload()
            else:
                approve, why = verdict is True, {"reason": "policy"}
    result, approved = wire.permission_answer(params, approve)
    if approve and not approved:
        why = {"reason": "no_allow_option"}
    payload = {
        "decision": "approved" if approved else "rejected",
        "title": request.title,
        "toolKind": request.kind,
        "turnRunning": request.turn_running,
        **why,
    }
    return Answer(result, request, payload, error)
