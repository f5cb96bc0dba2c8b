"""Client spans and round-trip timings for store adapters.

An adapter wraps each round trip to its server (an etcd gateway HTTP call, a NATS request) in
:func:`client_span`. The span is a ``CLIENT`` span following the OpenTelemetry database
conventions: ``db.system.name``, ``db.operation.name``, ``db.namespace`` and ``server.address``
/ ``server.port``. It nests under the ``spate.<operation>`` span of the fenced write (or the
read) that caused it, so a trace shows both what the protocol meant and what went over the
wire. The round trip's duration is also recorded on the ``db.client.operation.duration``
histogram (seconds).

What is recorded is deliberately narrow: never keys' values, never credentials, tokens or
URLs with user information — only where the call went and what kind of call it was. Key
names are not recorded either (the spate span above already names the key).

With no OpenTelemetry SDK configured the API hands out non-recording spans and no-op
instruments, so the cost is a context-manager entry and a clock read per round trip.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = ["client_span", "server_endpoint"]

_tracer = trace.get_tracer("spate_stores")
_meter = metrics.get_meter("spate_stores")
_duration = _meter.create_histogram(
    "db.client.operation.duration",
    unit="s",
    description="Duration of one store client round trip (spate store adapters).",
    explicit_bucket_boundaries_advisory=(
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
    ),
)


def server_endpoint(host: str, port: int | None) -> dict[str, str | int]:
    """The ``server.address`` / ``server.port`` attributes of one server (no user info)."""
    attributes: dict[str, str | int] = {"server.address": host}
    if port is not None:
        attributes["server.port"] = port
    return attributes


@contextmanager
def client_span(
    system: str,
    operation: str,
    *,
    server: dict[str, str | int],
    namespace: str | None = None,
) -> Iterator[Span]:
    """A ``CLIENT`` span (and a duration sample) around one round trip to a store server.

    ``system`` is the store (``etcd``, ``nats``), ``operation`` the wire operation (``txn``,
    ``range``, ``watch``, ``KV.update``...), ``server`` what :func:`server_endpoint` returns,
    ``namespace`` the job namespace or bucket. An exception escaping the block marks the span
    as an error and records the exception's type only (a message could quote a server's
    reply, and nothing the server said is vetted for secrets).
    """
    attributes: dict[str, str | int] = {
        "db.system.name": system,
        "db.operation.name": operation,
    }
    attributes.update(server)
    if namespace:
        attributes["db.namespace"] = namespace
    name = f"{operation} {namespace}" if namespace else f"{operation} {system}"
    started = time.perf_counter()
    error_type: str | None = None
    with _tracer.start_as_current_span(
        name,
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            error_type = type(exc).__qualname__
            if span.is_recording():
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, error_type))
            raise
        finally:
            if error_type is not None:
                attributes["error.type"] = error_type
            _duration.record(time.perf_counter() - started, attributes)
