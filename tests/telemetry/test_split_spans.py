"""A split is a fenced write like a commit: a ``spate.split`` span and the writes counter."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from opentelemetry.trace import StatusCode

from spate import Fenced, Gained, MetricsHooks, Plan, PlanContext, SplitSpec, open_coordinator
from spate._core.records import ProgressRecord, decode, encode
from spate._metrics import WriteOutcome
from spate.store import Keyspace, Won
from spate_stores.memory import MemoryStore
from tests.common import JOB, KEYS, config

from .conftest import Spans


class _Writes(MetricsHooks):
    def __init__(self) -> None:
        self.seen: list[tuple[str, WriteOutcome]] = []

    def write(self, operation: str, outcome: WriteOutcome, duration: float) -> None:
        self.seen.append((operation, outcome))


def _plan(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec("s0", b"0:100")], final=True)


async def test_a_split_has_its_span_and_is_counted_by_outcome(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    writes = _Writes()
    async with (
        MemoryStore(ephemeral_ttl=9.0) as store,
        open_coordinator(
            store, job=JOB, instance="w", planner=_plan, config=config(), metrics=writes
        ) as coord,
    ):
        events = coord.events()
        async for event in events:
            if isinstance(event, Gained):
                break
        residual = await coord.split("s0", b"0:50", b"50:100")
        span = next(s for s in spans.named("spate.split"))
        attributes = span.attributes or {}
        assert attributes["spate.split"] == "s0"
        assert attributes["spate.outcome"] == "won"
        assert span.status.status_code is StatusCode.UNSET
        # A stale owner's split: the record moved past this tenancy behind its back.
        entry = await store.get(Keyspace.DURABLE, KEYS.split("s0"))
        assert entry is not None
        record = decode(ProgressRecord, entry.key, entry.value)
        taken = attrs.evolve(record, epoch=record.epoch + 1, owner="other", owner_nonce="x")
        moved = await store.update(
            Keyspace.DURABLE, KEYS.split("s0"), encode(taken), expected=entry.revision
        )
        assert isinstance(moved, Won)
        with pytest.raises(Fenced):
            await coord.split("s0", b"0:25", b"25:50")
        lost = [s for s in spans.named("spate.split") if s.status.status_code is StatusCode.ERROR]
        assert len(lost) == 1
        assert (lost[0].attributes or {})["spate.outcome"] == "lost"
        assert ("split", "won") in writes.seen
        assert ("split", "lost") in writes.seen
        assert residual.startswith("s0.r")
