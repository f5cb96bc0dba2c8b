"""A fleet whose handlers never split costs (next to) nothing for the leader's split requests.

A fleet with spare lanes (more lanes than splits) is exactly the case the leader asks running
splits to split in; handlers that ignore ``split_requested`` must not keep it asking. Two
remedies, each with a test: the leader learns it (after a few ignored requests and no split
seen it only probes, one request every few minutes), and a worker can say so
(``Config.split_requests=False``, carried on its presence record: its splits are never asked).
Memory store, virtual time.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from spate import Config, Plan, PlanContext, SplitHandle, SplitRequested, SplitSpec, run_worker
from spate._core.records import PresenceRecord, decode
from spate.store import Keyspace
from spate_stores.memory import MemoryServer, MemoryStore
from tests.common import JOB, KEYS
from tests.runtime.harness import HookStore, spawn

SPLITS, WORKERS, LANES = 64, 4, 32
TTL = 15.0
SETTLE, SPAN = 120.0, 600.0


class CountingStore(HookStore):
    """Counts every store call: reads, listings and writes."""

    def __init__(self, inner: MemoryStore, counts: collections.Counter[str]) -> None:
        super().__init__(inner)
        self.counts = counts

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        self.counts["get"] += 1
        return await super().get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> Any:
        self.counts["list"] += 1
        return await super().list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        self.counts["list"] += 1
        return super().list_pages(keyspace, prefix, page_size=page_size)

    async def _write(self, kind: str, keyspace: Keyspace, key: str, call: Any) -> Any:
        self.counts[kind] += 1
        return await super()._write(kind, keyspace, key, call)


def _plan_of(count: int) -> Callable[[PlanContext], Plan]:
    def plan(ctx: PlanContext) -> Plan:
        ids = [f"s{i:02d}" for i in range(count)]
        return Plan([SplitSpec(i) for i in ids if i not in ctx.known], final=True)

    return plan


async def _never_splits(split: SplitHandle) -> None:
    await split.revoke_requested.wait()


async def _idle_fleet_calls(config: Config) -> int:
    """The store calls of an idle fleet of handlers that never split, over SPAN seconds."""
    server = MemoryServer()
    counts: collections.Counter[str] = collections.Counter()

    async def one(n: int) -> None:
        store = CountingStore(MemoryStore(server=server, ephemeral_ttl=TTL), counts)
        await run_worker(
            store,
            job=JOB,
            instance=f"w{n}",
            planner=_plan_of(SPLITS),
            handler=_never_splits,
            config=config,
        )

    async with trio.open_nursery() as nursery:
        for n in range(WORKERS):
            nursery.start_soon(one, n)
        await trio.sleep(SETTLE)  # (the first requests are made and ignored in here)
        before = sum(counts.values())
        await trio.sleep(SPAN)
        calls = sum(counts.values()) - before
        nursery.cancel_scope.cancel()
    return calls


def _config(**overrides: Any) -> Config:
    # Production defaults (split requests on, their debounce, drain_deadline, the backoff),
    # lanes to spare, and an inline planner (a planner thread would race the mock clock).
    return Config(max_in_flight=LANES, planner_thread=False, **overrides)


async def test_an_idle_fleet_whose_handlers_ignore_requests_costs_what_one_without_requests_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked = await _idle_fleet_calls(_config())
    off = await _idle_fleet_calls(_config(split_requests=False))
    # A request every few minutes at most (an assignment rewrite and a few reads of the
    # split), against a fleet making about 800 calls in those ten minutes anyway.
    assert asked <= off * 1.1, (asked, off)


async def test_a_worker_whose_handlers_never_split_says_so_and_is_never_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    asking = _config(split_requests=True, split_request_delay=0.0)
    declines = _config(split_requests=False)

    def client() -> MemoryStore:
        return MemoryStore(server=server, ephemeral_ttl=TTL)

    async with trio.open_nursery() as nursery:
        # 16 splits on two workers of 32 lanes: lanes sit idle, so the leader asks.
        leader = await spawn(nursery, client(), "a", planner=_plan_of(16), cfg=asking)
        await trio.sleep(5)  # a leads
        other = await spawn(nursery, client(), "b", planner=_plan_of(16), cfg=declines)
        await trio.sleep(120)
        # b said its handlers never split: the leader asks its own splits, never b's.
        async with client() as store:
            entry = await store.get(Keyspace.EPHEMERAL, KEYS.worker("b"))
        assert entry is not None
        assert decode(PresenceRecord, entry.key, entry.value).split_requests is False
        assert other.c.owned, "b was given splits"
        assert leader.of(SplitRequested)
        assert other.of(SplitRequested) == []
        nursery.cancel_scope.cancel()
