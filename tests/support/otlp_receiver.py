"""An OTLP/HTTP receiver for tests: a real HTTP server on 127.0.0.1 that takes
``POST /v1/traces`` and ``POST /v1/metrics`` and decodes them with the official protobufs
(``opentelemetry-proto``), as a collector or Langfuse does.

``mode``: ``"ok"`` answers each export with its (empty) response; ``"reject"`` answers 401
with a reason phrase that quotes the request's ``Authorization`` header (a back end that echoes
credentials in its errors); ``"hang"`` reads the request and never answers (a back end that
is up but stuck).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

Mode = Literal["ok", "reject", "hang"]


def value_of(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind) if kind is not None else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Received:
    """What the receiver has been sent, decoded."""

    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    posts: int = 0

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def resources(self) -> list[dict[str, Any]]:
        return [
            attributes_of(r.resource.attributes)
            for request in self.traces
            for r in request.resource_spans
        ]

    def metric_points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """Each histogram point of the metric ``name``: its attributes and the point."""
        found = []
        for request in self.metrics:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name == name and metric.HasField("histogram"):
                            found += [
                                (attributes_of(p.attributes), p)
                                for p in metric.histogram.data_points
                            ]
        return found

    def metric_units(self) -> dict[str, str]:
        return {
            metric.name: metric.unit
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        received = self.server.received
        with self.server.lock:
            received.posts += 1
            received.headers.append({k.lower(): v for k, v in self.headers.items()})
        if self.server.mode == "hang":
            self.server.release.wait()
            return
        if self.server.mode == "reject":
            quoted = self.headers.get("Authorization", "")
            self.send_response(401, f"Unauthorized: {quoted}")
            self.end_headers()
            return
        if self.path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(body)
            with self.server.lock:
                received.traces.append(traces)
            answer = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest.FromString(body)
            with self.server.lock:
                received.metrics.append(metrics)
            answer = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: Mode) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.received = Received()
        self.lock = threading.Lock()
        self.release = threading.Event()


@dataclass
class Receiver:
    url: str
    received: Received
    _server: _Server

    def wait_for(self, what: str, check: Any, timeout: float = 30.0) -> None:
        """Wait (bounded) until ``check(received)`` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._server.lock:
                if check(self.received):
                    return
            time.sleep(0.05)
        raise AssertionError(f"the receiver never got {what}: {self.received}")


@contextmanager
def otlp_receiver(mode: Mode = "ok") -> Iterator[Receiver]:
    """A running receiver; yields it with its base URL (``http://127.0.0.1:PORT``)."""
    server = _Server(mode)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield Receiver(f"http://{host!s}:{port}", server.received, server)
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
