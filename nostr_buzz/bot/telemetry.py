"""Telemetry of the bot's turns: what each turn tells a :class:`TurnSink` (docs/bot.md,
"Telemetry").

The turn runner calls :class:`TurnTelemetry` at five moments — a turn started, a steer was
delivered into it, a permission request of it was decided, one of the agent's Nostr tools
answered a call of it (:mod:`.tools`), it ended (with its metric when it has one) — and that
hands plain records to the sink.  A sink never fails or delays a turn: its
calls are guarded here (the first failure is reported as ``telemetry_failed``), and the
OpenTelemetry sink (:mod:`nostr_buzz.io.otel`, imported only when ``[telemetry]`` is set)
exports in a thread of its own.

A private conversation is never named to a telemetry back end: its conversation id is a keyed
hash of the queue channel (the key lives in the state directory, so the id stays the same
across restarts and cannot be recomputed from a guessed public key), and none of its words,
event ids or error texts are exported.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from nostr_buzz.core.telemetry import (
    PermissionSeen,
    RetrievalSeen,
    SteerSeen,
    TurnBegan,
    TurnEnded,
    TurnSink,
)
from nostr_buzz.io.filemodes import open_private, read_private
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload

from .privacy import tool_kind

if TYPE_CHECKING:
    from nostr_buzz.acp.types import PermissionRequest
    from nostr_buzz.core.permission import PermissionDecision
    from nostr_buzz.event import Event
    from nostr_buzz.io.diagnostics import DiagnosticsFeed
    from nostr_buzz.manifest import Layer

    from .config import PluginConfig
    from .outputs import TurnIds
    from .supervisor import AgentSupervisor

__all__ = ["TurnTelemetry", "conversation_key", "open_telemetry"]


class _Identified(Protocol):
    turn_id: str


#: The key of private conversations' ids, in the state directory.
KEY_FILE: Final = "telemetry.key"
_KEY_BYTES: Final = 32


# -- the runner's side ------------------------------------------------------------------------


class TurnTelemetry:
    """The turn runner's calls, made into records and handed to ``sink`` (None: no telemetry,
    every call a no-op); a failing sink costs its records, never the turn."""

    def __init__(
        self,
        sink: TurnSink | None,
        diagnostics: DiagnosticsFeed | None = None,
        *,
        key: bytes = b"",
        export_content: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sink = sink
        self._diagnostics = diagnostics
        self._key = key
        self._content = export_content
        self._clock = clock
        self._began: dict[str, TurnBegan] = {}
        self._ended: dict[str, TurnEnded] = {}  # a turn's record, until its span is closed
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    def conversation(self, queue_channel: str) -> str:
        """``gen_ai.conversation.id``: the queue channel, a private one as a keyed hash."""
        if not nip10.is_private_channel(queue_channel):
            return queue_channel
        digest = hmac.new(self._key, queue_channel.encode(), hashlib.sha256).hexdigest()
        return nip10.PRIVATE_CHANNEL_PREFIX + digest[:32]

    def started(self, turn_id: str, queue_channel: str, events: list[Event]) -> None:
        if self.sink is None:
            return
        at = self._clock()
        private = nip10.is_private_channel(queue_channel)
        began = TurnBegan(
            turn_id,
            self.conversation(queue_channel),
            private,
            at,
            event_ids=() if private else tuple(e.id for e in events),
            inputs=tuple(e.content for e in events) if self._content and not private else (),
        )
        self._began[turn_id] = began
        self._call("on_turn_started", began)

    def steer(self, turn_id: str, event: Event, outcome: str) -> None:
        began = self._began.get(turn_id)
        if self.sink is None or began is None:
            return
        at = self._clock()
        shown = not began.private
        text = event.content if self._content and shown else None
        seen = SteerSeen(outcome, at, event.id if shown else None, text)
        self._call("on_steer", turn_id, seen)

    def permission(
        self, turn: _Identified, request: PermissionRequest, decision: PermissionDecision
    ) -> None:
        turn_id = turn.turn_id
        if self.sink is None or turn_id not in self._began:
            return
        # The kind as one of ACP's (the agent's own word could repeat what it was told); a
        # private conversation's call id is the agent's text too: left out.
        call_id = None if self._began[turn_id].private else request.tool_call_id
        kind = tool_kind(request.kind)
        seen = PermissionSeen(decision.approve, decision.reason, self._clock(), kind, call_id)
        self._call("on_permission", turn_id, seen)

    def retrieval(
        self,
        turn: _Identified,
        tool: str,
        layers: Sequence[Layer],
        error: str | None = None,
        asked: str | None = None,
    ) -> None:
        """A tool call of the turn: a record for each layer it put in the turn's ledger, or
        one for its typed ``error`` (``asked``: the event id it asked for).  A private
        conversation's ids are left out: its messages' ids, and what the agent read there,
        could tell what it is about."""
        turn_id = turn.turn_id
        began = self._began.get(turn_id)
        if self.sink is None or began is None:
            return
        at, shown = self._clock(), not began.private
        if error is not None:
            seen = [RetrievalSeen(tool, error, at, ref=asked if shown else None)]
        else:
            seen = [
                RetrievalSeen(tool, "found", at, x.layer, x.source, x.version if shown else None)
                for x in layers
            ]
        for record in seen:
            self._call("on_retrieval", turn_id, record)

    def committed(
        self,
        ids: TurnIds,
        queue_channel: str,
        payload: MetricPayload | None,
        metric_event_id: str | None,
        reply: str | None,
    ) -> None:
        """A turn's metric is stored: its record (the span closes at :meth:`ended`, or now
        for a turn the agent started on its own)."""
        if self.sink is None or payload is None:
            return
        turn_id, at = ids.turn_id, self._clock()
        private = nip10.is_private_channel(queue_channel)
        began = self._began.get(turn_id)
        manifest = payload.context_manifest
        error = _error_type(payload) if payload.outcome == "failed" else None
        ended = TurnEnded(
            turn_id,
            self.conversation(queue_channel),
            private,
            at,
            began.at if began is not None else _unix(payload.started_at, at),
            payload.outcome or "unknown",
            error_type=error,
            stop_reason=payload.stop_reason,
            session_id=ids.session_id,
            model=payload.model,
            usage=payload.turn,
            manifest_hash=manifest.hash if manifest is not None else None,
            metric_event_id=metric_event_id,
            reply=reply if self._content and not private else None,
        )
        if began is None:  # a steer's own turn: nothing more comes for it
            self._call("on_turn_finished", ended)
        else:
            self._ended[turn_id] = ended

    def failed(self, turn_id: str, error_type: str) -> None:
        """The turn failed before it had a metric (resolution, session or compile trouble)."""
        began = self._began.get(turn_id)
        if self.sink is not None and began is not None:
            self._ended[turn_id] = _without_metric(began, self._clock(), "failed", error_type)

    def ended(self, turn_id: str, cancelled: bool) -> None:
        """The turn left the running turns: its span closes with what is known (a turn with
        no record was cancelled before its prompt, or abandoned by a stop)."""
        began = self._began.pop(turn_id, None)
        if self.sink is None or began is None:
            return
        ended = self._ended.pop(turn_id, None)
        if ended is None:
            outcome, error = ("cancelled", None) if cancelled else ("failed", "abandoned")
            ended = _without_metric(began, self._clock(), outcome, error)
        self._call("on_turn_finished", ended)

    async def aclose(self) -> None:
        """Export what is left (bounded by the sink) and stop."""
        sink, self.sink = self.sink, None  # what comes later is not exported
        if sink is not None:
            try:
                await sink.aclose()
            except Exception as exc:
                self._report(exc)

    def _call(self, method: str, *args: object) -> None:
        if self.sink is None:
            return
        try:
            getattr(self.sink, method)(*args)
        except Exception as exc:  # telemetry never fails a turn
            self._report(exc)

    def _report(self, exc: Exception) -> None:
        if not self._failed and self._diagnostics is not None:
            self._failed = True  # once: a broken sink would otherwise speak at every turn
            self._diagnostics.emit("telemetry_failed", payload={"error": type(exc).__name__})


def _error_type(payload: MetricPayload) -> str:
    """``error.type`` of a failed turn: how it ended (``timeout``, ``agent_exit``, ``error``…),
    low in cardinality and free of the agent's words."""
    evidence = payload.terminal_evidence
    return evidence if evidence not in (None, "unknown", "prompt_response") else "_OTHER"


def _without_metric(began: TurnBegan, at: float, outcome: str, error: str | None) -> TurnEnded:
    return TurnEnded(began.turn_id, began.conversation, began.private, at, began.at, outcome, error)


def _unix(rfc3339: str | None, default: float) -> float:
    if rfc3339 is None:
        return default
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def conversation_key(state_dir: Path) -> bytes:
    """The state directory's key for private conversations' ids (made on first use, 0600)."""
    path = state_dir / KEY_FILE
    try:
        with read_private(path) as file:
            key = file.read()
        if len(key) == _KEY_BYTES:
            return key
    except FileNotFoundError:
        pass
    key = os.urandom(_KEY_BYTES)
    with open_private(path, append=False) as file:
        file.write(key)
    return key


def open_telemetry(
    config: PluginConfig,
    diagnostics: DiagnosticsFeed,
    supervisor: AgentSupervisor,
    clock: Callable[[], float],
) -> TurnTelemetry:
    """The runner's telemetry: the OpenTelemetry sink when ``config.telemetry`` is set (its SDK
    imported only then), else one that does nothing."""
    telemetry = config.telemetry
    if telemetry is None:
        return TurnTelemetry(None)
    from nostr_buzz.io.inprocess import InProcessDriver
    from nostr_buzz.io.otel import OtelSink

    sink = OtelSink(
        telemetry,
        agent_id=config.signer.public_key.hex,
        agent_name=lambda: supervisor.harness,
        request_model=config.model,
        in_process=isinstance(supervisor.driver, InProcessDriver),
    )
    return TurnTelemetry(
        sink,
        diagnostics,
        key=conversation_key(config.state_dir),
        export_content=telemetry.export_content,
        clock=clock,
    )
