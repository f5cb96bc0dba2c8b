"""The names under which Prometheus sees every instrument spate creates.

An SDK meter provider with the OpenTelemetry Prometheus exporter's reader gets spate's
instruments; a thin meter wrapper gives every instrument one data point as it is created (a
sync instrument is recorded once, an observable one gets one more callback), so every series
family appears in one scrape, named by the exporter's own translation. Whatever instruments
spate adds later show up here without a list to maintain.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from spate.telemetry import Instruments


def _one(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(1)]


class _Meter:
    def __init__(self, meter: Any) -> None:
        self._meter = meter

    def __getattr__(self, name: str) -> Any:
        create = getattr(self._meter, name)
        if not name.startswith("create_"):
            return create

        def created(*args: Any, **kwargs: Any) -> Any:
            if name.startswith("create_observable_"):
                kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), _one]
                return create(*args, **kwargs)
            instrument = create(*args, **kwargs)
            if hasattr(instrument, "add"):
                instrument.add(1)
            elif hasattr(instrument, "record"):
                instrument.record(1)
            else:
                instrument.set(1)
            return instrument

        return created


class _Provider:
    def __init__(self, provider: MeterProvider) -> None:
        self._provider = provider

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return _Meter(self._provider.get_meter(*args, **kwargs))


@functools.cache
def exposition() -> str:
    """One scrape of every spate instrument, each with a data point."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    Instruments(_Provider(provider))  # type: ignore[arg-type]
    try:
        return generate_latest(registry).decode()
    finally:
        provider.shutdown()


@functools.cache
def exported_names() -> frozenset[str]:
    """Every Prometheus series name spate exports (``_total``, ``_bucket``... included)."""
    names = re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", exposition(), re.MULTILINE)
    return frozenset(n for n in names if n.startswith("spate_"))
