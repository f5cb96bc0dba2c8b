"""A fleet's metrics, read through the OpenTelemetry SDK while it runs.

Workers use the default hooks (the global meter provider's instruments, installed here with
an in-memory reader). Sampled every half second of the run: for every worker, revocations
requested = drained + forced + cancelled + in flight, with in flight never negative and never
more than the drains the worker reports; at the end none is in flight and the gauges agree
with the verdict.
"""

from __future__ import annotations

import random

import trio
import trio.testing

from spate import AllComplete, Config, Plan, PlanContext, SplitHandle, SplitSpec, run_worker
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

from .conftest import Meters

LEASE = 3.0
SPLITS = 12
STEPS = 30
OUTCOMES = ("requested", "drained", "forced", "cancelled")


def config() -> Config:
    return Config(
        lease_duration=LEASE,
        op_timeout=0.5,
        max_in_flight=4,
        rebalance_delay=0.0,
        # No join window: the joins at 2 s and 6 s must find a placed job and take splits from
        # it (revocations), not be included in the first placement.
        membership_debounce=0.0,
        drain_deadline=LEASE,
        reconcile_interval=LEASE,
        planner_thread=False,
    )


def plan(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec(f"m{i:02d}") for i in range(SPLITS)], final=True)


async def handle(split: SplitHandle) -> None:
    pos = split.progress.watermark or 0
    while pos < STEPS:
        await trio.sleep(0.5)
        pos += 1
        if int(split.id[1:]) % 2 == 0 and split.revoke_requested.is_set():
            # Handlers that cannot stop quickly: their revocations are forced at the deadline.
            await trio.sleep(LEASE * 2)
        await split.commit(pos)
        if split.revoke_requested.is_set():
            return
    await split.commit(pos, completed=True)


def revocations(meters: Meters, job: str) -> dict[str, dict[str, float]]:
    by_instance: dict[str, dict[str, float]] = {}
    for attrs, point in meters.points("spate.coordination.revocations"):
        if attrs["spate.job"] != job:
            continue
        counts = by_instance.setdefault(str(attrs["spate.instance"]), dict.fromkeys(OUTCOMES, 0.0))
        counts[str(attrs["spate.outcome"])] += point.value  # type: ignore[attr-defined]
    return by_instance


def draining(meters: Meters, job: str) -> dict[str, float]:
    return {
        str(attrs["spate.instance"]): point.value  # type: ignore[attr-defined]
        for attrs, point in meters.points("spate.coordination.splits.draining")
        if attrs["spate.job"] == job
    }


async def test_revocation_identity_and_levels_through_a_fleet_run(
    global_meters: Meters, autojump_clock: trio.testing.MockClock
) -> None:
    job = "metrics-fleet"
    server = MemoryServer()
    verdicts: dict[str, object] = {}
    scopes: dict[str, trio.CancelScope] = {}
    faults: dict[str, FaultyStore] = {}
    samples = 0
    in_flight_seen = 0

    async def worker(name: str) -> None:
        async with MemoryStore(server=server, ephemeral_ttl=LEASE) as client:
            faults[name] = FaultyStore(client, rng=random.Random(name))
            with scopes.setdefault(name, trio.CancelScope()):
                verdicts[name] = await run_worker(
                    faults[name], job=job, instance=name, planner=plan, handler=handle,
                    config=config(), leave_deadline=LEASE * 2,
                )  # fmt: skip

    async def sample(done: trio.Event) -> None:
        nonlocal samples, in_flight_seen
        while not done.is_set():
            await trio.sleep(0.5)
            levels = draining(global_meters, job)
            for name, counts in revocations(global_meters, job).items():
                in_flight = (
                    counts["requested"] - counts["drained"] - counts["forced"] - counts["cancelled"]
                )
                assert in_flight >= 0, (name, counts)
                if name in levels:
                    assert in_flight <= levels[name], (name, counts, levels[name])
                in_flight_seen = max(in_flight_seen, int(in_flight))
            samples += 1

    finished = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample, finished)
        async with trio.open_nursery() as fleet:
            fleet.start_soon(worker, "a")
            fleet.start_soon(worker, "b")
            await trio.sleep(2.0)
            fleet.start_soon(worker, "c")  # joins: revocations on a and b
            await trio.sleep(4.0)
            fleet.start_soon(worker, "d")  # more rebalancing
            await trio.sleep(4.0)
            scopes["b"].cancel()  # leaves gracefully
        finished.set()

    assert {verdicts[n] for n in ("a", "c", "d")} == {AllComplete()}
    assert samples > 20
    assert in_flight_seen >= 1  # revocations were caught in flight, not only settled
    final = revocations(global_meters, job)
    total = dict.fromkeys(OUTCOMES, 0.0)
    for name, counts in final.items():
        for outcome in OUTCOMES:
            total[outcome] += counts[outcome]
        # Every worker's revocations settled: none in flight once the job is over.
        assert counts["requested"] == counts["drained"] + counts["forced"] + counts["cancelled"], (
            name
        )
    assert total["requested"] >= 2
    assert total["drained"] >= 1
    assert total["forced"] >= 1  # the slow drains of even splits
    # Drains were timed, and every level is reported by workers still open (none: all left).
    assert global_meters.points("spate.coordination.drain.duration")
    assert draining(global_meters, job) == {}
    where = {"spate.job": job}
    acquired = global_meters.value("spate.coordination.acquisitions", where)
    assert acquired >= SPLITS
    assert (
        global_meters.value("spate.coordination.writes", {**where, "spate.operation": "commit"})
        >= SPLITS * 2
    )
