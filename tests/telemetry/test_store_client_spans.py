"""The store adapters' client-span helper: conventions, nesting, errors, nothing secret."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from spate import StoreUnavailable
from spate import _write_spans as write_spans
from spate.store import Keyspace, Won
from spate_stores._tracing import client_span, server_endpoint
from spate_stores.memory import MemoryStore

from .conftest import Meters, Spans


class TracedStore:
    """A memory store whose writes look like a network adapter's: one client span each."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> object:
        with client_span(
            "etcd", "txn", server=server_endpoint("127.0.0.1", 2379), namespace="spate/job"
        ):
            return await self.inner.create(keyspace, key, value, **named)


async def test_client_span_nests_under_the_fenced_write(spans: Spans) -> None:
    async with MemoryStore() as inner:
        scope = write_spans.Scope("j", "w", "etcd")
        result = await write_spans.write(
            TracedStore(inner),  # type: ignore[arg-type]
            scope,
            "announce",
            "create",
            Keyspace.EPHEMERAL,
            "j.worker.w",
            b"pw=hunter2",
        )
    assert isinstance(result, Won)
    parent = spans.one("spate.announce")
    child = spans.one("txn spate/job")
    assert child.parent is not None
    assert child.parent.span_id == parent.context.span_id
    assert child.context.trace_id == parent.context.trace_id
    assert child.kind is SpanKind.CLIENT
    assert dict(child.attributes or {}) == {
        "db.system.name": "etcd",
        "db.operation.name": "txn",
        "db.namespace": "spate/job",
        "server.address": "127.0.0.1",
        "server.port": 2379,
    }
    everything = repr([dict(s.attributes or {}) for s in spans.all()])
    assert "hunter2" not in everything


def test_without_namespace_the_span_is_named_after_the_system(spans: Spans) -> None:
    with client_span("nats", "KV.update", server=server_endpoint("::1", None)):
        pass
    span = spans.one("KV.update nats")
    assert "server.port" not in (span.attributes or {})
    assert span.status.status_code is StatusCode.UNSET


def test_an_error_records_its_type_but_not_its_message(spans: Spans) -> None:
    with (
        pytest.raises(StoreUnavailable),
        client_span("etcd", "range", server=server_endpoint("10.0.0.1", 2379)),
    ):
        raise StoreUnavailable("reply quoted a token=s3cret")
    span = spans.one("range etcd")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "StoreUnavailable"
    assert (span.attributes or {})["error.type"] == "StoreUnavailable"
    assert span.events == ()
    assert "s3cret" not in repr(span.to_json())


def count(meters: Meters, **where: object) -> int:
    total = 0
    for attrs, point in meters.points("db.client.operation.duration"):
        if all(attrs.get(k.replace("_", ".")) == v for k, v in where.items()):
            total += point.count  # type: ignore[attr-defined]
    return total


def test_round_trip_durations_are_recorded(spans: Spans, global_meters: Meters) -> None:
    ok_before = count(global_meters, server_address="dur-host")
    for _ in range(3):
        with client_span("etcd", "txn", server=server_endpoint("dur-host", 1)):
            pass
    with (
        pytest.raises(ValueError, match="boom"),
        client_span("etcd", "txn", server=server_endpoint("dur-host", 1)),
    ):
        raise ValueError("boom")
    assert count(global_meters, server_address="dur-host") == ok_before + 4
    [(attrs, _)] = [
        p
        for p in global_meters.points("db.client.operation.duration")
        if p[0].get("server.address") == "dur-host" and "error.type" in p[0]
    ]
    assert attrs["error.type"] == "ValueError"
    assert attrs["db.system.name"] == "etcd"


def test_round_trips_share_spates_duration_buckets(global_meters: Meters) -> None:
    # One list of boundaries for every spate duration (spate.telemetry.SECONDS_BUCKETS); a
    # client round trip adds one below a millisecond, for servers on loopback.
    from spate.telemetry import SECONDS_BUCKETS

    with client_span("etcd", "txn", server=server_endpoint("bucket-host", 1)):
        pass
    [point] = [
        p
        for attrs, p in global_meters.points("db.client.operation.duration")
        if attrs.get("server.address") == "bucket-host"
    ]
    assert tuple(point.explicit_bounds) == (0.0005, *SECONDS_BUCKETS)  # type: ignore[attr-defined]
