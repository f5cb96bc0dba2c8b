"""A handler's span and spate's commit share one trace; internal writes start their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing
from opentelemetry import trace

from spate import Config, Plan, PlanContext, SplitHandle, SplitSpec, StoreError, run_worker
from spate.store import Keyspace, Session, Write, WriteResult
from spate_stores._tracing import client_span, server_endpoint
from spate_stores.memory import MemoryStore

from .conftest import Spans

tracer = trace.get_tracer("user-app")


def config() -> Config:
    return Config(
        lease_duration=3.0,
        op_timeout=0.5,
        max_in_flight=2,
        rebalance_delay=0.0,
        drain_deadline=3.0,
        reconcile_interval=3.0,
        planner_thread=False,
    )


def plan(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec("a"), SplitSpec("b")], final=True)


class ClientSpans(MemoryStore):
    """A memory store whose writes open a client span, as a network adapter's do."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: int, **named: Any
    ) -> WriteResult:
        with client_span("memory", "update", server=server_endpoint("127.0.0.1", 1)):
            return await super().update(keyspace, key, value, expected, **named)

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        with client_span("memory", "write_many", server=server_endpoint("127.0.0.1", 1)):
            return await super().write_many(writes, session=session)


async def handle(split: SplitHandle) -> None:
    for step in (1, 2):
        with tracer.start_as_current_span("process-batch", attributes={"split": split.id}):
            await trio.sleep(2.0)  # long enough for renewals to interleave
            await split.commit(step, completed=step == 2)


async def test_commit_span_is_a_child_of_the_handler_span(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    async with ClientSpans(ephemeral_ttl=3.0) as store:
        with tracer.start_as_current_span("deploy"):
            verdict = await run_worker(
                store, job="ctx", instance="w1", planner=plan, handler=handle, config=config()
            )
    assert type(verdict).__name__ == "AllComplete"
    batches = {s.context.span_id: s for s in spans.named("process-batch")}
    commits = spans.named("spate.commit")
    assert len(batches) == 4
    assert len(commits) == 4
    for commit in commits:
        assert commit.parent is not None
        parent = batches[commit.parent.span_id]
        assert commit.context.trace_id == parent.context.trace_id
        assert commit.attributes["spate.split"] == parent.attributes["split"]  # type: ignore[index]
    # The store's client span sits beneath the commit, in the same trace; or, for commits sent
    # together, beneath the group's span, a child of the first member's linking them all (a
    # group may carry other writes too: a completed split's lease delete).
    commit_ids = {c.context.span_id for c in commits}
    carried = {
        s.parent.span_id
        for s in spans.named("update memory")
        if s.parent and s.parent.span_id in commit_ids
    }
    for group in spans.named("spate.group-commit"):
        assert group.parent is not None
        assert group.parent.span_id in {link.context.span_id for link in group.links}
        if any(s.parent and s.parent.span_id == group.context.span_id
               for s in spans.named("write_many memory")):  # fmt: skip
            carried |= {link.context.span_id for link in group.links} & commit_ids
    assert carried == commit_ids


async def test_writes_nobody_asked_for_start_their_own_traces(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    async with MemoryStore(ephemeral_ttl=3.0) as store:
        with tracer.start_as_current_span("deploy") as deploy:
            await run_worker(
                store, job="ctx", instance="w1", planner=plan, handler=handle, config=config()
            )
    deploy_trace = deploy.get_span_context().trace_id
    loop_writes = [
        s
        for name in (
            "spate.presence-renew",
            "spate.claim",
            "spate.claim-lease",
            "spate.elect",
            "spate.assign",
        )
        for s in spans.named(name)
    ]
    assert {s.name for s in loop_writes} >= {"spate.presence-renew", "spate.claim", "spate.elect"}
    for span in loop_writes:
        assert span.parent is None, f"{span.name} hangs under {span.parent}"
        assert span.context.trace_id != deploy_trace
    # The startup steps run in the caller's task: they belong to the caller's trace.
    announce = spans.one("spate.announce")
    assert announce.context.trace_id == deploy_trace
