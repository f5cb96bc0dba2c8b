"""A small OTLP/HTTP receiver for tests: Trio + h11, protobuf decoded with opentelemetry-proto.

It listens on a free loopback port, accepts ``POST /v1/traces`` and ``POST /v1/metrics``
(gzip-compressed or not, keep-alive), decodes each body into an ``ExportTraceServiceRequest``
/ ``ExportMetricsServiceRequest`` and answers 200 with an empty protobuf response, as a
collector (or Jaeger's 4318) would. ``delay`` holds every answer back, to show that a slow
collector does not stall the Trio loop of the process exporting to it.
"""

from __future__ import annotations

import gzip
from typing import Any

import attrs
import h11
import trio
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

_MAX_BODY = 64 * 1024 * 1024


@attrs.define(eq=False)
class Span:
    """One received span, flattened with its resource's service name."""

    service: str
    scope: str
    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    attributes: dict[str, Any]
    status_code: int
    events: list[str]


@attrs.define(eq=False)
class Receiver:
    """What arrived: decoded export requests, their paths and content encodings."""

    port: int = 0
    delay: float = 0.0
    traces: list[Any] = attrs.field(factory=list)
    metrics: list[Any] = attrs.field(factory=list)
    encodings: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    arrived: trio.Event = attrs.field(factory=trio.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[Span]:
        found: list[Span] = []
        for request in self.traces:
            for rs in request.resource_spans:
                service = _attributes(rs.resource.attributes).get("service.name", "")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        found.append(
                            Span(
                                service=service,
                                scope=ss.scope.name,
                                name=s.name,
                                trace_id=s.trace_id,
                                span_id=s.span_id,
                                parent_span_id=s.parent_span_id,
                                attributes=_attributes(s.attributes),
                                status_code=s.status.code,
                                events=[e.name for e in s.events],
                            )
                        )
        return found

    def metric_names(self) -> dict[str, list[Any]]:
        """Metric name -> its data points (of every request, in arrival order)."""
        found: dict[str, list[Any]] = {}
        for request in self.metrics:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        kind = metric.WhichOneof("data")
                        points = list(getattr(metric, kind).data_points) if kind else []
                        found.setdefault(metric.name, []).extend(points)
        return found

    async def serve(
        self, *, task_status: trio.TaskStatus[Receiver] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = await _read_request(conn, stream)
                if request is None:
                    return
                status = self._handle(request, body)
                if self.delay:
                    await trio.sleep(self.delay)
                payload = b""
                if status == 200:
                    response = (
                        trace_service_pb2.ExportTraceServiceResponse()
                        if request.target == b"/v1/traces"
                        else metrics_service_pb2.ExportMetricsServiceResponse()
                    )
                    payload = response.SerializeToString()
                headers = [
                    ("content-type", "application/x-protobuf"),
                    ("content-length", str(len(payload))),
                ]
                await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
                await stream.send_all(conn.send(h11.Data(data=payload)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()

    def _handle(self, request: h11.Request, body: bytes) -> int:
        headers = {k.lower(): v for k, v in request.headers}
        encoding = headers.get(b"content-encoding", b"").decode()
        self.encodings.append(encoding)
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding:
            self.errors.append(f"unexpected content-encoding {encoding!r}")
            return 415
        if request.method != b"POST":
            self.errors.append(f"unexpected method {request.method!r}")
            return 405
        if request.target == b"/v1/traces":
            message: Any = trace_service_pb2.ExportTraceServiceRequest()
            message.ParseFromString(body)
            self.traces.append(message)
        elif request.target == b"/v1/metrics":
            message = metrics_service_pb2.ExportMetricsServiceRequest()
            message.ParseFromString(body)
            self.metrics.append(message)
        else:
            self.errors.append(f"unexpected path {request.target!r}")
            return 404
        self.arrived.set()
        self.arrived = trio.Event()
        return 200


async def _read_request(
    conn: h11.Connection, stream: trio.SocketStream
) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)  # b"" means the client closed
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > _MAX_BODY:
                raise ValueError("export body too large for a test receiver")
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None, b""


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out
