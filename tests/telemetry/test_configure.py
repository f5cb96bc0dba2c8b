"""configure(): clear errors, the standard variables it honours, and what it refuses."""

from __future__ import annotations

import sys

import pytest

from spate import ConfigError
from spate.telemetry import configure
from spate.telemetry._configure import _normalize_endpoint

from .conftest import Meters, Spans


@pytest.fixture(autouse=True)
def no_otel_environment(
    monkeypatch: pytest.MonkeyPatch, spans: Spans, global_meters: Meters
) -> None:
    # The global providers are installed first, so a configure() that got past its checks
    # here fails as "already configured" instead of replacing the test session's providers.
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    "module", ["opentelemetry.sdk.resources", "opentelemetry.exporter.otlp.proto.http"]
)
def test_without_the_otel_extra_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigError, match=r"pip install 'trio-spate\[otel\]'"):
        configure(service_name="x", endpoint="http://127.0.0.1:4318")


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
        ("http://127.0.0.1:4318/", "http://127.0.0.1:4318"),
        ("  https://otel.example:443/ ", "https://otel.example:443"),
        ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318"),
        ("http://collector/otlp/v1/metrics", "http://collector/otlp"),
        ("http://[::1]:4318?x=1", "http://[::1]:4318"),
    ],
)
def test_endpoint_is_a_base_url(given: str, base: str) -> None:
    assert _normalize_endpoint(given) == base


@pytest.mark.parametrize("bad", ["127.0.0.1:4318", "grpc://127.0.0.1:4317", "http://", "", "4318"])
def test_a_bad_endpoint_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"http\(s\) URL such as http://127.0.0.1:4318"):
        configure(endpoint=bad)


def test_a_non_http_protocol_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL='grpc'.*http/protobuf"):
        configure(endpoint="http://127.0.0.1:4318")


def test_the_per_signal_protocol_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    # Gets past the protocol check and stops at the globals the test session installed.
    with pytest.raises(ConfigError, match="already configured"):
        configure(endpoint="http://127.0.0.1:4318")


@pytest.mark.parametrize("variable", ["OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"])
def test_an_unsupported_exporter_is_refused(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "zipkin")
    with pytest.raises(
        ConfigError, match=f"{variable}='zipkin'.*otlp, console, (prometheus, )?none"
    ):
        configure()


def test_a_bad_export_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="export_interval"):
        configure(export_interval=0)


async def test_sdk_disabled_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry = configure(service_name="off", endpoint="http://127.0.0.1:4318")
    assert telemetry.tracer_provider is None
    assert telemetry.meter_provider is None
    assert await telemetry.aflush() is True
    await telemetry.ashutdown()


def test_nothing_to_configure_is_not_an_error() -> None:
    telemetry = configure(traces=False, metrics=False)
    assert telemetry.tracer_provider is None
    assert telemetry.meter_provider is None


def test_configuring_twice_in_a_process_is_refused() -> None:
    # The session's fixtures installed global providers, as an application would have.
    with pytest.raises(ConfigError, match=r"already configured.*at most once per process"):
        configure(endpoint="http://127.0.0.1:4318")
    with pytest.raises(ConfigError, match="global meter provider"):
        configure(endpoint="http://127.0.0.1:4318", traces=False)


@pytest.mark.parametrize("port", [-1, 65536, "9464", True])
def test_a_bad_prometheus_port_is_refused(port: object) -> None:
    with pytest.raises(ConfigError, match="prometheus_port must be a port number"):
        configure(prometheus_port=port)  # type: ignore[arg-type]


def test_a_bad_prometheus_port_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "ninety")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_PROMETHEUS_PORT='ninety'"):
        configure()


def test_a_prometheus_port_without_metrics_is_refused() -> None:
    with pytest.raises(ConfigError, match="metrics=False"):
        configure(metrics=False, prometheus_port=9464)
