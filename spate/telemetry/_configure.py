"""Wiring the OpenTelemetry SDK: traces and metrics exported over OTLP/HTTP, or scraped.

spate itself depends only on the OpenTelemetry API; this module is the one place that needs
the SDK and the exporters (the ``otel`` extra). :func:`configure` installs a global tracer
provider (batch span processor) and meter provider, exporting to one OTLP/HTTP endpoint such
as Jaeger's 4318 or an OpenTelemetry Collector; or, given a ``prometheus_port``, serving the
metrics for Prometheus to scrape (the OpenTelemetry Prometheus exporter behind an HTTP
server on its own thread).

Exporting happens on the SDK's own threads. Flushing and shutting down block until the
exporter has answered (or timed out), so under Trio they run in a worker thread
(:meth:`Telemetry.ashutdown`): called on the event loop they would stall every lease renewal
of the process for as long as the collector takes.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace

from spate._errors import ConfigError
from spate._install import install_hint

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["Telemetry", "configure"]

logger = logging.getLogger("spate.telemetry")

_INSTALL_HINT = install_hint("otel")
_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics")
_EXPORTERS = ("otlp", "console", "none")
_METRIC_EXPORTERS = ("otlp", "console", "prometheus", "none")
_PROMETHEUS_DEFAULT = ("localhost", 9464)
"""Where ``OTEL_METRICS_EXPORTER=prometheus`` serves without its own host and port variables."""


@attrs.define(eq=False)
class Telemetry:
    """What :func:`configure` installed; flush and shut it down when the program ends.

    Use :meth:`ashutdown` from Trio code (it never blocks the event loop) and :meth:`shutdown`
    from plain synchronous code. ``async with spate.telemetry.configure(...):`` shuts down on
    leaving the block. Providers are None for a signal that was not configured (disabled by
    ``OTEL_SDK_DISABLED`` or an ``OTEL_*_EXPORTER`` of ``none``).
    """

    service_name: str
    """The ``service.name`` the exported resource carries."""
    tracer_provider: TracerProvider | None
    """The installed global tracer provider, if traces are exported."""
    meter_provider: MeterProvider | None
    """The installed global meter provider, if metrics are exported."""
    traces_endpoint: str | None = None
    """Where spans go over OTLP/HTTP (None: not over OTLP)."""
    metrics_endpoint: str | None = None
    """Where metrics go over OTLP/HTTP (None: not over OTLP)."""
    prometheus_url: str | None = None
    """Where Prometheus scrapes the metrics (``http://host:port/metrics``; None: not served)."""
    _http_server: Any = attrs.field(default=None, repr=False, alias="_http_server")
    _closed: bool = attrs.field(default=False, init=False)

    def flush(self, within: float = 30.0) -> bool:
        """Export everything recorded so far; blocks (call :meth:`aflush` under Trio).

        Returns False if a provider did not finish within ``within`` seconds. A finished
        flush does not mean the collector accepted the data: export failures are logged by the
        exporter on the ``opentelemetry`` loggers.
        """
        millis = int(within * 1000)
        ok = True
        if self.tracer_provider is not None:
            ok = self.tracer_provider.force_flush(millis) and ok
        if self.meter_provider is not None:
            ok = self.meter_provider.force_flush(millis) and ok
        return ok

    def shutdown(self) -> None:
        """Flush, then stop the exporters; blocks (call :meth:`ashutdown` under Trio).

        Idempotent. After it, spans and metrics are dropped (the providers stay installed:
        OpenTelemetry's global providers cannot be replaced within a process).
        """
        if self._closed:
            return
        self._closed = True
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()

    async def aflush(self, within: float = 30.0) -> bool:
        """:meth:`flush` in a worker thread, so the Trio loop keeps running meanwhile."""
        return await trio.to_thread.run_sync(self.flush, within, abandon_on_cancel=True)

    async def ashutdown(self) -> None:
        """:meth:`shutdown` in a worker thread, so the Trio loop keeps running meanwhile.

        If the caller is cancelled the thread is abandoned (it finishes or times out on its
        own; it never keeps the process alive).
        """
        await trio.to_thread.run_sync(self.shutdown, abandon_on_cancel=True)

    async def __aenter__(self) -> Telemetry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.ashutdown()


def configure(
    service_name: str = "spate",
    endpoint: str | None = None,
    *,
    traces: bool = True,
    metrics: bool = True,
    export_interval: float | None = None,
    prometheus_port: int | None = None,
    prometheus_host: str = "0.0.0.0",
) -> Telemetry:
    """Install the OpenTelemetry SDK globally, exporting traces and metrics over OTLP/HTTP.

    ``endpoint`` is the collector's base URL (``http://127.0.0.1:4318``); spans go to
    ``<endpoint>/v1/traces`` and metrics to ``<endpoint>/v1/metrics``. Without it the
    standard variables decide: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` (full URLs), else ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (a base URL), else ``http://localhost:4318``. ``service_name`` is a default:
    ``OTEL_SERVICE_NAME`` (or ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) overrides it,
    so an operator can rename a deployed program. The exporters' other variables
    (``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``, certificates), the
    batch processor's ``OTEL_BSP_*`` and ``OTEL_METRIC_EXPORT_INTERVAL`` apply as usual.
    ``OTEL_SDK_DISABLED=true`` installs nothing; ``OTEL_TRACES_EXPORTER`` and
    ``OTEL_METRICS_EXPORTER`` may be ``otlp`` (the default), ``console`` or ``none``.

    ``traces=False`` or ``metrics=False`` leaves that signal unconfigured;
    ``export_interval`` (seconds) overrides the metric export interval.

    ``prometheus_port`` serves the metrics for Prometheus to scrape at
    ``http://<prometheus_host>:<prometheus_port>/metrics`` (on all interfaces by default; port
    0 picks a free one, see :attr:`Telemetry.prometheus_url`) instead of pushing them over
    OTLP; traces still go over OTLP. ``OTEL_METRICS_EXPORTER=prometheus`` does the same with
    ``OTEL_EXPORTER_PROMETHEUS_HOST`` and ``OTEL_EXPORTER_PROMETHEUS_PORT`` (default
    ``localhost:9464``). Instrument names become Prometheus names the usual way:
    ``spate.coordination.writes`` is served as ``spate_coordination_writes_total``.

    Call it once per process, before the coordinators start, and await
    :meth:`Telemetry.ashutdown` at the end so the last batch is exported. Raises
    :class:`~spate.ConfigError` if the ``otel`` extra is not installed, if the
    endpoint is not an http(s) URL, if another OTLP protocol than ``http/protobuf`` is
    requested, if the Prometheus port cannot be bound, or if OpenTelemetry is already
    configured in this process.
    """
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    except ImportError as exc:
        raise ConfigError(
            "exporting telemetry needs the OpenTelemetry SDK and OTLP exporter, which are not "
            f"installed: run `{_INSTALL_HINT}` (spate itself only needs the API)"
        ) from exc
    base = _normalize_endpoint(endpoint) if endpoint is not None else None
    if prometheus_port is not None:
        _check_port(prometheus_port, "prometheus_port")
        if not metrics:
            raise ConfigError(
                "prometheus_port serves metrics, but metrics=False turns them off: drop one"
            )
    if export_interval is not None and not export_interval > 0:
        raise ConfigError(
            f"export_interval must be a positive number of seconds, not {export_interval!r}"
        )
    if _env_flag("OTEL_SDK_DISABLED"):
        logger.info("OTEL_SDK_DISABLED is set: no telemetry is exported")
        return Telemetry(service_name=service_name, tracer_provider=None, meter_provider=None)

    if "service.name" not in OTELResourceDetector().detect().attributes:
        resource = Resource.create({"service.name": service_name})
    else:
        resource = Resource.create({})
    effective_name = str(resource.attributes.get("service.name", service_name))

    traces_exporter = _exporter_choice("OTEL_TRACES_EXPORTER", _EXPORTERS) if traces else "none"
    metrics_exporter = (
        _exporter_choice("OTEL_METRICS_EXPORTER", _METRIC_EXPORTERS) if metrics else "none"
    )
    scrape_at: tuple[str, int] | None = None
    if prometheus_port is not None:
        metrics_exporter, scrape_at = "prometheus", (prometheus_host, prometheus_port)
    elif metrics_exporter == "prometheus":
        scrape_at = _prometheus_from_environment()
    for kind, choice in (("TRACES", traces_exporter), ("METRICS", metrics_exporter)):
        if choice == "otlp":
            _check_protocol(kind)
    if traces_exporter != "none" and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    ):
        raise _already_configured("tracer")
    if metrics_exporter != "none" and not _is_proxy_meter_provider(
        otel_metrics.get_meter_provider()
    ):
        raise _already_configured("meter")

    telemetry = Telemetry(service_name=effective_name, tracer_provider=None, meter_provider=None)
    if traces_exporter != "none":
        telemetry.tracer_provider, telemetry.traces_endpoint = _tracer_provider(
            resource, traces_exporter, base
        )
        trace.set_tracer_provider(telemetry.tracer_provider)
    if scrape_at is not None:
        telemetry.meter_provider, telemetry.prometheus_url, telemetry._http_server = (
            _prometheus_provider(resource, *scrape_at)
        )
        otel_metrics.set_meter_provider(telemetry.meter_provider)
    elif metrics_exporter != "none":
        telemetry.meter_provider, telemetry.metrics_endpoint = _meter_provider(
            resource, metrics_exporter, base, export_interval
        )
        otel_metrics.set_meter_provider(telemetry.meter_provider)
    return telemetry


def _prometheus_provider(resource: Any, host: str, port: int) -> tuple[MeterProvider, str, Any]:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError as exc:
        raise ConfigError(
            "serving metrics to Prometheus needs the OpenTelemetry Prometheus exporter, which "
            f"is not installed: run `{_INSTALL_HINT}`"
        ) from exc
    from opentelemetry.sdk.metrics import MeterProvider

    try:
        # The server answers scrapes on its own daemon thread: a scrape never waits on the
        # Trio loop, and the loop never waits on a scrape.
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve Prometheus metrics on {host}:{port} ({exc}); choose another port "
            "(0 picks a free one)"
        ) from exc
    reader = PrometheusMetricReader()
    bound_host, bound_port = server.server_address[:2]
    shown = host if host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in shown:
        shown = f"[{shown}]"
    url = f"http://{shown}:{bound_port or port}/metrics"
    logger.info("serving Prometheus metrics at %s (bound to %s)", url, bound_host)
    return MeterProvider(resource=resource, metric_readers=[reader]), url, server


def _prometheus_from_environment() -> tuple[str, int]:
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or _PROMETHEUS_DEFAULT[0]
    raw = os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip()
    try:
        port = int(raw) if raw else _PROMETHEUS_DEFAULT[1]
    except ValueError:
        raise ConfigError(
            f"OTEL_EXPORTER_PROMETHEUS_PORT={raw!r} is not a port number (0-65535)"
        ) from None
    _check_port(port, "OTEL_EXPORTER_PROMETHEUS_PORT")
    return host, port


def _check_port(port: object, name: str) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{name} must be a port number from 0 to 65535, not {port!r}")


def _tracer_provider(
    resource: Any, choice: str, base: str | None
) -> tuple[TracerProvider, str | None]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    provider = TracerProvider(resource=resource)
    if choice == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        return provider, None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, _exporter_endpoint(exporter, base, "/v1/traces")


def _meter_provider(
    resource: Any, choice: str, base: str | None, interval: float | None
) -> tuple[MeterProvider, str | None]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter: MetricExporter
    endpoint: str | None = None
    if choice == "console":
        exporter = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None)
        endpoint = _exporter_endpoint(exporter, base, "/v1/metrics")
    millis = None if interval is None else interval * 1000
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=millis)
    return MeterProvider(resource=resource, metric_readers=[reader]), endpoint


def _exporter_endpoint(exporter: object, base: str | None, path: str) -> str | None:
    if base is not None:
        return base + path
    found = getattr(exporter, "_endpoint", None)
    return found if isinstance(found, str) else None


def _normalize_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"the OTLP endpoint must be an http(s) URL such as http://127.0.0.1:4318, not "
            f"{endpoint!r} (spate exports OTLP over HTTP; Jaeger and the Collector listen on 4318)"
        )
    path = parts.path.rstrip("/")
    for suffix in _SIGNAL_PATHS:
        # A full signal URL pasted from a collector's docs still means its base.
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() == "true"


def _exporter_choice(variable: str, supported: tuple[str, ...]) -> str:
    raw = os.environ.get(variable, "").strip().lower() or "otlp"
    choices = [c.strip() for c in raw.split(",") if c.strip()]
    unknown = [c for c in choices if c not in supported]
    if unknown or len(choices) != 1:
        raise ConfigError(
            f"{variable}={raw!r} is not supported by spate.telemetry.configure: use one of "
            f"{', '.join(supported)} (or wire the OpenTelemetry SDK yourself; spate's spans "
            "and metrics go to whatever global providers are installed)"
        )
    return choices[0]


def _check_protocol(kind: str) -> None:
    for variable in (f"OTEL_EXPORTER_OTLP_{kind}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(variable, "").strip()
        if value:
            if value != "http/protobuf":
                raise ConfigError(
                    f"{variable}={value!r}: spate.telemetry.configure exports OTLP over HTTP "
                    "with protobuf only; set it to http/protobuf (and the endpoint to the "
                    "collector's HTTP port, usually 4318) or unset it"
                )
            return


def _is_proxy_meter_provider(provider: object) -> bool:
    # The API's placeholder (what get_meter_provider returns until one is set) is private;
    # recognise it by name rather than import it from an internal module.
    return type(provider).__name__ == "_ProxyMeterProvider"


def _already_configured(kind: str) -> ConfigError:
    return ConfigError(
        f"OpenTelemetry is already configured in this process (a global {kind} provider is "
        "installed, by an earlier configure() call or by the application); spate's spans and "
        "metrics already go to it. Call spate.telemetry.configure() at most once per process, "
        "or not at all when the application sets up OpenTelemetry itself."
    )
