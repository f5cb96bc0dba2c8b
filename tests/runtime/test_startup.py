"""Startup and bad input: probe, join (fingerprint), announce, argument and record checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from spate import (
    Config,
    ConfigError,
    FatalCoordinationError,
    Fenced,
    Progress,
    SplitHandle,
    StoreUnavailable,
    open_coordinator,
    run_worker,
)
from spate._core.schedule import heartbeat_delay
from spate._runtime.probe import probe_store
from spate.store import Conflict, Keyspace, Revision, Store, Swap, Won, Write, WriteResult
from spate_stores.memory import MemoryServer, MemoryStore

from .harness import JOB, KEYS, TTL, HookStore, client, config, planner_of, spawn


class AcceptsStaleUpdates(HookStore):
    """A store whose compare-and-swap ignores the expected revision."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        entry = await self.inner.get(keyspace, key)
        if entry is None:
            return Conflict()
        return await self.inner.update(keyspace, key, value, entry.revision, **named)


async def test_probe_refuses_a_broken_store(autojump_clock: trio.abc.Clock) -> None:
    inner = MemoryStore(ephemeral_ttl=TTL)
    with pytest.raises(FatalCoordinationError, match="probe"):
        async with open_coordinator(
            AcceptsStaleUpdates(inner),
            job=JOB,
            instance="w1",
            planner=planner_of(1),
            config=config(),
        ):
            pytest.fail("a broken store must be refused")
    # Refused before joining: nothing of the job was written.
    assert await inner.list(Keyspace.DURABLE, "") == []
    assert await inner.list(Keyspace.EPHEMERAL, "") == []


class GroupedSwapWinsAtAnyRevision(MemoryStore):
    """Single calls fence, but a Swap sent in a ``write_many`` group ignores its revision.

    Only in ``broken`` (the keyspace whose batched path has the bug).
    """

    def __init__(self, broken: Keyspace, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.broken = broken
        self.calls: list[str] = []

    async def write_many(self, writes: Sequence[Write], *, session: Any = None) -> Any:
        self.calls.append("write_many")
        rewritten: list[Write] = []
        for write in writes:
            if isinstance(write, Swap) and write.keyspace is self.broken:
                entry = await self.get(write.keyspace, write.key)
                if entry is not None:
                    write = attrs.evolve(write, expected=entry.revision)
            rewritten.append(write)
        return await super().write_many(rewritten, session=session)


@pytest.mark.parametrize("broken", [Keyspace.DURABLE, Keyspace.EPHEMERAL])
async def test_a_store_whose_batched_swap_ignores_its_revision_is_refused_naming_the_path(
    autojump_clock: trio.abc.Clock, broken: Keyspace
) -> None:
    # The single calls fence, so a probe of single calls only passes this store; the group
    # commit then sends commits together and a stale owner's Swap lands.
    store = GroupedSwapWinsAtAnyRevision(broken, ephemeral_ttl=TTL)

    async def handler(split: SplitHandle) -> None:
        pytest.fail("a broken store must be refused before any split runs")

    with pytest.raises(FatalCoordinationError) as refused:
        await run_worker(
            store, job=JOB, instance="w1", planner=planner_of(1), handler=handler, config=config()
        )
    message = str(refused.value)
    assert "write_many" in message
    assert f"{broken.value} keyspace" in message
    assert "a swap at a stale revision in a group won" in message
    # Refused before joining: nothing of the job was written.
    assert [e.key for e in await store.list(Keyspace.DURABLE, "")] == []


class CountsCalls(MemoryStore):
    """An honest store that counts its calls (every write of the probe is one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[str] = []

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        self.calls.append("get")
        return await super().get(keyspace, key)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> Any:
        self.calls.append("create")
        return await super().create(keyspace, key, value, **named)

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> Any:
        self.calls.append("update")
        return await super().update(keyspace, key, value, expected, **named)

    async def delete(self, keyspace: Keyspace, key: str, expected: Revision | None = None) -> Any:
        self.calls.append("delete")
        return await super().delete(keyspace, key, expected)

    async def write_many(self, writes: Sequence[Write], *, session: Any = None) -> Any:
        self.calls.append(f"write_many({len(writes)})")
        return await super().write_many(writes, session=session)


async def test_the_probe_of_a_batching_store_costs_ten_calls_a_keyspace_and_leaves_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = CountsCalls(ephemeral_ttl=TTL)
    async with store.session() as session:
        await probe_store(store, key_prefix=KEYS.probe_prefix, session=session)
    each = ["create", "create", "update", "update", "delete", "get"]
    each += ["write_many(2)"] * 3 + ["delete"]
    assert store.calls == each * 2
    assert await store.list(Keyspace.DURABLE, "") == []
    assert await store.list(Keyspace.EPHEMERAL, "") == []


class PausesBeforeTheSecondCreate(HookStore):
    """A healthy store, but the process is held up for longer than the TTL mid-probe."""

    creates = 0

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        if keyspace is Keyspace.EPHEMERAL and key.startswith(KEYS.probe_prefix):
            self.creates += 1
            if self.creates == 2:
                await trio.sleep(TTL + 1)  # the scratch key the first create wrote expires
        return await self.inner.create(keyspace, key, value, **named)


async def test_a_probe_held_up_past_the_ttl_is_tried_again_not_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The second create of the scratch key wins because the first one's key expired, not
    # because the store's compare-and-swap is broken: the probe is inconclusive, and tried
    # again (with a fresh key), and the worker starts.
    inner = MemoryStore(ephemeral_ttl=TTL)
    store = PausesBeforeTheSecondCreate(inner)
    with pytest.raises(StoreUnavailable, match="held up for"):
        await probe_store(store, key_prefix=KEYS.probe_prefix)
    store.creates = 0
    async with open_coordinator(
        store, job=JOB, instance="w1", planner=planner_of(1), config=config()
    ) as coordinator:
        assert coordinator.instance == "w1"
    assert store.creates > 2  # the first try was inconclusive; a later one passed


class StaleReads(HookStore):
    """Reads of the probe's keys return the entry before the last write, ``stale`` times."""

    def __init__(self, inner: MemoryStore, stale: int) -> None:
        super().__init__(inner)
        self.stale = stale
        self.previous: dict[str, Any] = {}

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        result = await self.inner.create(keyspace, key, value, **named)
        if isinstance(result, Won):
            self.previous[key] = await self.inner.get(keyspace, key)
        return result

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        if key.startswith(KEYS.probe_prefix) and self.stale > 0 and key in self.previous:
            self.stale -= 1
            return self.previous[key]  # what a lagging replica answers
        return await self.inner.get(keyspace, key)


async def test_a_stale_read_in_the_probe_is_tried_again_not_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A replica that lags (a NATS cluster's direct gets) may answer the probe's read-back
    # with the write before the last: that says nothing of the fences, so the probe runs
    # again and the worker starts.
    store = StaleReads(MemoryStore(ephemeral_ttl=TTL), stale=1)
    with pytest.raises(StoreUnavailable, match="did not return its last won write"):
        await probe_store(store, key_prefix=KEYS.probe_prefix)
    store.stale = 1
    async with open_coordinator(
        store, job=JOB, instance="w1", planner=planner_of(1), config=config()
    ) as coordinator:
        assert coordinator.instance == "w1"


async def test_a_store_whose_reads_stay_wrong_is_refused_when_the_startup_gives_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = StaleReads(MemoryStore(ephemeral_ttl=TTL), stale=10**6)
    with pytest.raises(FatalCoordinationError, match="last won write"):
        async with open_coordinator(
            store, job=JOB, instance="w1", planner=planner_of(1), config=config()
        ):
            pytest.fail("a store whose reads never return the last write must be refused")


async def test_fingerprint_mismatch_refused(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        first = await spawn(nursery, client(server), "w1", fingerprint="schema-v1")
        second = await spawn(
            nursery, client(server), "w2", fingerprint="schema-v2", expect_error=True
        )
        assert isinstance(second.error, FatalCoordinationError)
        assert "schema-v1" in str(second.error)
        assert "schema-v2" in str(second.error)
        # The refused worker wrote nothing: no presence key.
        assert await client(server).get(Keyspace.EPHEMERAL, KEYS.worker("w2")) is None
        assert first.error is None
        first.kill()


async def test_duplicate_instance_id_fatal(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        first = await spawn(nursery, client(server), "same", expect_error=True)
        await first.until(lambda: len(first.c.owned) == 4)
        second = await spawn(nursery, client(server), "same", expect_error=True)
        await first.until(lambda: first.done.is_set(), within=TTL)
        assert isinstance(first.error, FatalCoordinationError)
        assert "instance id 'same'" in str(first.error)
        second.kill()


async def test_startup_gives_up_on_an_unavailable_store_after_its_budget(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Down(HookStore):
        async def create(
            self, keyspace: Keyspace, key: str, value: bytes, **named: Any
        ) -> WriteResult:
            raise StoreUnavailable("connection refused")

    with pytest.raises(FatalCoordinationError, match="3 attempts"):
        async with open_coordinator(
            Down(MemoryStore(ephemeral_ttl=TTL)),
            job=JOB,
            instance="w1",
            planner=planner_of(1),
            config=config(startup_max_attempts=3),
        ):
            pytest.fail("unreachable")


@pytest.mark.parametrize("job", ["", "has.dot", "-lead", "sp ace", "x" * 101, 7])
async def test_invalid_job_name_is_a_config_error(job: object) -> None:
    with pytest.raises(ConfigError, match="job name"):
        async with open_coordinator(
            MemoryStore(),
            job=job,  # type: ignore[arg-type]
            planner=planner_of(1),
        ):
            pytest.fail("unreachable")


async def test_invalid_instance_and_arguments_are_config_errors() -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError, match="instance id"):
        async with open_coordinator(store, job=JOB, instance="a/b", planner=planner_of(1)):
            pytest.fail("unreachable")
    with pytest.raises(ConfigError, match="planner"):
        async with open_coordinator(store, job=JOB, instance="a", planner=None):  # type: ignore[arg-type]
            pytest.fail("unreachable")
    with pytest.raises(ConfigError, match=r"spate\.Config"):
        async with open_coordinator(
            store,
            job=JOB,
            instance="a",
            planner=planner_of(1),
            config={},  # type: ignore[arg-type]
        ):
            pytest.fail("unreachable")


@pytest.mark.parametrize("nonce", ["", "a b", "é1", "x" * 65, 7])
async def test_an_injected_nonce_must_be_a_short_ascii_token(nonce: object) -> None:
    with pytest.raises(ConfigError, match="nonce must be"):
        async with open_coordinator(
            MemoryStore(),
            job=JOB,
            instance="a",
            planner=planner_of(1),
            nonce=nonce,  # type: ignore[arg-type]
        ):
            pytest.fail("unreachable")


async def test_lease_that_differs_from_the_store_ttl_tells_how_to_open_the_store() -> None:
    with pytest.raises(ConfigError, match=r"\?ttl=15"):
        async with open_coordinator(
            MemoryStore(ephemeral_ttl=30),
            job=JOB,
            instance="a",
            planner=planner_of(1),
            config=Config(lease_duration=15),
        ):
            pytest.fail("unreachable")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_in_flight": True}, "max_in_flight"),
        ({"rebalance_delay": -1}, "rebalance_delay"),
        ({"drain_deadline": 0}, "drain_deadline"),
        ({"reconcile_interval": float("inf")}, "reconcile_interval"),
        ({"lease_duration": 10, "op_timeout": 6}, "op_timeout"),
        ({"lease_duration": 30, "drain_deadline": 1, "op_timeout": 5}, "drain_deadline"),
        ({"planner_thread": "yes"}, "planner_thread"),
        ({"claim_deadline": 0}, "claim_deadline"),
        ({"claim_deadline": "30"}, "claim_deadline"),
    ],
)
def test_config_validates_itself(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config(**fields)  # type: ignore[arg-type]


def test_config_resolves_lease_and_op_timeout_from_the_store() -> None:
    resolved = Config().resolve(9.0)
    assert resolved.lease_duration == 9.0
    assert resolved.op_timeout == 3.0
    # How often leases are renewed is the schedule's rule (a third of the lease, jittered), not
    # a Config field restating it.
    assert not hasattr(resolved, "renew_interval")
    delays = [
        heartbeat_delay(seed, round_, resolved.lease_duration)
        for seed in range(20)
        for round_ in range(5)
    ]
    assert all(0.8 * 3.0 <= delay < 1.2 * 3.0 for delay in delays)


async def test_commit_fail_release_of_a_split_not_held_are_fenced_and_write_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = HookStore(MemoryStore(ephemeral_ttl=TTL))
    async with open_coordinator(
        store, job=JOB, instance="w1", planner=planner_of(0), config=config()
    ) as coord:
        before = len(store.writes)
        with pytest.raises(Fenced):
            await coord.commit("nope", Progress(1))
        with pytest.raises(Fenced):
            await coord.fail("nope", "boom")
        with pytest.raises(Fenced):
            await coord.release(["nope"])
        durable = [w for w in store.writes[before:] if w[1] is Keyspace.DURABLE and "nope" in w[2]]
        assert durable == []
        with pytest.raises(ConfigError):
            await coord.commit("s", 5)  # type: ignore[arg-type]


async def test_an_unreadable_progress_record_holds_its_split_aside_and_names_the_key(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # It costs that split, not the worker: the split is folded as quarantined, saying why.
    store = MemoryStore(ephemeral_ttl=TTL)
    async with open_coordinator(
        store, job=JOB, instance="w1", planner=planner_of(0), config=config()
    ) as coord:
        result = await store.create(Keyspace.DURABLE, KEYS.split("bad"), b'{"schema": 99}')
        assert isinstance(result, Won)
        await trio.sleep(TTL)  # (the leader's reconcile lists it)
        assert coord._runtime.stopped is None
    assert "job.split.bad" in caplog.text
    assert "held aside" in caplog.text


async def test_unreadable_assignment_and_presence_are_skipped_with_a_warning(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(ephemeral_ttl=TTL)
    async with open_coordinator(
        store, job=JOB, instance="w1", planner=planner_of(2), config=config()
    ) as coord:
        await store.create(Keyspace.DURABLE, KEYS.assign("ghost"), b"not json")
        await store.create(Keyspace.EPHEMERAL, KEYS.worker("odd"), b"{}")
        await trio.sleep(1)
        # The worker with an unreadable presence still counts as a live worker: the leader
        # gives it a share, under the default lane budget.
        assert await store.get(Keyspace.DURABLE, KEYS.assign("odd")) is not None
        assert len(coord.owned) == 1
    assert "job.assign.ghost" in caplog.text
    assert "job.worker.odd" in caplog.text


async def test_events_has_one_consumer(autojump_clock: trio.abc.Clock) -> None:
    async with open_coordinator(
        MemoryStore(ephemeral_ttl=TTL),
        job=JOB,
        instance="w1",
        planner=planner_of(0),
        config=config(),
    ) as coord:
        coord.events()
        with pytest.raises(RuntimeError, match="one consumer"):
            coord.events()


async def test_an_error_in_the_block_comes_out_as_itself(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with open_coordinator(
            MemoryStore(ephemeral_ttl=TTL),
            job=JOB,
            instance="w1",
            planner=planner_of(1),
            config=config(),
        ):
            raise KeyError("mine")


def tasks_under(task: trio.lowlevel.Task) -> int:
    return sum(
        1 + tasks_under(child) for nursery in task.child_nurseries for child in nursery.child_tasks
    )


async def test_leaving_the_block_stops_every_task(autojump_clock: trio.abc.Clock) -> None:
    me = trio.lowlevel.current_task()
    assert tasks_under(me) == 0
    async with open_coordinator(
        MemoryStore(ephemeral_ttl=TTL),
        job=JOB,
        instance="w1",
        planner=planner_of(3),
        config=config(),
    ) as coord:
        await trio.sleep(1)
        assert coord.owned
        assert tasks_under(me) >= 6  # loop, alarm, two watch pumps, three timers
    assert tasks_under(me) == 0
    with pytest.raises(FatalCoordinationError, match="stopped"):
        await coord.commit("s00", Progress(1))


class CountsPlanCalls(HookStore):
    """Counts, per process, the store calls made on the job's plan record."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.plan_calls: list[str] = []

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        if key == KEYS.plan:
            self.plan_calls.append("get")
        return await super().get(keyspace, key)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        if key == KEYS.plan:
            self.plan_calls.append("create")
        return await super().create(keyspace, key, value, **named)


async def test_a_fleet_started_together_joins_in_one_or_two_round_trips_and_quietly(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()
    stores = [CountsPlanCalls(client(server)) for _ in range(16)]
    opened: list[str] = []
    all_open = trio.Event()

    async def worker(i: int, store: CountsPlanCalls) -> None:
        async with open_coordinator(
            store, job=JOB, instance=f"w{i:02d}", planner=planner_of(4), config=config()
        ):
            opened.append(f"w{i:02d}")
            if len(opened) == len(stores):
                all_open.set()
            await trio.sleep_forever()

    with caplog.at_level("INFO", logger="spate"):
        async with trio.open_nursery() as nursery:
            for i, store in enumerate(stores):
                nursery.start_soon(worker, i, store)
            await all_open.wait()
            nursery.cancel_scope.cancel()
    # The creator joins in one round trip, every other worker in two: no retry, no backoff.
    calls = sorted(tuple(s.plan_calls[:2]) for s in stores)
    assert calls.count(("create",)) == 1, calls
    assert calls.count(("create", "get")) == len(stores) - 1, calls
    # The race of who creates the job is no failure, and is not logged as one.
    joining = [r for r in caplog.records if "joining the job" in r.getMessage()]
    assert joining == [], [r.getMessage() for r in joining]
