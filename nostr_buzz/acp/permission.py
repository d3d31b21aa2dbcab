"""The agent's ``session/request_permission``, answered without I/O (docs/acp-adapters.md,
"Permission requests").

A request is put to the policy only while a turn of the asking session runs (its prompt
unanswered and not being cancelled): real adapters also ask after the turn has ended, and
those requests are rejected without asking.  A policy that raises rejects, it never approves.
A policy may answer later (an awaitable decision: the owner is asked, docs/bot.md
"Permissions"): :func:`answer_later` waits for it, through the caller's ``hold``.
Approval picks the ``allow_once`` option (else ``allow_always``), rejection ``reject_once``
(else ``reject_always``, else the ``cancelled`` outcome).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nostr_buzz.core.permission import PermissionDecision

from . import wire
from .types import PermissionRequest

__all__ = ["Answer", "PermissionPolicy", "answer", "answer_later"]

#: ``policy(request) -> approve?`` (a decision also says why, for the diagnostic; an awaitable
#: one is decided later); called only while a turn of the session runs.
PermissionPolicy = Callable[
    [PermissionRequest], bool | PermissionDecision | Awaitable[PermissionDecision]
]
#: Wraps the wait for a later decision (the session knows the agent is waiting meanwhile).
Hold = Callable[[Awaitable[PermissionDecision]], Awaitable[PermissionDecision]]


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
            if inspect.isawaitable(verdict):  # answer_later's business: never approves here
                why = {"reason": "policy_failed"}
                error = "the policy answered later; use answer_later"
                _discard(verdict)
            elif isinstance(verdict, PermissionDecision):
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


async def answer_later(
    params: Any, *, running: bool, policy: PermissionPolicy, hold: Hold
) -> Answer:
    """:func:`answer` for a policy that may answer with an awaitable decision: it is awaited
    through ``hold``; a wait that raises rejects, like a policy that raises."""
    request = wire.permission_request(params, turn_running=running)
    if not request.turn_running:
        return answer(params, running=False, policy=policy)
    try:
        verdict = policy(request)
        if inspect.isawaitable(verdict):
            verdict = await hold(verdict)
    except Exception as exc:
        failure = exc

        def failed(_: PermissionRequest) -> bool:
            raise failure

        return answer(params, running=True, policy=failed)
    decided = verdict
    return answer(params, running=True, policy=lambda _: decided)


def _discard(verdict: Awaitable[Any]) -> None:
    close = getattr(verdict, "close", None)  # an unawaited coroutine: closed, no warning
    if callable(close):
        close()
