"""`spate.ops.delete_job`: every key of one job goes, the other jobs stay, live workers refuse."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import spate
from spate._core.records import Keys
from spate.ops import DeleteRefused, JobNotFound, delete_job, list_jobs
from spate.store import Keyspace, Store
from spate_stores import open_store
from spate_stores.memory import MemoryStore

from .test_ops import JOB, seed_job

OTHER = "job-2"


async def seed_other_job(store: Store) -> list[tuple[Keyspace, str]]:
    """A second job, whose keys start with the first's name (``job-1`` vs ``job-10``)."""
    keys = Keys(OTHER)
    written = [
        (Keyspace.DURABLE, keys.plan),
        (Keyspace.DURABLE, keys.split("a")),
        (Keyspace.EPHEMERAL, keys.worker("w9")),
        (Keyspace.DURABLE, "job-10.plan"),
        (Keyspace.DURABLE, "unrelated"),
    ]
    for keyspace, key in written:
        await store.create(keyspace, key, b"x")
    return written


async def keys_of(store: Store, prefix: str) -> list[tuple[Keyspace, str]]:
    return [(ks, e.key) for ks in Keyspace for e in await store.list(ks, prefix)]


async def test_delete_refuses_while_a_worker_is_live_and_removes_nothing() -> None:
    store = MemoryStore()
    await seed_job(store)
    before = await keys_of(store, "")
    with pytest.raises(DeleteRefused, match=r"2 live worker\(s\): w1, w2.*--force") as refused:
        await delete_job(store, JOB)
    assert refused.value.workers == ("w1", "w2")
    assert await keys_of(store, "") == before


async def test_a_forced_delete_removes_every_key_of_the_job_and_no_other() -> None:
    store = MemoryStore()
    await seed_job(store)
    others = await seed_other_job(store)
    report = await delete_job(store, JOB, force=True)
    assert await keys_of(store, f"{JOB}.") == []
    assert sorted(await keys_of(store, ""), key=str) == sorted(others, key=str)
    assert report.removed == {"plan": 1, "spec": 3, "split": 4, "leader": 1, "worker": 2}
    assert report.total == 11
    assert report.cut_off == ("w1", "w2")
    assert report.describe() == (
        "deleted job job-1: 11 key(s) (1 leader, 1 plan, 3 spec, 4 split, 2 worker); "
        "cut off the live worker(s) w1, w2"
    )


async def test_a_job_without_live_workers_is_deleted_without_force() -> None:
    store = MemoryStore()
    await seed_job(store)
    for keyspace, key in await keys_of(store, f"{JOB}."):
        if keyspace is Keyspace.EPHEMERAL:
            await store.delete(keyspace, key)  # every worker stopped
    report = await delete_job(store, JOB)
    assert report.cut_off == ()
    assert report.removed == {"plan": 1, "spec": 3, "split": 3}
    assert await list_jobs(store) == []


async def test_deleting_a_job_that_does_not_exist_names_the_jobs_there() -> None:
    store = MemoryStore()
    await seed_job(store)
    await seed_other_job(store)
    with pytest.raises(
        JobNotFound, match=r"no job job-3 in this store \(jobs here: job-1, job-10, "
    ):
        await delete_job(store, "job-3")


async def test_a_key_rewritten_during_the_delete_is_deleted_at_its_new_revision() -> None:
    store = MemoryStore()
    await seed_job(store)
    real_delete = store.delete
    rewritten = False

    async def delete_racing_a_writer(keyspace: Keyspace, key: str, expected: int | None = None):  # type: ignore[no-untyped-def]
        nonlocal rewritten
        if not rewritten and key == Keys(JOB).plan:
            rewritten = True
            entry = await store.get(keyspace, key)
            assert entry is not None
            await store.update(keyspace, key, b"moved on", entry.revision)
        return await real_delete(keyspace, key, expected)

    store.delete = delete_racing_a_writer  # type: ignore[method-assign]
    store_without_batches = _Unbatched(store)
    report = await delete_job(store_without_batches, JOB, force=True)
    assert rewritten
    assert report.removed["plan"] == 1  # the second round's listing found it at its new revision
    assert await keys_of(store, "") == []


class _Unbatched:
    """The store without write_many: every delete goes through ``delete``."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:  # whatever the store has, but its batches
        if name in ("write_many", "max_batch"):
            raise AttributeError(name)
        return getattr(self._store, name)


async def test_workers_cut_off_by_a_forced_delete_say_the_job_was_deleted(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    def plan(ctx: spate.PlanContext) -> spate.Plan:
        return spate.Plan([spate.SplitSpec(f"s{i}", descriptor=b"x") for i in range(4)], final=True)

    async def handle(split: spate.SplitHandle) -> None:
        position = split.progress.watermark or 0
        while True:
            await trio.sleep(0.2)
            position += 1
            await split.commit(position)

    errors: list[BaseException] = []

    async def worker(instance: str) -> None:
        try:
            await spate.run_worker(store, job=JOB, planner=plan, handler=handle, instance=instance)
        except spate.FatalCoordinationError as exc:
            errors.append(exc)

    async with open_store("memory://cut-off?ttl=3") as store:
        with trio.move_on_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker, "w1")
                nursery.start_soon(worker, "w2")
                await trio.sleep(3)
                report = await delete_job(store, JOB, force=True)
                assert report.cut_off == ("w1", "w2")
    assert len(errors) == 2
    for error in errors:
        assert "deleted by `spate delete --force` (which cuts off its live workers)" in str(error)
        assert "or something other than spate removed it" in str(error)
    assert "most likely deleted by `spate delete --force`" in caplog.text
