"""The sessions of one agent process and everything the agent sends them.

Each ACP session has its state machine (:class:`nostr_buzz.acp.state.Session`); every frame
the agent sends becomes facts (:mod:`nostr_buzz.acp.wire`) fed to its session with the loop's
time.  :meth:`SessionHub.feed` does at once what needs no I/O (usage counting, the prompt's stream,
the usage split of the agent's own turn) and wakes whoever waits on the session; the actions
that need the wire (``session/cancel``, retirement) go back to the driver.  Permission
requests are answered here (:mod:`nostr_buzz.acp.permission`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp.exceptions import RequestError

from nostr_buzz.acp import permission, wire
from nostr_buzz.acp.facts import (
    AgentFact,
    AgentGone,
    Cost,
    CumulativeUsage,
    Fact,
    PermissionAsked,
    PromptFailed,
    ToolCall,
)
from nostr_buzz.acp.permission import PermissionPolicy
from nostr_buzz.acp.profiles import GENERIC, GOOSE_UPDATE, AdapterProfile
from nostr_buzz.acp.state import (
    Action,
    Count,
    Report,
    Session,
    SplitUsage,
    Timeouts,
    count_usage,
)
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.io.diagnostics import AgentDiagnosticKind
from nostr_buzz.io.diagnostics import DiagnosticCallback as DiagnosticCallback  # re-exported

__all__ = ["DiagnosticCallback", "SessionHub"]


@dataclass(eq=False, repr=False)
class SessionHub:
    """The sessions of the running agent process (see the module docstring)."""

    usage: UsageTracker
    timeouts: Timeouts
    policy: PermissionPolicy
    on_diagnostic: DiagnosticCallback | None
    #: How many times the agent process was started: part of a session's usage key.
    generation: Callable[[], int]
    max_reply_bytes: int | None = None
    profile: AdapterProfile = field(default=GENERIC, init=False)
    sessions: dict[str, Session] = field(default_factory=dict, init=False)
    wakes: dict[str, asyncio.Event] = field(default_factory=dict, init=False)
    #: The running prompt of a session: its answer decides whether a turn runs.
    prompts: dict[str, asyncio.Future[Any]] = field(default_factory=dict, init=False)
    #: Where the facts of a session's running prompt go (its stream).
    on_fact: dict[str, Callable[[Fact], None]] = field(default_factory=dict, init=False)
    _unread: dict[str, tuple[asyncio.Future[Any], Session]] = field(
        default_factory=dict, init=False
    )
    #: A prompt's usage that its agent's own next turn ended early.
    split: dict[str, UsageRecord | None] = field(default_factory=dict, init=False)
    #: Sessions being loaded: what the agent replays of their history is no turn's.
    replaying: set[str] = field(default_factory=set, init=False)

    def session(self, session_id: str) -> Session:
        """The session's state machine (a new one for an id not seen yet)."""
        session = self.sessions.get(session_id)
        if session is None:
            session = Session(self.profile, self.timeouts, self.max_reply_bytes)
            self.sessions[session_id] = session
            self.wakes[session_id] = asyncio.Event()
        return session

    def forget(self, session_id: str) -> None:
        """Everything kept of an idle session goes (it was closed), its usage counters too: a
        continued session's baselines are unknown until the agent reports, as after a restart."""
        for table in (self.sessions, self.wakes, self.prompts, self.on_fact, self._unread):
            table.pop(session_id, None)
        self.split.pop(session_id, None)
        self.replaying.discard(session_id)
        self.usage.forget(self.key(session_id))

    def key(self, session_id: str) -> str:
        """The usage tracker's key of a session of the current agent process.

        Agents may reuse session ids across processes (the demo agent numbers them from 1): a
        restarted agent's session must start from a zero baseline and ``turn_seq`` 1, never
        continue the dead process's counters.
        """
        return f"{self.generation()}:{session_id}"

    def lost(self, error: str) -> None:
        """The agent is gone: every running prompt ends, every session is forgotten."""
        for session_id, session in self.sessions.items():
            self.feed(session_id, session, AgentGone(error))
        self.sessions.clear()

    def watch(self, session_id: str, session: Session, prompt: asyncio.Future[Any]) -> None:
        """``prompt`` is the session's running ``session/prompt``: its answer is read as soon
        as it is there (:meth:`read_answer`)."""
        self.prompts[session_id] = prompt
        self._unread[session_id] = (prompt, session)
        prompt.add_done_callback(lambda _: self.read_answer(session_id))

    def read_answer(self, session_id: str) -> None:
        """Feed the prompt's answer once it has arrived, before anything the agent sent after
        it: the connection may hand on the next frames before the answer's callbacks run."""
        unread = self._unread.get(session_id)
        if unread is None or not unread[0].done():
            return
        del self._unread[session_id]
        prompt, session = unread
        if prompt.cancelled():
            return
        exc = prompt.exception()
        if exc is None:
            answered, usage = wire.prompt_response(prompt.result())
            if usage is not None:
                self.feed(session_id, session, usage)
            self.feed(session_id, session, answered)
        elif isinstance(exc, ConnectionError | OSError):
            self.feed(session_id, session, AgentGone(wire.describe(exc)))
        else:
            self.feed(session_id, session, PromptFailed(wire.describe(exc)))

    def feed(self, session_id: str, session: Session, fact: Fact) -> list[Action]:
        """Give ``fact`` to the session, do what can be done at once, return the rest."""
        now = asyncio.get_running_loop().time()
        later: list[Action] = []
        for action in session.receive(fact, now):
            if isinstance(action, Count):
                count_usage(self.usage, self.key(session_id), action.fact)
            elif isinstance(action, Report):
                self.report(session_id, action.fact)
            elif isinstance(action, SplitUsage):
                key = self.key(session_id)
                if action.close_prompt:
                    self.split[session_id] = self.usage.end_turn(key)
                self.usage.begin_turn(key)
            else:
                later.append(action)
        wake = self.wakes.get(session_id)
        if wake is not None:
            wake.set()
        return later

    async def handle(self, method: str, params: Any, is_notification: bool) -> Any:
        """Everything the agent sends us: notifications and requests."""
        if method == "session/update":
            self._agent_facts(params, wire.session_update_facts(params))
            return None
        if method == GOOSE_UPDATE:
            self._agent_facts(params, wire.goose_update_facts(params))
            return None
        if is_notification:
            return None
        if method == "session/request_permission":
            return await self._permission_answer(params)
        raise RequestError.method_not_found(method)

    def _agent_facts(self, params: Any, facts: Sequence[AgentFact]) -> None:
        session_id = wire.session_of(params)
        if session_id is None or session_id in self.replaying:
            return
        self.read_answer(session_id)
        session = self.sessions.get(session_id)
        if session is None:  # not a session of ours: its usage is still counted
            for fact in facts:
                if isinstance(fact, Cost | CumulativeUsage):
                    count_usage(self.usage, self.key(session_id), fact)
            return
        for fact in facts:
            if isinstance(fact, ToolCall) and fact.started:
                self.diagnostic("tool_call", session_id, tool_call_payload(fact))
            self.feed(session_id, session, fact)

    async def _permission_answer(self, params: Any) -> dict[str, Any]:
        """Ask the policy (only while a turn of the session runs), answer, and report.  A
        decision the policy gives later (the owner is asked) is awaited with the session
        knowing it: its idle timeout waits too."""
        session_id = wire.session_of(params) or ""
        self.read_answer(session_id)
        session = self.sessions.get(session_id)
        prompt = self.prompts.get(session_id)
        # Running: the prompt is unanswered (the agent may ask after its answer, which the
        # connection has already resolved) and not being cancelled.
        running = session is not None and session.running
        running = running and prompt is not None and not prompt.done()

        async def hold(later: Awaitable[PermissionDecision]) -> PermissionDecision:
            assert session is not None
            session.ask_started()
            try:
                return await later
            finally:
                session.ask_ended(asyncio.get_running_loop().time())

        decided = await permission.answer_later(
            params, running=running, policy=self.policy, hold=hold
        )
        if running:
            approved = decided.payload["decision"] == "approved"
            self.report(session_id, PermissionAsked(decided.request, approved))
        if decided.policy_error is not None:
            error = {"error": decided.policy_error}
            self.diagnostic("permission_policy_failed", session_id, error)
        self.diagnostic("permission_decision", session_id or None, decided.payload)
        return decided.result

    def report(self, session_id: str, fact: Fact) -> None:
        """Hand ``fact`` to the stream of the session's running prompt, if any."""
        callback = self.on_fact.get(session_id)
        if callback is not None:
            callback(fact)

    def diagnostic(
        self, kind: AgentDiagnosticKind, session_id: str | None, payload: dict[str, Any]
    ) -> None:
        if self.on_diagnostic is not None:
            self.on_diagnostic(kind, session_id, payload)


def tool_call_payload(call: ToolCall) -> dict[str, Any]:
    """A ``tool_call`` diagnostic: the call's id, ACP kind, title and status as the agent
    gave them (a private session's keeps only the kind: ``bot/privacy.py``)."""
    return {
        "toolCallId": call.tool_call_id,
        "toolKind": call.kind,
        "title": call.title,
        "status": call.status,
    }
