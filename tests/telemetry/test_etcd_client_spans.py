"""The etcd adapter's gateway calls are client spans beneath spate's write spans."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from spate import _write_spans as write_spans
from spate.store import Conflict, Keyspace, Won
from spate_stores import open_store
from spate_testing.servers.etcd import etcd_server

from .conftest import Spans

pytestmark = pytest.mark.etcd


async def test_gateway_calls_are_client_spans_without_secrets(spans: Spans) -> None:
    async with etcd_server(auth=True) as etcd:
        url = etcd.store_url("telemetry", ttl=5)
        password = etcd.password
        assert password
        async with open_store(url) as store:
            scope = write_spans.Scope("j", "w", store.capabilities.system)
            key = "j.split.a"
            spans.clear()  # opening the store made its own calls (namespace, lease)
            won = await write_spans.write(
                store,
                scope,
                "claim",
                "create",
                Keyspace.DURABLE,
                key,
                b"secret-value",
                split="a",
                epoch=1,
            )
            lost = await write_spans.write(
                store,
                scope,
                "claim",
                "create",
                Keyspace.DURABLE,
                key,
                b"secret-value",
                split="a",
                epoch=1,
            )
    assert isinstance(won, Won)
    assert isinstance(lost, Conflict)
    claims = spans.named("spate.claim")
    assert [c.attributes["spate.outcome"] for c in claims] == ["won", "lost"]  # type: ignore[index]
    assert all(c.attributes["db.system"] == "etcd" for c in claims)  # type: ignore[index]
    claim_ids = {c.context.span_id: c for c in claims}
    clients = [s for s in spans.all() if s.kind is SpanKind.CLIENT]
    under = [s for s in clients if s.parent is not None and s.parent.span_id in claim_ids]
    assert len(under) >= 2
    for client in under:
        attributes = dict(client.attributes or {})
        assert attributes["db.system.name"] == "etcd"
        assert attributes["db.operation.name"] == "txn"
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == int(etcd.endpoint.rsplit(":", 1)[1])
        assert client.context.trace_id == claim_ids[client.parent.span_id].context.trace_id  # type: ignore[union-attr]
    everything = repr([s.to_json() for s in spans.all()])
    assert "secret-value" not in everything
    assert password not in everything
    assert "root" not in everything
