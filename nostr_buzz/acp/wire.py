"""ACP frames ↔ typed values: the params nostr-buzz sends and the facts it reads back
(``agent-client-protocol``'s schema, v1; no I/O).

Raw dicts are built and read here rather than through the package's client classes because
the agent edge puts fields the v1 schema does not know on the wire (a top-level
``systemPrompt`` for protocol ≥ 2) and reads extension notifications (goose's cumulative
counters) raw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from acp import schema
from acp.exceptions import RequestError
from acp.meta import PROTOCOL_VERSION
from pydantic import ValidationError

from nostr_buzz.nips.nip_am import StopReason
from nostr_buzz.text.unicode import utf8_head

from .facts import (
    AgentFact,
    Compaction,
    CompactionChunk,
    Cost,
    CumulativeUsage,
    ModelFailed,
    Occupancy,
    PromptAnswered,
    PromptUsage,
    RunId,
    Text,
    ToolCall,
    Update,
)
from .profiles import ASKING_MODES
from .types import AgentInfo, PermissionRequest, StandingStrategy, SteerOutcome

__all__ = [
    "METHOD_NOT_FOUND",
    "agent_info",
    "asking_mode",
    "compaction_facts",
    "describe",
    "goose_system_prompt_params",
    "goose_update_facts",
    "initialize_params",
    "new_session_params",
    "permission_answer",
    "permission_request",
    "prompt_params",
    "prompt_response",
    "session_id_of",
    "session_of",
    "session_update_facts",
    "steer_answer",
    "steer_error",
    "steer_params",
    "stop_reason",
]

METHOD_NOT_FOUND: Final = -32601
#: The longest compaction id kept, and the most summary text one update carries into a fact
#: (an agent's words: bounded whatever it sends; the turn caps the summary it keeps again).
MAX_COMPACTION_ID: Final = 256
MAX_SUMMARY_BYTES: Final = 65_536
#: The most of a tool call's title one fact carries.
MAX_TOOL_TITLE_BYTES: Final = 512
#: The ACP stop reasons a metric names as they are.
_KEPT_STOP_REASONS: Final[tuple[StopReason, ...]] = ("end_turn", "max_tokens", "cancelled")


def stop_reason(native: str) -> StopReason:
    """The metric's stop reason: ``refusal``, ``max_turn_requests`` and any reason unknown to
    the schema are ``unknown`` (the agent answered normally)."""
    for kept in _KEPT_STOP_REASONS:
        if native == kept:
            return kept
    return "unknown"


def _flag(meta: object, *path: str) -> bool:
    """``meta[path…] is True``, tolerating any shape."""
    node = meta
    for key in path:
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return node is True


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# -- initialize and sessions -------------------------------------------------------------------


def initialize_params(client_version: str) -> dict[str, Any]:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "clientCapabilities": {
            # Compaction becomes a fact of the session (docs/acp-adapters.md, "Compaction");
            # notices are what they are, live words that are no part of the reply.
            "session": {"compaction": {}, "notices": {}},
            # goose sends its cumulative counters only to clients that opt in.
            "_meta": {"goose": {"customNotifications": True}},
        },
        "clientInfo": {"name": "nostr-buzz", "version": client_version},
    }


def agent_info(raw: Any, pid: int) -> AgentInfo:
    """The ``initialize`` result; raises pydantic's ``ValidationError`` when malformed."""
    response = schema.InitializeResponse.model_validate(raw)
    meta = response.field_meta or {}
    caps = response.agent_capabilities
    raw_caps = raw.get("agentCapabilities") if isinstance(raw, dict) else None
    session_caps = raw_caps.get("sessionCapabilities") if isinstance(raw_caps, dict) else None
    if not isinstance(session_caps, dict):
        session_caps = {}
    return AgentInfo(
        protocol_version=response.protocol_version,
        name=response.agent_info.name if response.agent_info else None,
        version=response.agent_info.version if response.agent_info else None,
        capabilities=caps.model_dump(mode="json", by_alias=True) if caps else {},
        steering_supported=_flag(meta, "steering", "supported"),
        system_prompt_append=_flag(meta, "systemPrompt", "append"),
        pid=pid,
        system_prompt_capability=isinstance(session_caps.get("systemPrompt"), dict),
        session_close=isinstance(session_caps.get("close"), dict),
        session_resume=isinstance(session_caps.get("resume"), dict),
        load_session=bool(caps.load_session) if caps else False,
    )


def new_session_params(
    cwd: str,
    standing: str,
    strategy: StandingStrategy,
    info: AgentInfo,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``session/new`` with the MCP servers offered to the session (the bot's tool server,
    docs/bot.md) and the standing context in the strategy's field (goose's and legacy delivery
    put nothing here)."""
    params: dict[str, Any] = {"cwd": cwd, "mcpServers": [dict(s) for s in mcp_servers]}
    if not standing:
        return params
    if strategy == "system_prompt" and info.system_prompt_capability:
        params["systemPrompt"] = {"mode": "append", "content": [{"type": "text", "text": standing}]}
    elif strategy == "system_prompt":  # protocol ≥ 2 without the capability
        params["systemPrompt"] = standing
    elif strategy == "claude_meta":
        params["_meta"] = {"systemPrompt": {"append": standing}}
    return params


def reopen_params(
    session_id: str,
    cwd: str,
    standing: str,
    strategy: StandingStrategy,
    info: AgentInfo,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``session/resume`` or ``session/load`` of ``session_id``: the same fields as
    ``session/new`` (the standing context again where it travels beside the history: an
    adapter keeps it in the process, not in the session it stores), and the MCP servers
    offered again (an adapter starts them per process)."""
    params = new_session_params(cwd, standing, strategy, info, mcp_servers)
    return {**params, "sessionId": session_id}


def session_id_of(raw: Any) -> str:
    """The ``session/new`` result's id; raises ``ValidationError`` when malformed."""
    return schema.NewSessionResponse.model_validate(raw).session_id


def asking_mode(raw: Any) -> tuple[str | None, list[Any], bool] | None:
    """The ``session/new`` result's modes, as (the first of :data:`ASKING_MODES` it offers —
    None when it offers none —, the ids it offers, whether ``session/set_mode`` must switch to
    it); None when it advertises no modes (docs/acp-adapters.md, "Permission modes")."""
    modes = raw.get("modes") if isinstance(raw, dict) else None
    if not isinstance(modes, dict):
        return None
    offered = modes.get("availableModes")
    ids = [m.get("id") for m in offered if isinstance(m, dict)] if isinstance(offered, list) else []
    wanted = next((m for m in ASKING_MODES if m in ids), None)
    return wanted, ids, wanted is not None and modes.get("currentModeId") != wanted


def goose_system_prompt_params(session_id: str, standing: str) -> dict[str, Any]:
    return {"sessionId": session_id, "mode": "set", "key": "buzz", "text": standing}


# -- prompts and steers ------------------------------------------------------------------------


def prompt_params(session_id: str, sections: Sequence[str]) -> dict[str, Any]:
    """One ``text`` block per section."""
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": s} for s in sections]}


def prompt_response(raw: Any) -> tuple[PromptAnswered, PromptUsage | None]:
    """The ``session/prompt`` result: its stop reason and its usage (malformed usage is not
    observed: docs/metrics.md, absent)."""
    native = raw.get("stopReason") if isinstance(raw, dict) else None
    usage = raw.get("usage") if isinstance(raw, dict) else None
    if usage is None and isinstance(raw, dict):  # gemini-cli (docs/acp-adapters.md, "Usage")
        usage = _gemini_usage(raw.get("_meta"))
    parsed = None
    if usage is not None:
        try:
            counts = schema.Usage.model_validate(usage)
        except ValidationError:
            counts = None
        if counts is not None:
            cache = (counts.cached_read_tokens, counts.cached_write_tokens)
            parsed = PromptUsage(
                counts.input_tokens, counts.output_tokens, counts.total_tokens, *cache
            )
    return PromptAnswered(native if isinstance(native, str) else None), parsed


def _gemini_usage(meta: object) -> dict[str, int] | None:
    """gemini-cli's ``_meta.quota.token_count`` as ACP ``usage`` (docs/acp-adapters.md,
    "Usage"): its input is the prompt's whole token count, cache included."""
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    tokens = [count.get("input_tokens"), count.get("output_tokens")]
    numbers = [n for n in tokens if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if len(numbers) != 2:
        return None
    return {"inputTokens": numbers[0], "outputTokens": numbers[1], "totalTokens": sum(numbers)}


def steer_params(session_id: str, text: str, run_id: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    if run_id is not None:
        params["expectedRunId"] = run_id
    return params


def steer_answer(raw: Any, *, any_success: bool) -> SteerOutcome:
    """The steer's result: ``injected``/``startedNewTurn`` as reported (``any_success``: every
    answer means injected, goose), anything else ``failed``."""
    reported = raw.get("outcome") if isinstance(raw, dict) else None
    if any_success or reported == "injected":
        return "injected"
    return "started_new_turn" if reported == "startedNewTurn" else "failed"


def steer_error(code: int) -> SteerOutcome:
    """A steer's error response: −32601 (no such method) fails, any other error releases."""
    return "failed" if code == METHOD_NOT_FOUND else "released"


# -- what the agent sends on its own -----------------------------------------------------------


def session_of(params: object) -> str | None:
    session_id = params.get("sessionId") if isinstance(params, dict) else None
    return session_id if isinstance(session_id, str) else None


def _codex_system_error(meta: Mapping[str, Any] | None) -> bool:
    """codex-acp's ``_meta.codex.threadStatus.type == "systemError"``: the model call failed
    and the turn's text is the error, not an answer (docs/acp-adapters.md, "Errors")."""
    codex = meta.get("codex") if meta else None
    status = codex.get("threadStatus") if isinstance(codex, dict) else None
    return isinstance(status, dict) and status.get("type") == "systemError"


def _goose_run_id(meta: Mapping[str, Any] | None) -> str | None:
    goose = meta.get("goose") if meta else None
    run_id = goose.get("activeRunId") if isinstance(goose, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


def _text_blocks(blocks: object) -> str:
    """The text of a list of content blocks (other blocks ignored), cut to
    :data:`MAX_SUMMARY_BYTES`."""
    items = blocks if isinstance(blocks, list) else [blocks]
    texts = [b["text"] for b in items if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return utf8_head("".join(texts), MAX_SUMMARY_BYTES)


def compaction_facts(update: Mapping[str, Any]) -> tuple[AgentFact, ...]:
    """A ``compaction_update`` or ``compaction_summary_chunk`` (the schema this package
    validates against predates them); a malformed one is activity, nothing more."""
    kind = update.get("sessionUpdate")
    compaction_id = update.get("compactionId")
    if not isinstance(compaction_id, str) or not 0 < len(compaction_id) <= MAX_COMPACTION_ID:
        return (Update(None),)
    if kind == "compaction_summary_chunk":
        return (Update(kind), CompactionChunk(compaction_id, _text_blocks(update.get("content"))))
    status = update.get("status")
    if not isinstance(status, str) or not status:
        return (Update(None),)
    summary = update.get("summary", ...)
    text = None if summary is ... else _text_blocks(summary or [])
    return (Update("compaction_update"), Compaction(compaction_id, status[:64], text))


_COMPACTION_UPDATES: Final = frozenset({"compaction_update", "compaction_summary_chunk"})


def session_update_facts(params: Any) -> tuple[AgentFact, ...]:
    """A ``session/update``'s facts: its kind, then what it says (an update kind the schema
    does not know: nothing, but it is still activity of the session)."""
    raw = params.get("update") if isinstance(params, dict) else None
    if isinstance(raw, dict) and raw.get("sessionUpdate") in _COMPACTION_UPDATES:
        return compaction_facts(raw)
    try:
        update = schema.SessionNotification.model_validate(params).update
    except ValidationError:
        return (Update(None),)
    facts: list[AgentFact] = [Update(update.session_update)]
    if isinstance(update, schema.AgentMessageChunk):
        if isinstance(update.content, schema.TextContentBlock):
            facts.append(Text(update.content.text, update.message_id))
    elif isinstance(update, schema.ToolCallStart | schema.ToolCallProgress):
        title = utf8_head(update.title, MAX_TOOL_TITLE_BYTES) if update.title else None
        facts.append(
            ToolCall(
                update.tool_call_id,
                kind=_str(update.kind),
                title=title,
                status=_str(update.status),
                started=isinstance(update, schema.ToolCallStart),
            )
        )
    elif isinstance(update, schema.UsageUpdate):
        cost = update.cost
        if cost is not None and cost.currency.upper() == "USD":  # costUsd is USD
            facts.append(Cost(cost.amount))
        facts.append(Occupancy(update.used, update.size))
    elif isinstance(update, schema.SessionInfoUpdate):
        if _codex_system_error(update.field_meta):
            facts.append(ModelFailed())
        run_id = _goose_run_id(update.field_meta)
        if run_id is not None:
            facts.append(RunId(run_id))
    return tuple(facts)


def goose_update_facts(params: Any) -> tuple[AgentFact, ...]:
    """goose's cumulative counters (``_goose/unstable/session/update`` usage_update)."""
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict) or update.get("sessionUpdate") != "usage_update":
        return ()
    return (
        CumulativeUsage(
            input_tokens=update.get("accumulatedInputTokens"),
            output_tokens=update.get("accumulatedOutputTokens"),
            cache_read_tokens=update.get("accumulatedCacheReadTokens"),
            cache_write_tokens=update.get("accumulatedCacheWriteTokens"),
            total_tokens=update.get("accumulatedTotalTokens"),
            cost_usd=update.get("accumulatedCost"),
        ),
    )


def permission_request(params: Any, *, turn_running: bool) -> PermissionRequest:
    params = params if isinstance(params, dict) else {}
    tool = params.get("toolCall")
    tool = tool if isinstance(tool, dict) else {}
    return PermissionRequest(
        session_id=session_of(params) or "",
        title=_str(tool.get("title")) or "",
        kind=_str(tool.get("kind")),
        tool_call_id=_str(tool.get("toolCallId")),
        turn_running=turn_running,
    )


def permission_answer(params: Any, approve: bool) -> tuple[dict[str, Any], bool]:
    """The ``request_permission`` result and whether it approves: approval picks the
    ``allow_once`` option (else ``allow_always``), rejection ``reject_once`` (else
    ``reject_always``, else the ``cancelled`` outcome).  An approval without an allow option
    is a rejection."""
    options = params.get("options") if isinstance(params, dict) else None
    offered = [
        o
        for o in (options if isinstance(options, list) else [])
        if isinstance(o, dict) and isinstance(o.get("optionId"), str)
    ]
    wanted = ("allow_once", "allow_always") if approve else ("reject_once", "reject_always")
    for option_kind in wanted:
        option = next((o for o in offered if o.get("kind") == option_kind), None)
        if option is not None:
            return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}, approve
    return {"outcome": {"outcome": "cancelled"}}, False


# -- errors ------------------------------------------------------------------------------------


def describe(exc: BaseException) -> str:
    """A short reason for an error (never the prompt)."""
    if isinstance(exc, RequestError):
        # Real agents put the useful text in ``data.message`` (or ``data`` itself) of a
        # −32603 whose ``message`` is only "Internal error" (docs/acp-adapters.md, "Errors").
        data = exc.data
        detail = data.get("message") if isinstance(data, dict) else data
        if not isinstance(detail, str) and isinstance(data, dict):
            detail = data.get("details")
        text = str(exc)
        if isinstance(detail, str) and detail.strip() and detail.strip() not in text:
            text = f"{text}: {detail.strip()}" if text else detail.strip()
        return f"JSON-RPC error {exc.code}: {text}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ValidationError):
        return f"malformed response ({exc.error_count()} schema errors)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
