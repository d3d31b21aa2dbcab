"""The OpenTelemetry sink of the bot's turns: one ``invoke_agent`` span per turn and the GenAI
usage metrics, exported over OTLP/HTTP (protobuf) in the SDK's own threads (docs/bot.md,
"Telemetry").  Imported only when ``[telemetry]`` is configured (the ``telemetry`` extra).

The span follows the OpenTelemetry GenAI semantic conventions for agents: its name is
``invoke_agent {gen_ai.agent.name}``; the steers delivered into the turn, the agent's
permission requests and what the agent's Nostr tools handed over (or why not) are its events
(``nostr_buzz.steer``, ``nostr_buzz.permission``, ``nostr_buzz.retrieval``).  Nothing here
touches the global providers: a host application's own OpenTelemetry setup is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from nostr_buzz.core.ledger import MAX_RETRIEVALS
from nostr_buzz.core.telemetry import (
    PermissionSeen,
    RetrievalSeen,
    SteerSeen,
    Telemetry,
    TurnBegan,
    TurnEnded,
)

__all__ = ["OtelSink", "provider_of"]

_SCOPE: Final = "nostr_buzz"
#: Seconds between metric exports (and the last one at shutdown).
METRIC_INTERVAL: Final = 30.0
#: The buckets the conventions advise for ``gen_ai.client.token.usage`` and
#: ``gen_ai.client.operation.duration``.
_TOKEN_BUCKETS: Final = tuple(4.0**i for i in range(14))
_DURATION_BUCKETS: Final = tuple(0.01 * 2**i for i in range(14))
#: The events one span keeps: every retrieval a turn may record, and as many failed calls,
#: steers and permissions again (past it the SDK drops them and counts them as dropped).
MAX_SPAN_EVENTS: Final = 2 * MAX_RETRIEVALS
#: ``gen_ai.provider.name`` by harness, when ``[telemetry] provider`` does not say.
_PROVIDERS: Final = {"claude": "anthropic", "codex": "openai", "gemini": "gcp.gemini"}
#: The exporter's loggers: what they log passes :class:`_Redact` first.
_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.metrics._internal.export",
    "opentelemetry.sdk._shared_internal",
)

#: What a span event is made of.
_Eventful = SteerSeen | PermissionSeen | RetrievalSeen
#: Each record's span event: its name, and its attributes' keys by the record's field.
_EVENTS: Final[dict[type, tuple[str, dict[str, str]]]] = {
    SteerSeen: (
        "nostr_buzz.steer",
        {"outcome": "nostr_buzz.steer.outcome", "event_id": "nostr_buzz.event_id"},
    ),
    PermissionSeen: (
        "nostr_buzz.permission",
        {
            "approved": "nostr_buzz.permission.approved",
            "reason": "nostr_buzz.permission.reason",
            "tool_kind": "nostr_buzz.permission.tool_kind",
            "tool_call_id": "gen_ai.tool.call.id",
        },
    ),
    RetrievalSeen: (
        "nostr_buzz.retrieval",
        {
            "tool": "gen_ai.tool.name",
            "outcome": "nostr_buzz.retrieval.outcome",
            "layer": "nostr_buzz.retrieval.layer",
            "source": "nostr_buzz.retrieval.source",
            "ref": "nostr_buzz.retrieval.ref",
        },
    ),
}


def provider_of(harness: str, configured: str | None) -> str:
    """``gen_ai.provider.name``: as configured, else known from the harness, else ``_OTHER``."""
    if configured:
        return configured
    lowered = harness.lower()
    return next((p for name, p in _PROVIDERS.items() if name in lowered), "_OTHER")


class _Redact(logging.Filter):
    """Replaces the header values (credentials) in what the exporter logs: a back end's
    error text could quote them."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, None
        for secret in self.secrets:
            text = text.replace(secret, "<hidden>")
        record.msg, record.args = text, None
        return True


class OtelSink:
    """A :class:`~nostr_buzz.core.telemetry.TurnSink` exporting to ``telemetry.endpoint``."""

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        agent_id: str,
        agent_name: Callable[[], str],
        request_model: str | None,
        in_process: bool,
    ) -> None:
        self._telemetry = telemetry
        self._agent_id = agent_id
        self._agent_name = agent_name
        self._request_model = request_model
        self._kind = SpanKind.INTERNAL if in_process else SpanKind.CLIENT
        self._redact = _Redact(telemetry.secrets)
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(self._redact)
        resource = Resource.create({"service.name": telemetry.service_name})
        base, headers, timeout = telemetry.endpoint, dict(telemetry.headers), telemetry.timeout
        spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers, timeout=timeout)
        self._tracing = TracerProvider(
            resource=resource,
            shutdown_on_exit=False,
            span_limits=SpanLimits(max_events=MAX_SPAN_EVENTS),
        )
        self._tracing.add_span_processor(
            BatchSpanProcessor(
                spans, schedule_delay_millis=1000, export_timeout_millis=timeout * 1000
            )
        )
        self._tracer = self._tracing.get_tracer(_SCOPE)
        readers = []
        if telemetry.metrics:
            exporter = OTLPMetricExporter(
                endpoint=f"{base}/v1/metrics", headers=headers, timeout=timeout
            )
            readers.append(
                PeriodicExportingMetricReader(
                    exporter,
                    export_interval_millis=METRIC_INTERVAL * 1000,
                    export_timeout_millis=timeout * 1000,
                )
            )
        self._metering = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
        meter = self._metering.get_meter(_SCOPE)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self._spans: dict[str, Span] = {}

    # -- the sink ---------------------------------------------------------------------------

    def on_turn_started(self, turn: TurnBegan) -> None:
        self._spans[turn.turn_id] = self._open(turn.turn_id, turn.conversation, turn.at)
        span = self._spans[turn.turn_id]
        if turn.event_ids:
            span.set_attribute("nostr_buzz.event_ids", list(turn.event_ids))
        if turn.inputs:
            messages = [_message("user", text) for text in turn.inputs]
            span.set_attribute("gen_ai.input.messages", json.dumps(messages))

    def on_steer(self, turn_id: str, steer: SteerSeen) -> None:
        text = steer.text
        words = json.dumps([_message("user", text)]) if text is not None else None
        self._event(turn_id, steer, {"gen_ai.input.messages": words})

    def on_permission(self, turn_id: str, permission: PermissionSeen) -> None:
        self._event(turn_id, permission)

    def on_retrieval(self, turn_id: str, retrieval: RetrievalSeen) -> None:
        self._event(turn_id, retrieval)

    def on_turn_finished(self, turn: TurnEnded) -> None:
        span = self._spans.pop(turn.turn_id, None)
        if span is None:
            span = self._open(turn.turn_id, turn.conversation, turn.started_at)
        common = self._common(turn.model)
        span.set_attributes(_finished(turn))
        if turn.model is not None:
            span.set_attribute("gen_ai.response.model", turn.model)
        if turn.error_type is not None:
            span.set_status(Status(StatusCode.ERROR))
            common["error.type"] = turn.error_type
            span.set_attribute("error.type", turn.error_type)
        span.end(end_time=_nanos(turn.at))
        self._duration.record(max(turn.at - turn.started_at, 0.0), common)
        usage = turn.usage
        for kind, count in (
            ("input", usage.input_tokens if usage is not None else None),
            ("output", usage.output_tokens if usage is not None else None),
        ):
            if count is not None:
                self._tokens.record(count, {**common, "gen_ai.token.type": kind})

    async def aclose(self) -> None:
        """Export what is left and stop, in a thread of its own: the event loop never waits on
        the network, and never longer than the export timeout and a second for it (what is not
        sent by then is dropped)."""
        for span in self._spans.values():  # turns the stop cut short: run again after it
            span.set_attributes({"error.type": "abandoned", "nostr_buzz.outcome": "failed"})
            span.set_status(Status(StatusCode.ERROR))
            span.end()
        self._spans.clear()
        timeout = self._telemetry.timeout
        flushes = [
            _in_thread(self._tracing.shutdown),
            _in_thread(lambda: self._metering.shutdown(timeout_millis=timeout * 1000)),
        ]
        await asyncio.wait(flushes, timeout=timeout + 1)
        if all(flush.done() for flush in flushes):  # else a late export may still log
            for name in _LOGGERS:
                logging.getLogger(name).removeFilter(self._redact)

    # -- the parts --------------------------------------------------------------------------

    def _common(self, model: str | None) -> dict[str, Any]:
        """The attributes the span and the metrics share."""
        name = self._agent_name()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_of(name, self._telemetry.provider),
        }
        if self._request_model is not None:
            attributes["gen_ai.request.model"] = self._request_model
        if model is not None:
            attributes["gen_ai.response.model"] = model
        return attributes

    def _event(self, turn_id: str, record: _Eventful, more: dict[str, Any] | None = None) -> None:
        """``record`` as an event of its turn's span (none open: dropped), named and with its
        attributes as :data:`_EVENTS` says; None values left out."""
        span = self._spans.get(turn_id)
        if span is None:
            return
        name, fields = _EVENTS[type(record)]
        attributes = {key: getattr(record, field) for field, key in fields.items()}
        attributes.update(more or {})
        given = {k: v for k, v in attributes.items() if v is not None}
        span.add_event(name, given, timestamp=_nanos(record.at))

    def _open(self, turn_id: str, conversation: str, at: float) -> Span:
        name = self._telemetry.agent_name or self._agent_name()
        attributes = {
            **self._common(None),
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": self._agent_id,
            "gen_ai.conversation.id": conversation,
            "nostr_buzz.turn.id": turn_id,
        }
        return self._tracer.start_span(
            f"invoke_agent {name}", kind=self._kind, attributes=attributes, start_time=_nanos(at)
        )


def _finished(turn: TurnEnded) -> dict[str, Any]:
    """The span's attributes known at the turn's end."""
    attributes: dict[str, Any] = {"nostr_buzz.outcome": turn.outcome}
    usage = turn.usage
    optional: dict[str, Any] = {
        "gen_ai.response.finish_reasons": [turn.stop_reason] if turn.stop_reason else None,
        "nostr_buzz.session.id": turn.session_id,
        "nostr_buzz.manifest.hash": turn.manifest_hash,
        "nostr_buzz.metric.event_id": turn.metric_event_id,
        # gen_ai.usage.input_tokens counts the cache reads and writes too, as NIP-AM does.
        "gen_ai.usage.input_tokens": usage.input_tokens if usage else None,
        "gen_ai.usage.output_tokens": usage.output_tokens if usage else None,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens if usage else None,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens if usage else None,
        "nostr_buzz.usage.total_tokens": usage.total_tokens if usage else None,
        "nostr_buzz.cost_usd": usage.cost_usd if usage else None,
    }
    attributes.update({k: v for k, v in optional.items() if v is not None})
    if turn.reply is not None:
        attributes["gen_ai.output.messages"] = json.dumps([_message("assistant", turn.reply)])
    return attributes


def _message(role: str, text: str) -> dict[str, Any]:
    """A message as the conventions' ``gen_ai.input.messages`` and ``…output.messages`` hold."""
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _nanos(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _in_thread(work: Callable[[], object]) -> asyncio.Future[None]:
    """``work`` run in a daemon thread of its own (a back end that never answers cannot hold
    the process at its exit); the future is done when it is."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            work()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be closed by then
                loop.call_soon_threadsafe(_settle, done)

    threading.Thread(target=run, name="buzz-telemetry-flush", daemon=True).start()
    return done


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
