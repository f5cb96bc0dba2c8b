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

With no tracer provider configured at all, no span is started (the API would hand out a
non-recording one, and starting it costs several microseconds per round trip, a measurable share
of a NATS request); the duration sample is still taken, so a meter provider alone works.
The check is made on every call, so a provider installed later is picked up at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType

from opentelemetry import metrics, trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode

from spate.telemetry._metrics import SECONDS_BUCKETS
from spate.telemetry._provider import tracing

__all__ = ["client_span", "server_endpoint"]

_tracer = trace.get_tracer("spate_stores")
_meter = metrics.get_meter("spate_stores")
_duration = _meter.create_histogram(
    "db.client.operation.duration",
    unit="s",
    description="Duration of one store client round trip (spate store adapters).",
    # spate's boundaries for every duration, and one below a millisecond: a round trip to a
    # server on loopback often takes less.
    explicit_bucket_boundaries_advisory=(0.0005, *SECONDS_BUCKETS),
)


def server_endpoint(host: str, port: int | None) -> dict[str, str | int]:
    """The ``server.address`` / ``server.port`` attributes of one server (no user info)."""
    attributes: dict[str, str | int] = {"server.address": host}
    if port is not None:
        attributes["server.port"] = port
    return attributes


class _Timed:
    """The duration sample alone, for when no tracer provider is configured.

    A class rather than a generator context manager: this runs on every round trip.
    """

    __slots__ = ("_attributes", "_started")

    def __init__(self, attributes: dict[str, str | int]) -> None:
        self._attributes = attributes
        self._started = 0.0

    def __enter__(self) -> Span:
        self._started = time.perf_counter()
        return INVALID_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._attributes["error.type"] = exc_type.__qualname__
        _duration.record(time.perf_counter() - self._started, self._attributes)


def client_span(
    system: str,
    operation: str,
    *,
    server: dict[str, str | int],
    namespace: str | None = None,
) -> AbstractContextManager[Span]:
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
    if not tracing():
        return _Timed(attributes)
    return _span(system, operation, namespace, attributes)


@contextmanager
def _span(
    system: str, operation: str, namespace: str | None, attributes: dict[str, str | int]
) -> Iterator[Span]:
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
