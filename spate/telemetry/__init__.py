"""Observability: spans on every fenced write, metrics for every outcome, OTLP export.

spate depends on the OpenTelemetry API only. Every guarded store write the protocol makes
runs inside a ``spate.<operation>`` span (:mod:`spate._write_spans`), and every outcome the
coordinator counts goes to a :class:`~spate.MetricsHooks`; :class:`OTelMetrics`
records them on OpenTelemetry instruments. Until an SDK is installed all of it is the API's
no-op, so an application that does not export telemetry pays next to nothing.

To export, either configure the OpenTelemetry SDK yourself (spate uses the global
providers) or call :func:`configure` once at start-up (the ``otel`` extra)::

    telemetry = spate.telemetry.configure(service_name="backfill", endpoint="http://127.0.0.1:4318")
    try:
        await spate.run_worker(...)
    finally:
        await telemetry.ashutdown()

A handler's own spans and the commits it makes share one trace: a commit's write runs in the
handler's own task. :func:`capture` and :func:`attached` carry a context to another task (the
coordinator uses them for its background writes).
"""

from spate.telemetry._configure import Telemetry, configure
from spate.telemetry._context import attached, capture
from spate.telemetry._metrics import (
    SECONDS_BUCKETS,
    Instruments,
    OTelMetrics,
    instruments,
    metrics_for,
)

__all__ = [
    "SECONDS_BUCKETS",
    "Instruments",
    "OTelMetrics",
    "Telemetry",
    "attached",
    "capture",
    "configure",
    "instruments",
    "metrics_for",
]
