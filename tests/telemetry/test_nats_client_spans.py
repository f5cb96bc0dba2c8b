"""The NATS adapter's JetStream requests are client spans beneath spate's write spans."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from spate import _write_spans as write_spans
from spate.store import Conflict, Keyspace, Won
from spate_stores import open_store
from spate_testing.servers.nats import nats_server

from .conftest import Spans

pytestmark = pytest.mark.nats


async def test_jetstream_requests_are_client_spans_without_secrets(spans: Spans) -> None:
    async with (
        nats_server(user="spate", password="pw-0xfeed", websocket=False) as nats,
        open_store(nats.store_url("telemetry", ttl=5)) as store,
    ):
        scope = write_spans.Scope("j", "w", store.capabilities.system)
        key = "j.split.a"
        spans.clear()  # opening the store made its own requests (bucket set-up)
        won = await write_spans.write(
                store, scope, "claim", "create", Keyspace.DURABLE, key, b"value-0xbeef",
                split="a", epoch=1,
            )  # fmt: skip
        lost = await write_spans.write(
                store, scope, "claim", "create", Keyspace.DURABLE, key, b"value-0xbeef",
                split="a", epoch=1,
            )  # fmt: skip
    assert isinstance(won, Won)
    assert isinstance(lost, Conflict)
    claims = spans.named("spate.claim")
    assert [c.attributes["spate.outcome"] for c in claims] == ["won", "lost"]  # type: ignore[index]
    assert all(c.attributes["db.system"] == "nats" for c in claims)  # type: ignore[index]
    claim_ids = {c.context.span_id for c in claims}
    under = [
        s
        for s in spans.all()
        if s.kind is SpanKind.CLIENT and s.parent is not None and s.parent.span_id in claim_ids
    ]
    assert {s.parent.span_id for s in under if s.parent} == claim_ids
    for client in under:
        attributes = dict(client.attributes or {})
        assert attributes["db.system.name"] == "nats"
        assert str(attributes["db.operation.name"]) in {
            "publish",
            "JS.API.DIRECT.GET",
            "JS.API.STREAM.MSG.GET",
        }
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == nats.port
    everything = repr([s.to_json() for s in spans.all()])
    assert "value-0xbeef" not in everything
    assert "pw-0xfeed" not in everything
