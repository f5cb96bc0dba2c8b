"""Sessions on real servers: one body per scenario, run by the etcd and the NATS suites.

* A worker stops with FatalCoordinationError inside an application that catches it and keeps
  its store client open: the rest of the fleet must still finish (its session ended with it).
* A worker is cut off from the server by a black-holing proxy (bytes stop both ways, nothing
  is reset): it stops every split within about a lease, the others finish the job with correct
  results, nothing it sent lands after the heal, and it returns.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import attrs
import trio

from spate import (
    AllComplete,
    Config,
    FatalCoordinationError,
    Fenced,
    Plan,
    PlanContext,
    SplitHandle,
    SplitSpec,
    run_worker,
)
from spate._core.records import Keys, ProgressRecord, decode
from spate.store import Entry, Keyspace, Store
from spate_stores import open_store
from spate_testing.blackhole import open_blackhole

JOB = "sessions"
STEPS = 12
"""Commits per split: watermarks 1..STEPS, the last one completing it."""
SCENARIO_TIMEOUT = 90.0
"""A scenario that has not finished by then is stuck (the bug this file guards against)."""


def planner(count: int) -> Callable[[PlanContext], Plan]:
    def plan(_: PlanContext) -> Plan:
        return Plan([SplitSpec(f"s{i}") for i in range(count)], final=True)

    return plan


def fleet_config() -> Config:
    # Departed workers' splits move at once: the scenarios measure sessions, not the
    # restart grace.
    return Config(rebalance_delay=0.0, membership_debounce=0.0, max_in_flight=4)


@attrs.define
class Tracker:
    """What each worker's handlers are doing, for the scenario's checks."""

    active: dict[str, set[str]] = attrs.field(factory=dict)
    changed: trio.Event = attrs.field(factory=trio.Event)

    def enter(self, worker: str, split: str) -> None:
        self.active.setdefault(worker, set()).add(split)
        self.poke()

    def leave(self, worker: str, split: str) -> None:
        self.active.setdefault(worker, set()).discard(split)
        self.poke()

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self.changed.wait()


def handler_for(
    worker: str, tracker: Tracker, step: float, *, regress: bool = False
) -> Callable[[SplitHandle], Awaitable[None]]:
    async def handle(split: SplitHandle) -> None:
        tracker.enter(worker, split.id)
        try:
            start = split.progress.watermark or 0
            if regress and start == 0:
                # A bug in the work source: the watermark goes backwards. The commit is
                # refused and the coordinator stops with FatalCoordinationError.
                await split.commit(5)
                await split.commit(3)
            for mark in range(start + 1, STEPS + 1):
                await trio.sleep(step)
                await split.commit(mark, completed=mark == STEPS)
                if split.revoke_requested.is_set():
                    return  # committed: the split goes back with nothing to replay
        except Fenced:
            return
        finally:
            tracker.leave(worker, split.id)

    return handle


async def progress_records(store: Store) -> dict[str, Entry]:
    keys = Keys(JOB)
    return {
        entry.key: entry
        for entry in await store.list(Keyspace.DURABLE, keys.split_prefix)
        if entry.key.startswith(keys.split_prefix)
    }


def assert_all_completed(records: dict[str, Entry], count: int) -> None:
    assert len(records) == count, sorted(records)
    for key, entry in records.items():
        record = decode(ProgressRecord, key, entry.value)
        assert record.completed, (key, record)
        assert record.watermark == STEPS, (key, record)


async def fatal_error_while_the_application_lives_on(url: str, *, splits: int = 6) -> None:
    """A handler's regressing commit stops one worker; its app keeps the client open; the
    other workers still finish the whole job."""
    tracker = Tracker()
    verdicts: dict[str, AllComplete | object] = {}
    failed = trio.Event()

    async def good(instance: str) -> None:
        async with open_store(url) as store:
            verdicts[instance] = await run_worker(
                store,
                job=JOB,
                instance=instance,
                planner=planner(splits),
                handler=handler_for(instance, tracker, 0.05),
                config=fleet_config(),
            )

    async def application(others_done: trio.Event) -> None:
        # One long-lived client; the worker inside it dies, the application does not.
        async with open_store(url) as store:
            try:
                await run_worker(
                    store,
                    job=JOB,
                    instance="bad",
                    planner=planner(splits),
                    handler=handler_for("bad", tracker, 0.05, regress=True),
                    config=fleet_config(),
                )
            except FatalCoordinationError:
                failed.set()
            # Still open, still usable: the worker's session ended, the client did not.
            assert await store.get(Keyspace.DURABLE, Keys(JOB).plan) is not None
            await others_done.wait()

    with trio.fail_after(SCENARIO_TIMEOUT):
        others_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(application, others_done)
            async with trio.open_nursery() as fleet:
                # The bad worker starts first so it leads and holds splits when it fails.
                await tracker.wait_for(lambda: bool(tracker.active.get("bad")))
                fleet.start_soon(good, "good-1")
                fleet.start_soon(good, "good-2")
            others_done.set()
    assert failed.is_set(), "the regressing commit did not stop its worker"
    assert all(isinstance(v, AllComplete) for v in verdicts.values()), verdicts
    async with open_store(url) as store:
        assert_all_completed(await progress_records(store), splits)


@attrs.frozen
class PartitionReport:
    """What the partition scenario measured (for the issue note)."""

    lease: float
    stopped_after: float
    """Seconds from the cut until the cut-off worker had stopped every split."""
    finished_after: float
    """Seconds from the cut until the others had finished the job."""
    returned_after_heal: float
    """Seconds from the heal until the cut-off worker's run_worker returned."""


async def partition_of_one_worker(
    url: str, host: str, port: int, *, splits: int = 6, cut_url_params: str = ""
) -> PartitionReport:
    """Cut one worker off mid-job; check stop, finish, no late landing, and return."""
    tracker = Tracker()
    verdicts: dict[str, object] = {}
    finished: dict[str, float] = {}

    async def worker(instance: str, store_url: str) -> None:
        async with open_store(store_url) as store:
            verdicts[instance] = await run_worker(
                store,
                job=JOB,
                instance=instance,
                planner=planner(splits),
                handler=handler_for(instance, tracker, 0.4),
                config=fleet_config(),
            )
            finished[instance] = trio.current_time()
            tracker.poke()

    with trio.fail_after(SCENARIO_TIMEOUT):
        async with open_store(url) as observer, open_blackhole(host, port) as proxy:
            lease = observer.ephemeral_ttl
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker, "cut", proxy.url_for(url) + cut_url_params)
                await tracker.wait_for(lambda: bool(tracker.active.get("cut")))
                nursery.start_soon(worker, "near-1", url)
                nursery.start_soon(worker, "near-2", url)
                # Every worker busy: the cut takes work away from a full fleet.
                await tracker.wait_for(
                    lambda: all(tracker.active.get(w) for w in ("cut", "near-1", "near-2"))
                )
                proxy.cut()
                cut_at = trio.current_time()
                await tracker.wait_for(lambda: not tracker.active.get("cut"))
                stopped_after = trio.current_time() - cut_at
                await tracker.wait_for(lambda: "near-1" in finished and "near-2" in finished)
                finished_after = max(finished.values()) - cut_at
                assert "cut" not in finished, "the cut-off worker finished while cut off"
                before_heal = await progress_records(observer)
                assert_all_completed(before_heal, splits)
                proxy.heal()
                healed_at = trio.current_time()
            returned_after_heal = finished["cut"] - healed_at
            # Held requests flowed after the heal; none of them changed a progress record.
            await trio.sleep(1.0)
            after = await progress_records(observer)
            assert {k: e.revision for k, e in after.items()} == {
                k: e.revision for k, e in before_heal.items()
            }, "a write of the cut-off worker landed after the heal"
    assert all(isinstance(v, AllComplete) for v in verdicts.values()), verdicts
    # About a lease: the last confirmed keepalive (or renewal) came before the cut, and the
    # self-fence is checked at every heartbeat (a jittered third of the lease).
    assert stopped_after <= lease * 1.5 + 1.0, (stopped_after, lease)
    assert math.isfinite(returned_after_heal)
    return PartitionReport(lease, stopped_after, finished_after, returned_after_heal)
