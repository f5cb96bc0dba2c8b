"""Unreadable records: one split's bad record costs that split, never the fleet.

Garbage over a split's progress record or spec holds that split aside (quarantined, the
reason naming the key): the other splits run and the verdict counts it; ``spate status``
shows it and ``spate repair`` rewrites an unreadable progress record, after which the job
finishes.
"""

from __future__ import annotations

import logging

import pytest
import trio

import spate
from spate import AllComplete, SplitHandle, Stalled
from spate._core.records import ProgressRecord, Status, decode
from spate.ops import (
    RepairRefused,
    RequeueRefused,
    inspect_plan_repair,
    inspect_repair,
    read_status,
    remove_unreadable_leader,
    repair,
    repair_plan,
    requeue,
)
from spate.store import Keyspace, Store, Won
from spate_stores.memory import MemoryServer

from .harness import JOB, KEYS, client, config, planner_of

GARBAGE = b"\x00\xffnot a record"


async def finish(split: SplitHandle) -> None:
    await split.commit(1, completed=True)


async def seed(store: Store, count: int) -> None:
    """Plan the job (every record written), with nothing run: a worker that leaves at once."""
    async with spate.open_coordinator(
        store, job=JOB, instance="seeder", planner=planner_of(count), config=config()
    ):
        while len(await store.list(Keyspace.DURABLE, KEYS.split_prefix)) < count:  # noqa: ASYNC110
            await trio.sleep(0.1)


async def corrupt(store: Store, key: str) -> None:
    entry = await store.get(Keyspace.DURABLE, key)
    assert entry is not None
    assert isinstance(await store.update(Keyspace.DURABLE, key, GARBAGE, entry.revision), Won)


async def fleet(store_of: list[Store]) -> list[spate.Verdict]:
    """Run one worker per store to the verdict; every verdict, in order."""
    verdicts: list[spate.Verdict] = []

    async def one(store: Store, instance: str) -> None:
        verdicts.append(
            await spate.run_worker(
                store,
                job=JOB,
                instance=instance,
                planner=planner_of(4),
                handler=finish,
                config=config(),
            )
        )

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i, store in enumerate(store_of):
                nursery.start_soon(one, store, f"w{i}")
    return verdicts


async def test_an_unreadable_progress_record_costs_its_split_and_repair_brings_it_back(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()
    store = client(server)
    await seed(store, 4)
    await corrupt(store, KEYS.split("s01"))

    # The fleet runs the rest of the job and ends Stalled, not with a FatalCoordinationError.
    with caplog.at_level(logging.ERROR, logger="spate.view"):
        verdicts = await fleet([client(server), client(server)])
    assert verdicts == [Stalled(completed=3, quarantined=1)] * 2
    assert "job.split.s01" in caplog.text
    assert "spate repair" in caplog.text

    status = await read_status(store, JOB)
    held = status.splits["s01"]
    assert held.status == "quarantined"
    assert held.reason.startswith("unreadable record job.split.s01: ")
    assert status.counts()["quarantined"] == 1
    assert [s for s in status.splits if status.splits[s].status == "completed"] == [
        "s00",
        "s02",
        "s03",
    ]

    # requeue cannot read it, and says what can.
    with pytest.raises(RequeueRefused, match="spate repair"):
        await requeue(store, JOB, ["s01"])
    # repair says what it will write and what is lost, then writes exactly that.
    repairs = await inspect_repair(store, JOB, ["s01"])
    assert [r.split for r in repairs] == ["s01"]
    assert "watermark" in repairs[0].describe()
    garbage = await store.get(Keyspace.DURABLE, KEYS.split("s01"))
    assert garbage is not None
    assert garbage.revision == repairs[0].revision
    assert await repair(store, JOB, repairs) == ["s01"]

    # The repaired split runs: a worker started now finishes the job.
    assert await fleet([client(server)]) == [AllComplete()]
    entry = await store.get(Keyspace.DURABLE, KEYS.split("s01"))
    assert entry is not None
    record = decode(ProgressRecord, entry.key, entry.value, split="s01")
    assert record.status is Status.COMPLETED
    # Its epochs start above every epoch the unreadable record could have held.
    assert record.epoch > garbage.revision


async def test_a_repair_of_a_record_moved_since_it_was_inspected_writes_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())
    await seed(store, 1)
    await corrupt(store, KEYS.split("s00"))
    repairs = await inspect_repair(store, JOB, ["s00"])
    await corrupt(store, KEYS.split("s00"))  # other bytes than the operator confirmed
    with pytest.raises(RepairRefused, match="moved since it was inspected"):
        await repair(store, JOB, repairs)
    entry = await store.get(Keyspace.DURABLE, KEYS.split("s00"))
    assert entry is not None
    assert entry.value == GARBAGE


async def test_repair_refuses_a_readable_split_and_an_unreadable_spec(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())
    await seed(store, 2)
    await corrupt(store, KEYS.spec("s01"))
    with pytest.raises(RepairRefused) as refused:
        await inspect_repair(store, JOB, ["s00", "s01", "nope"])
    message = str(refused.value)
    assert "s00 (its records are readable: nothing to repair" in message
    assert "its spec record 'job.spec.s01' is unreadable" in message
    assert "no such split" in message


async def test_an_unreadable_spec_costs_its_split_and_the_leader_survives(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    store = client(server)
    await seed(store, 4)
    await corrupt(store, KEYS.spec("s02"))
    # Every new leader lists the spec: before, each one stopped on it in turn.
    verdicts = await fleet([client(server), client(server)])
    assert verdicts == [Stalled(completed=3, quarantined=1)] * 2
    status = await read_status(store, JOB)
    assert status.splits["s02"].status == "quarantined"
    assert status.splits["s02"].reason.startswith("unreadable record job.spec.s02: ")


async def test_an_unreadable_plan_record_stops_the_leaders_work_not_the_followers(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()
    started = trio.Event()
    release = trio.Event()
    done: list[str] = []

    async def hold(split: SplitHandle) -> None:
        # Each worker takes splits and keeps them until the test says, then finishes them.
        started.set()
        await release.wait()
        await split.commit(1, completed=True)
        done.append(split.id)

    verdicts: list[spate.Verdict] = []

    async def one(instance: str) -> None:
        verdicts.append(
            await spate.run_worker(
                client(server),
                job=JOB,
                instance=instance,
                planner=planner_of(4),
                handler=hold,
                config=config(max_in_flight=2),
            )
        )

    store = client(server)
    with caplog.at_level(logging.ERROR), trio.fail_after(300):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "w0")
            nursery.start_soon(one, "w1")
            await started.wait()
            await trio.sleep(5)
            await corrupt(store, KEYS.plan)
            await trio.sleep(30)  # several leases: every worker met the record meanwhile
            # Nobody leads (the leader stopped, nobody was elected), and nobody crashed: every
            # split is still held and each one's commit lands.
            assert await store.get(Keyspace.EPHEMERAL, KEYS.leader) is None
            assert "spate repair --store URL --job job --plan" in caplog.text
            release.set()
            while len(done) < 4:  # noqa: ASYNC110
                await trio.sleep(0.5)
            # A worker that starts now cannot join, and says how to repair.
            with pytest.raises(spate.FatalCoordinationError, match="--plan"):
                await spate.run_worker(
                    client(server),
                    job=JOB,
                    instance="late",
                    planner=planner_of(4),
                    handler=hold,
                    config=config(),
                )
            # The repair: a worker is elected again, and the job ends.
            plan_repair = await inspect_plan_repair(store, JOB)
            assert plan_repair.record.planned == 4
            assert "cursor" in plan_repair.describe()
            await repair_plan(store, JOB, plan_repair)
    assert verdicts == [AllComplete()] * 2


async def test_an_unreadable_leader_key_blocks_elections_until_it_is_removed(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()
    store = client(server)
    # The key of no process, in the ephemeral keyspace (it expires a TTL after its last write).
    async with store.session() as session:
        created = await store.create(Keyspace.EPHEMERAL, KEYS.leader, GARBAGE, session=session)
        assert isinstance(created, Won)
        with caplog.at_level(logging.ERROR, logger="spate.view"), trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def worker() -> None:
                    assert (
                        await spate.run_worker(
                            client(server),
                            job=JOB,
                            instance="w0",
                            planner=planner_of(2),
                            handler=finish,
                            config=config(),
                        )
                        == AllComplete()
                    )

                nursery.start_soon(worker)
                await trio.sleep(2)
                # Nobody could be elected: the job is not planned yet, and nothing crashed.
                assert await store.list(Keyspace.DURABLE, KEYS.split_prefix) == []
                assert "job.leader" in caplog.text
                assert "--leader" in caplog.text
                assert await remove_unreadable_leader(store, JOB)
