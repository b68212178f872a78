"""A stand-in for an OpenTelemetry collector, for tests: it receives OTLP traces and
metrics over HTTP (protobuf, `/v1/traces` and `/v1/metrics`) and over gRPC, decodes them
with opentelemetry-proto's generated classes, and keeps them for assertions.

    collector = OtlpCollector()
    collector.start()
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.http_endpoint   # or grpc_endpoint
    ...
    spans = collector.wait_for(lambda c: [s for s in c.spans if s.name == "chat gpt-4o"])
    collector.stop()
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

T = TypeVar("T")


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    # Trace ids of the spans it links to.
    links: tuple[str, ...]


@dataclass(frozen=True)
class ReceivedPoint:
    """One data point of a metric: a sum's or gauge's value, a histogram's count."""

    service: str
    name: str
    attributes: dict[str, Any]
    value: float


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _service(resource_attributes: list[KeyValue]) -> str:
    return str(_attributes(resource_attributes).get("service.name", ""))


class OtlpCollector:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.points: list[ReceivedPoint] = []
        self.requests = 0
        self._changed = threading.Condition()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: grpc.Server | None = None

    # -- what arrives -----------------------------------------------------------

    def add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            service = _service(list(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=service,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            links=tuple(link.trace_id.hex() for link in span.links),
                        )
                    )
        with self._changed:
            self.spans += received
            self.requests += 1
            self._changed.notify_all()

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        received = []
        for resource_metrics in request.resource_metrics:
            service = _service(list(resource_metrics.resource.attributes))
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        if kind == "histogram":
                            value = float(point.count)
                        else:
                            value = float(
                                point.as_double
                                if point.WhichOneof("value") == "as_double"
                                else point.as_int
                            )
                        received.append(
                            ReceivedPoint(
                                service, metric.name, _attributes(point.attributes), value
                            )
                        )
        with self._changed:
            self.points += received
            self.requests += 1
            self._changed.notify_all()

    def wait_for(self, found: Callable[[OtlpCollector], T], timeout: float = 30.0) -> T:
        """The first truthy `found(self)`, evaluated each time something arrives."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = found(self)
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the collector did not receive what was expected")
                self._changed.wait(left)

    # -- serving ------------------------------------------------------------------

    @property
    def http_endpoint(self) -> str:
        assert self._http is not None
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._grpc_port}"

    def start(self, grpc_too: bool = True) -> None:
        """Serve OTLP/HTTP, and with `grpc_too` OTLP/gRPC (whose threads make a process
        that forks, like a test's supervisor, warn at each fork)."""
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                response: Any
                if self.path == "/v1/traces":
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    collector.add_traces(request)
                    response = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    collector.add_metrics(metrics)
                    response = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_error(404)
                    return
                out = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        if grpc_too:
            self._serve_grpc()

    def _serve_grpc(self) -> None:
        collector = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                collector.add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                collector.add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._grpc)
        self._grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._grpc is not None:
            self._grpc.stop(grace=None)
