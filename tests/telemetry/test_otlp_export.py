"""End to end: configure() exports spate's spans and metrics over OTLP/HTTP to a receiver.

configure() installs global providers, which a process can do once, so the exporting side
runs in a fresh interpreter; the receiver (Trio + h11, decoding the protobuf with
opentelemetry-proto) runs in the test. Real clock: the export crosses processes.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap

import trio
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from spate.telemetry import Telemetry

from ._otlp_receiver import Receiver

EXPORTER = textwrap.dedent(
    """
    import sys, trio
    from spate import telemetry
    from spate import _write_spans as write_spans
    from spate.store import Keyspace
    from spate_stores.memory import MemoryStore

    async def main() -> None:
        endpoint = sys.argv[1] if len(sys.argv) > 1 else None
        t = telemetry.configure(service_name="spate-e2e", endpoint=endpoint, export_interval=3600)
        metrics = telemetry.metrics_for("job-e2e", "w-1")
        scope = write_spans.Scope("job-e2e", "w-1", "memory", metrics)
        key = "job-e2e.split.s-7"
        async with MemoryStore() as store:
            claim = await write_spans.write(
                store, scope, "claim", "create", Keyspace.DURABLE, key, b"x", split="s-7", epoch=1
            )
            await write_spans.write(
                store, scope, "commit", "update", Keyspace.DURABLE, key, b"y",
                expected=claim.revision, split="s-7", epoch=1,
            )
            # A zombie's late commit: built on the revision before the last one.
            await write_spans.write(
                store, scope, "commit", "update", Keyspace.DURABLE, key, b"z",
                expected=claim.revision, split="s-7", epoch=1,
            )
        await t.ashutdown()
        print(t.service_name, t.traces_endpoint, t.metrics_endpoint)

    trio.run(main)
    """
)


async def run_exporter(args: list[str], env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = await trio.run_process(
        [sys.executable, "-c", EXPORTER, *args],
        env={**clean, **env},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    # The OTLP exporter logs failed exports instead of raising: none may have failed.
    assert b"Failed to export" not in result.stderr, result.stderr.decode()
    return result.stdout.decode().strip()


async def test_configure_exports_spans_and_metrics(nursery: trio.Nursery) -> None:
    receiver: Receiver = await nursery.start(Receiver().serve)
    with trio.fail_after(30):
        printed = await run_exporter([receiver.endpoint + "/"], {})
    assert printed == (f"spate-e2e {receiver.endpoint}/v1/traces {receiver.endpoint}/v1/metrics")
    assert receiver.errors == []
    spans = receiver.spans()
    assert {s.service for s in spans} == {"spate-e2e"}
    assert {s.scope for s in spans} == {"spate"}
    assert [s.name for s in spans] == ["spate.claim", "spate.commit", "spate.commit"]
    claim, commit, zombie = spans
    assert claim.attributes == {
        "spate.job": "job-e2e",
        "spate.instance": "w-1",
        "db.system": "memory",
        "spate.keyspace": "durable",
        "spate.key": "job-e2e.split.s-7",
        "spate.split": "s-7",
        "spate.epoch": 1,
        "spate.new_revision": claim.attributes["spate.new_revision"],
        "spate.outcome": "won",
    }
    assert commit.attributes["spate.expected_revision"] == claim.attributes["spate.new_revision"]
    assert commit.attributes["spate.outcome"] == "won"
    assert zombie.attributes["spate.outcome"] == "lost"
    assert zombie.status_code == Status.STATUS_CODE_ERROR
    assert zombie.events == ["spate.cas_lost"]
    # Internal writes start traces of their own.
    assert all(s.parent_span_id == b"" for s in spans)

    metrics = receiver.metric_names()
    writes = metrics["spate.coordination.writes"]
    by_outcome: dict[str, int] = {}
    for point in writes:
        attrs = {kv.key: kv.value.string_value for kv in point.attributes}
        assert attrs["spate.job"] == "job-e2e"
        assert attrs["spate.instance"] == "w-1"
        by_outcome[attrs["spate.outcome"]] = (
            by_outcome.get(attrs["spate.outcome"], 0) + point.as_int
        )
    assert by_outcome == {"won": 2, "lost": 1}
    assert sum(p.count for p in metrics["spate.coordination.write.duration"]) == 3


async def test_standard_environment_variables_and_gzip(nursery: trio.Nursery) -> None:
    receiver: Receiver = await nursery.start(Receiver().serve)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_SERVICE_NAME": "renamed-by-operator",
        "OTEL_METRICS_EXPORTER": "none",
    }
    with trio.fail_after(30):
        printed = await run_exporter([], env)
    assert printed == f"renamed-by-operator {receiver.endpoint}/v1/traces None"
    assert receiver.metrics == []
    assert set(receiver.encodings) == {"gzip"}
    spans = receiver.spans()
    assert {s.service for s in spans} == {"renamed-by-operator"}
    assert [s.name for s in spans] == ["spate.claim", "spate.commit", "spate.commit"]


async def test_ashutdown_does_not_block_the_trio_loop(nursery: trio.Nursery) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # A slow collector: every answer waits a second.
    receiver: Receiver = await nursery.start(Receiver(delay=1.0).serve)
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces"))
    )
    for i in range(5):
        with provider.get_tracer("t").start_as_current_span(f"s{i}"):
            pass
    telemetry = Telemetry(service_name="t", tracer_provider=provider, meter_provider=None)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    nursery.start_soon(tick)
    started = trio.current_time()
    with trio.fail_after(30):
        await telemetry.ashutdown()
    elapsed = trio.current_time() - started
    assert elapsed >= 0.9  # the collector's delay was really waited for...
    assert ticks >= 20  # ...while the loop kept running other tasks
    assert [s.name for s in receiver.spans()] == [f"s{i}" for i in range(5)]
    await telemetry.ashutdown()  # idempotent


async def test_spate_demo_exports_its_traces(nursery: trio.Nursery) -> None:
    # `spate demo --otlp-endpoint URL`, as the guide tells a person to run it against Jaeger.
    receiver: Receiver = await nursery.start(Receiver().serve)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    argv = [sys.executable, "-m", "spate", "demo", "--plain", "--duration", "6", "--splits", "16"]
    with trio.fail_after(120):
        result = await trio.run_process(
            [*argv, "--otlp-endpoint", receiver.endpoint],
            env=clean,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, output
    assert "Failed to export" not in output
    spans = receiver.spans()
    assert {s.service for s in spans} == {"spate-demo"}
    names = {s.name for s in spans}
    assert {
        "spate.claim",
        "spate.commit",
        "spate.presence-renew",
        "spate.elect",
        "spate.assign",
    } <= names
    assert {"spate.fail", "spate.requeue"} <= names  # the poison split, and the operator's fix
    # Every late write the demo counts as refused by the fence arrived as a lost span.
    refused = re.search(r"late store writes refused (\d+)", output)
    assert refused is not None, output
    lost = [s for s in spans if s.attributes.get("spate.outcome") == "lost"]
    assert len(lost) >= int(refused.group(1))
    assert all("spate.key" in s.attributes for s in lost)
    assert "spate.coordination.writes" in receiver.metric_names()
