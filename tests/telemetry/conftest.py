"""Fixtures for the telemetry tests: one global SDK tracer provider, spans captured in memory.

OpenTelemetry's global tracer provider can be set once per process, and spate's tracers are
proxies onto whatever is global. So the first test that needs spans installs an SDK provider
(or, if something else in this process already installed one, adds a processor to it); every
test then sees only its own spans because the exporter is cleared around it. Metrics never
need the global provider: the tests give :class:`spate.telemetry.Instruments` their own
meter provider with an in-memory reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, Sampler, SamplingResult

from spate.telemetry import instruments


class _Recording(Sampler):
    """Samples only while a telemetry test runs.

    The global provider outlives these tests; every later test of the session would
    otherwise pay for recording spans nobody reads (and keep them in memory).
    """

    def __init__(self) -> None:
        self.on = False
        self._yes = ALWAYS_ON

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        if self.on:
            return self._yes.should_sample(*args, **kwargs)
        return SamplingResult(Decision.DROP)

    def get_description(self) -> str:
        return "on during spate telemetry tests"


class _Capture(SimpleSpanProcessor):
    def __init__(self, exporter: InMemorySpanExporter, switch: _Recording) -> None:
        super().__init__(exporter)
        self.switch = switch

    def on_end(self, span: ReadableSpan) -> None:
        if self.switch.on:
            super().on_end(span)


_CAPTURE = "_spate_tests_capture"
"""The attribute of the global provider that holds the process's one capture."""


def _capture() -> tuple[InMemorySpanExporter, _Recording]:
    """The process's one span capture (its exporter and its switch), kept on the provider.

    Not in module globals: pytest loads this file as ``telemetry.conftest`` while tests in
    other folders import ``tests.telemetry.conftest`` for its fixture, so the module can run
    twice in one process. Two module-level captures meant the provider's sampler was the
    first's switch, which the second's fixture never turned on: its tests saw no spans
    whenever one of those other tests ran first.
    """
    provider = trace.get_tracer_provider()
    switch: _Recording | None = None
    if isinstance(provider, trace.ProxyTracerProvider):
        switch = _Recording()
        provider = TracerProvider(sampler=switch)
        trace.set_tracer_provider(provider)
    if not isinstance(provider, TracerProvider):
        pytest.skip(f"a non-SDK global tracer provider is installed: {provider!r}")
    found: tuple[InMemorySpanExporter, _Recording] | None = getattr(provider, _CAPTURE, None)
    if found is None:
        switch = switch or _Recording()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(_Capture(exporter, switch))
        found = (exporter, switch)
        setattr(provider, _CAPTURE, found)
    return found


class Spans:
    """The spans finished during one test."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in self.all()]}"
        return found[0]

    def clear(self) -> None:
        self._exporter.clear()


@pytest.fixture
def spans() -> Iterator[Spans]:
    """Spans finished during the test (global SDK provider, in-memory exporter)."""
    exporter, switch = _capture()
    exporter.clear()
    switch.on = True
    try:
        yield Spans(exporter)
    finally:
        switch.on = False
        exporter.clear()


class Meters:
    """A meter provider with an in-memory reader, and spate's instruments on it."""

    def __init__(
        self, reader: InMemoryMetricReader | None = None, *, global_: bool = False
    ) -> None:
        self.provider: MeterProvider
        if global_:
            assert reader is not None
            global_provider = metrics.get_meter_provider()
            assert isinstance(global_provider, MeterProvider)
            self.reader = reader
            self.provider = global_provider
            self.instruments = instruments()
        else:
            self.reader = InMemoryMetricReader()
            self.provider = MeterProvider(metric_readers=[self.reader])
            self.instruments = instruments(self.provider)

    def points(self, name: str) -> list[tuple[dict[str, object], object]]:
        """(attributes, data point) of every point of metric ``name`` collected now."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, object], object]] = []
        if data is None:
            return found
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend((dict(p.attributes or {}), p) for p in metric.data.data_points)
        return found

    def value(self, name: str, where: Mapping[str, object] | None = None) -> float:
        """Sum of the values of the points whose attributes include ``where`` (0 if none)."""
        total = 0.0
        for attrs, point in self.points(name):
            if all(attrs.get(k) == v for k, v in (where or {}).items()):
                total += point.value  # type: ignore[attr-defined]
        return total


_global_reader: InMemoryMetricReader | None = None


@pytest.fixture
def global_meters() -> Meters:
    """The process-global meter provider (installed once, with an in-memory reader).

    Counters there accumulate across tests: compare before and after, never absolute values.
    """
    global _global_reader
    if _global_reader is None:
        if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
            pytest.skip("a global meter provider was installed by something else")
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _global_reader = reader
    return Meters(_global_reader, global_=True)


@pytest.fixture
def meters() -> Iterator[Meters]:
    """spate's instruments on a private meter provider with an in-memory reader."""
    m = Meters()
    yield m
    m.provider.shutdown()
