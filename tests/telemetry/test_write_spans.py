"""Spans of single fenced writes and of the operator's requeue: names, attributes, outcomes."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.trace import StatusCode

from spate import MetricsHooks, StoreUnavailable
from spate import _write_spans as write_spans
from spate._core.records import Keys, ProgressRecord, Status, encode
from spate._metrics import WriteOutcome
from spate._ops import OPERATOR
from spate.ops import requeue
from spate.store import Conflict, Keyspace, Won, WriteResult
from spate_stores.memory import MemoryStore
from spate_testing.faults import FaultyStore

from .conftest import Spans

JOB = "job-t"
KEYS = Keys(JOB)


class Recorder(MetricsHooks):
    def __init__(self) -> None:
        self.writes: list[tuple[str, WriteOutcome, float]] = []

    def write(self, operation: str, outcome: WriteOutcome, duration: float) -> None:
        self.writes.append((operation, outcome, duration))


def scope(metrics: MetricsHooks | None = None) -> write_spans.Scope:
    return write_spans.Scope(
        JOB, "w-1", "memory", metrics if metrics is not None else MetricsHooks()
    )


async def test_won_create_carries_every_attribute(spans: Spans) -> None:
    recorder = Recorder()
    async with MemoryStore() as store:
        key = KEYS.split("s-1")
        result = await write_spans.write(
            store,
            scope(recorder),
            "seed",
            "create",
            Keyspace.DURABLE,
            key,
            b"v",
            split="s-1",
            epoch=0,
        )
    assert isinstance(result, Won)
    span = spans.one("spate.seed")
    assert dict(span.attributes or {}) == {
        "spate.job": JOB,
        "spate.instance": "w-1",
        "db.system": "memory",
        "spate.keyspace": "durable",
        "spate.key": key,
        "spate.split": "s-1",
        "spate.epoch": 0,
        "spate.new_revision": result.revision,
        "spate.outcome": "won",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()
    assert [(op, outcome) for op, outcome, _ in recorder.writes] == [("seed", "won")]


async def test_update_records_expected_and_new_revision(spans: Spans) -> None:
    async with MemoryStore() as store:
        key = KEYS.split("s-1")
        first = await store.create(Keyspace.DURABLE, key, b"v0")
        assert isinstance(first, Won)
        result = await write_spans.write(
            store,
            scope(),
            "commit",
            "update",
            Keyspace.DURABLE,
            key,
            b"v1",
            expected=first.revision,
            split="s-1",
            epoch=3,
        )
    assert isinstance(result, Won)
    attributes = spans.one("spate.commit").attributes or {}
    assert attributes["spate.expected_revision"] == first.revision
    assert attributes["spate.new_revision"] == result.revision > first.revision
    assert attributes["spate.epoch"] == 3
    assert attributes["spate.outcome"] == "won"


async def test_lost_cas_is_an_error_status_with_an_event(spans: Spans) -> None:
    recorder = Recorder()
    async with MemoryStore() as store:
        key = KEYS.split("s-1")
        first = await store.create(Keyspace.DURABLE, key, b"v0")
        assert isinstance(first, Won)
        await store.update(Keyspace.DURABLE, key, b"moved", first.revision)
        # A zombie's commit built on the revision it last saw.
        result = await write_spans.write(
            store,
            scope(recorder),
            "commit",
            "update",
            Keyspace.DURABLE,
            key,
            b"late",
            expected=first.revision,
            split="s-1",
            epoch=1,
        )
    assert isinstance(result, Conflict)
    span = spans.one("spate.commit")
    attributes = span.attributes or {}
    assert attributes["spate.outcome"] == "lost"
    assert "spate.new_revision" not in attributes
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["spate.cas_lost"]
    assert [(op, outcome) for op, outcome, _ in recorder.writes] == [("commit", "lost")]


async def test_lost_create_and_guarded_delete(spans: Spans) -> None:
    async with MemoryStore() as store:
        key = KEYS.leader
        won = await write_spans.write(
            store, scope(), "elect", "create", Keyspace.EPHEMERAL, key, b"a"
        )
        lost = await write_spans.write(
            store, scope(), "elect", "create", Keyspace.EPHEMERAL, key, b"b"
        )
        assert isinstance(won, Won)
        assert isinstance(lost, Conflict)
        stale = await write_spans.write(
            store, scope(), "resign", "delete", Keyspace.EPHEMERAL, key, expected=won.revision + 99
        )
        gone = await write_spans.write(
            store, scope(), "resign", "delete", Keyspace.EPHEMERAL, key, expected=won.revision
        )
    assert isinstance(stale, Conflict)
    assert isinstance(gone, Won)
    assert [s.attributes["spate.outcome"] for s in spans.named("spate.elect")] == ["won", "lost"]  # type: ignore[index]
    resign = spans.named("spate.resign")
    assert [s.attributes["spate.outcome"] for s in resign] == ["lost", "won"]  # type: ignore[index]
    assert all(s.attributes["spate.keyspace"] == "ephemeral" for s in resign)  # type: ignore[index]
    assert resign[0].attributes["spate.expected_revision"] == won.revision + 99  # type: ignore[index]


async def test_store_error_is_recorded_and_propagates(spans: Spans) -> None:
    recorder = Recorder()
    async with MemoryStore() as inner:
        store = FaultyStore(inner)
        store.partition()
        with pytest.raises(StoreUnavailable):
            await write_spans.write(
                store,
                scope(recorder),
                "renew",
                "update",
                Keyspace.EPHEMERAL,
                "job-t.x",
                b"",
                expected=1,
            )
    span = spans.one("spate.renew")
    assert span.attributes["spate.outcome"] == "error"  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert str((span.events[0].attributes or {})["exception.type"]).endswith("StoreUnavailable")
    assert [(op, outcome) for op, outcome, _ in recorder.writes] == [("renew", "error")]


class Hangs(MemoryStore):
    """A store whose creates never answer (a request in flight when its caller gives up)."""

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_cancelled_write_is_an_error_of_unknown_outcome(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    recorder = Recorder()
    async with Hangs() as store:
        with trio.move_on_after(1):
            await write_spans.write(
                store, scope(recorder), "claim", "create", Keyspace.EPHEMERAL, "job-t.split.a", b""
            )
    span = spans.one("spate.claim")
    assert span.attributes["spate.outcome"] == "error"  # type: ignore[index]
    assert span.status.status_code is StatusCode.ERROR
    assert "outcome unknown" in (span.status.description or "")
    assert [e.name for e in span.events] == ["spate.cancelled"]
    assert [(op, outcome) for op, outcome, _ in recorder.writes] == [("claim", "error")]


async def test_write_duration_is_measured_on_the_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder()
    async with MemoryStore() as inner:
        from spate_testing.faults import FaultRates

        store = FaultyStore(inner, rates=FaultRates(latency=0.25))
        await write_spans.write(
            store, scope(recorder), "announce", "create", Keyspace.EPHEMERAL, "job-t.w", b""
        )
    [(_, _, duration)] = recorder.writes
    assert duration == pytest.approx(0.25)


async def quarantined(store: MemoryStore, split: str, epoch: int = 4) -> None:
    record = ProgressRecord(
        id=split, epoch=epoch, status=Status.QUARANTINED, owner=None, attempts=5
    )
    await store.create(Keyspace.DURABLE, KEYS.split(split), encode(record))


async def test_requeue_is_a_fenced_write_span(spans: Spans) -> None:
    async with MemoryStore() as store:
        await quarantined(store, "p-1", epoch=4)
        entry = await store.get(Keyspace.DURABLE, KEYS.split("p-1"))
        assert entry is not None
        assert await requeue(store, JOB, ["p-1"]) == ["p-1"]
    span = spans.one("spate.requeue")
    attributes = dict(span.attributes or {})
    assert attributes["spate.job"] == JOB
    assert attributes["spate.instance"] == OPERATOR
    assert attributes["spate.split"] == "p-1"
    assert attributes["spate.epoch"] == 5
    assert attributes["spate.expected_revision"] == entry.revision
    assert attributes["spate.outcome"] == "won"
    assert attributes["db.system"] == "memory"


class MovesOnce:
    """Lets one concurrent write land between requeue's read and its CAS."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.moved = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: int, **named: Any
    ) -> object:
        if not self.moved:
            self.moved = True
            entry = await self.inner.get(keyspace, key)
            assert entry is not None
            await self.inner.update(keyspace, key, entry.value, entry.revision)
        return await self.inner.update(keyspace, key, value, expected, **named)


async def test_requeue_race_shows_a_lost_then_a_won_span(spans: Spans) -> None:
    async with MemoryStore() as inner:
        await quarantined(inner, "p-1")
        store = MovesOnce(inner)
        assert await requeue(store, JOB, ["p-1"]) == ["p-1"]  # type: ignore[arg-type]
    outcomes = [s.attributes["spate.outcome"] for s in spans.named("spate.requeue")]  # type: ignore[index]
    assert outcomes == ["lost", "won"]


def test_a_provider_installed_after_writes_began_is_seen_by_the_next_write() -> None:
    """Until a tracer provider is set, writes skip building spans, and after the API first
    says so they read its global instead of asking (which looks the environment up): the
    first write after one is installed must still see it. In a fresh process, since the
    global provider can be set only once."""
    script = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from spate._write_spans import tracing\n"
        "assert tracing() is False\n"
        "assert tracing() is False  # now from the global\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "assert tracing() is True\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
