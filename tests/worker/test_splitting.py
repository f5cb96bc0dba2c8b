"""Splitting a running split, end to end on the memory store under the mock clock.

Each rule of ``docs/splitting.md`` has a test here that fails when the rule breaks: the one
fenced write, the residual running exactly once, the primary resumed by a successor, the
leader's requests (only with idle lanes, once per request, backed off when ignored, off by
``Config``), bad input refused with nothing written, and the verdict counting residuals.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable

import pytest
import trio
import trio.testing

import spate
from spate import (
    AllComplete,
    Config,
    ConfigError,
    Fenced,
    Gained,
    Plan,
    PlanContext,
    Progress,
    SplitHandle,
    SplitRequested,
    SplitSpec,
    Stalled,
    ValueTooLarge,
    run_worker,
)
from spate._core.records import ProgressRecord, SpecRecord, decode
from spate._core.tenancy.splitting import residual_id
from spate.store import Keyspace
from spate_stores.memory import MemoryServer, MemoryStore
from tests.common import JOB, KEYS
from tests.common import config as base_config
from tests.runtime.harness import client, record_of, spawn

COMMIT_EVERY = 5


def config(**overrides: object) -> Config:
    """The tests' timings, with the leader's split requests on (the default outside tests)."""
    return base_config(**{"split_requests": True, **overrides})


def _range(start: int, end: int) -> bytes:
    return f"{start}:{end}".encode()


def _bounds(descriptor: bytes) -> tuple[int, int]:
    start, _, end = descriptor.decode().partition(":")
    return int(start), int(end)


def ranges_planner(
    lengths: list[int], *, localities: list[str] | None = None
) -> Callable[[PlanContext], Plan]:
    """Splits s0, s1, ... covering consecutive ranges of one item space."""
    specs = []
    start = 0
    for n, items in enumerate(lengths):
        locality = localities[n] if localities else ""
        specs.append(SplitSpec(f"s{n}", _range(start, start + items), 2, locality=locality))
        start += items

    def plan(ctx: PlanContext) -> Plan:
        return Plan([s for s in specs if s.id not in ctx.known], final=True)

    return plan


class RangeWork:
    """A splittable handler: one item a second, a commit every COMMIT_EVERY, splits on request."""

    def __init__(self, *, split: bool = True) -> None:
        self.done: collections.Counter[int] = collections.Counter()
        self.splits: list[str] = []
        self.descriptors: dict[str, list[bytes]] = collections.defaultdict(list)
        self.split = split

    async def __call__(self, handle: SplitHandle) -> None:
        self.descriptors[handle.id].append(handle.descriptor)
        start, end = _bounds(handle.descriptor)
        pos = handle.progress.watermark if handle.progress.watermark is not None else start
        while pos < end:
            for _ in range(min(COMMIT_EVERY, end - pos)):
                await trio.sleep(1.0)
                self.done[pos] += 1
                pos += 1
            await handle.commit(pos, completed=pos >= end)
            if self.split and handle.split_requested.is_set() and end - pos >= 2 * COMMIT_EVERY:
                mid = pos + (end - pos) // 2
                rid = await handle.split(primary=_range(start, mid), residual=_range(mid, end))
                self.splits.append(rid)
                assert handle.descriptor == _range(start, mid)
                assert not handle.split_requested.is_set()
                end = mid


async def _fleet(
    store: MemoryStore | None,
    server: MemoryServer,
    lengths: list[int],
    work: RangeWork,
    *,
    workers: int = 4,
    cfg: Config | None = None,
) -> list[object]:
    verdicts: list[object] = []
    cfg = cfg or config(max_in_flight=1)

    async def one(n: int) -> None:
        async with client(server) as s:
            verdicts.append(
                await run_worker(
                    s,
                    job=JOB,
                    instance=f"w{n}",
                    planner=ranges_planner(lengths),
                    handler=work,
                    config=cfg,
                )
            )

    async with trio.open_nursery() as nursery:
        for n in range(workers):
            nursery.start_soon(one, n)
    return verdicts


async def test_a_straggler_is_split_and_every_item_is_processed_exactly_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    lengths = [10] * 7 + [160]
    work = RangeWork()
    started = trio.current_time()
    verdicts = await _fleet(None, server, lengths, work)
    took = trio.current_time() - started
    assert verdicts == [AllComplete()] * 4
    assert work.splits, "the leader asked, and the straggler split"
    # Completed ranges partition the job: nothing lost, nothing done twice.
    assert sorted(work.done) == list(range(sum(lengths)))
    assert set(work.done.values()) == {1}
    # The fleet shared the straggler: the job took far less than the straggler alone.
    assert took < 0.75 * max(lengths)


async def test_without_requests_nothing_is_split_and_the_straggler_runs_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    work = RangeWork()
    started = trio.current_time()
    verdicts = await _fleet(
        None, server, [10] * 3 + [80], work, cfg=config(max_in_flight=1, split_requests=False)
    )
    assert verdicts == [AllComplete()] * 4
    assert work.splits == []
    assert trio.current_time() - started >= 80


async def test_the_residual_s_records_name_its_parent_and_inherit_locality_and_half_weight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with client(server) as store, trio.open_nursery() as nursery:
        planner = ranges_planner([100], localities=["zone-a"])
        w = await spawn(nursery, store, "w", planner=planner, cfg=config(max_in_flight=3))
        gained = await w.wait_for(Gained, "s0")
        await w.c.commit("s0", Progress(10))
        rid = await w.c.split("s0", _range(0, 50), _range(50, 100))
        given = await w.c.split("s0", _range(0, 30), _range(30, 50), weight=7)
        await w.until(lambda: len(w.of(Gained)) == 3)
        spec_entry = await store.get(Keyspace.DURABLE, KEYS.spec(rid))
        assert spec_entry is not None
        spec = decode(SpecRecord, spec_entry.key, spec_entry.value)
        assert (spec.parent, spec.locality, spec.weight, spec.descriptor) == (
            "s0", "zone-a", 1, _range(50, 100),
        )  # fmt: skip
        other = await store.get(Keyspace.DURABLE, KEYS.spec(given))
        assert other is not None
        assert decode(SpecRecord, other.key, other.value).weight == 7
        parent, _ = await record_of(store, "s0")
        assert parent.descriptor == _range(0, 30)
        assert [r.id for r in parent.residuals] == [rid, given]
        assert gained.descriptor == _range(0, 100)
        residual = next(e for e in w.of(Gained) if e.split == rid)
        assert residual.descriptor == _range(50, 100)
        assert residual.weight == 1
        nursery.cancel_scope.cancel()


async def test_a_successor_resumes_the_primary_not_the_planned_descriptor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=ranges_planner([100]))
        await a.wait_for(Gained, "s0")
        await a.c.commit("s0", Progress(20))
        rid = await a.c.split("s0", _range(0, 60), _range(60, 100))
        a.kill()  # dies holding the split: a successor takes over after the lease
        b = await spawn(nursery, client(server), "b", planner=ranges_planner([100]))
        gained = await b.wait_for(Gained, "s0", within=60)
        assert gained.descriptor == _range(0, 60)
        assert gained.progress.watermark == 20
        residual = await b.wait_for(Gained, rid, within=60)
        assert residual.descriptor == _range(60, 100)
        nursery.cancel_scope.cancel()


async def test_a_stale_owner_s_split_raises_fenced_and_its_residual_never_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    seen: list[SplitHandle] = []
    release, running = trio.Event(), trio.Event()

    async def handler(handle: SplitHandle) -> None:
        seen.append(handle)
        running.set()
        await release.wait()

    async with client(server) as store, trio.open_nursery() as nursery:

        async def worker() -> None:
            await run_worker(
                store, job=JOB, instance="w", planner=ranges_planner([100]), handler=handler,
                config=config(),
            )  # fmt: skip

        nursery.start_soon(worker)
        with trio.fail_after(30):
            await running.wait()
        handle = seen[0]
        before, revision = await record_of(store, "s0")
        # Another worker takes the split over behind this one's back (a fencing CAS).
        taken = attrs_evolve(before, epoch=before.epoch + 1, owner="thief", owner_nonce="x")
        result = await store.update(
            Keyspace.DURABLE, KEYS.split("s0"), _encode(taken), expected=revision
        )
        assert isinstance(result, spate.store.Won)
        with pytest.raises(Fenced):
            await handle.split(primary=_range(0, 50), residual=_range(50, 100))
        after, _ = await record_of(store, "s0")
        assert after.residuals == ()
        assert after.descriptor is None
        assert [e.key for e in await store.list(Keyspace.DURABLE, KEYS.spec(""))] == [
            KEYS.spec("s0")
        ]
        with pytest.raises(Fenced):  # a stale handle stays fenced
            await handle.split(primary=_range(0, 50), residual=_range(50, 100))
        release.set()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("primary", "residual", "weight", "error"),
    [
        ("0:50", b"50:100", None, ConfigError),
        (b"0:50", bytearray(b"50:100"), None, ConfigError),
        (b"", b"50:100", None, ConfigError),
        (b"0:50", b"", None, ConfigError),
        (b"0:50", b"50:100", 0, ConfigError),
        (b"0:50", b"50:100", -2, ConfigError),
        (b"0:50", b"50:100", 1.5, ConfigError),
        (b"0:50", b"50:100", True, ConfigError),
        (b"0:50", b"x" * 2_000_000, None, ValueTooLarge),
    ],
)
async def test_bad_split_arguments_are_refused_with_nothing_written(
    autojump_clock: trio.testing.MockClock,
    primary: object,
    residual: object,
    weight: object,
    error: type[Exception],
) -> None:
    server = MemoryServer()
    async with client(server) as store, trio.open_nursery() as nursery:
        w = await spawn(nursery, store, "w", planner=ranges_planner([100]))
        await w.wait_for(Gained, "s0")
        before = await record_of(store, "s0")
        with pytest.raises(error) as caught:
            await w.c.split("s0", primary, residual, weight)  # type: ignore[arg-type]
        assert "nothing" in str(caught.value).lower() or error is ValueTooLarge
        assert await record_of(store, "s0") == before
        nursery.cancel_scope.cancel()


async def test_splitting_a_split_not_held_raises_fenced_with_nothing_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with client(server) as store, trio.open_nursery() as nursery:
        w = await spawn(nursery, store, "w", planner=ranges_planner([100, 100]))
        await w.wait_for(Gained, "s1")
        await w.c.commit("s1", Progress(100, completed=True))
        before = await record_of(store, "s1")
        with pytest.raises(Fenced):
            await w.c.split("s1", _range(100, 150), _range(150, 200))
        with pytest.raises(Fenced):
            await w.c.split("nope", _range(0, 1), _range(1, 2))
        assert await record_of(store, "s1") == before
        nursery.cancel_scope.cancel()


async def test_the_leader_asks_only_when_lanes_are_idle_and_once_per_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    cfg = config(max_in_flight=1, drain_deadline=3.0, split_request_delay=2.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=ranges_planner([100]), cfg=cfg)
        await a.wait_for(Gained, "s0")
        await trio.sleep(10)
        # One worker, one lane, busy: nothing is idle, nothing is asked.
        assert a.of(SplitRequested) == []
        joined = trio.current_time()
        b = await spawn(nursery, client(server), "b", planner=ranges_planner([100]), cfg=cfg)
        await a.wait_for(SplitRequested, "s0", within=5)
        # Debounced: b's lane sat idle for split_request_delay before the leader asked.
        first = next(
            t for e, t in zip(a.events, a.times, strict=True) if isinstance(e, SplitRequested)
        )
        assert first - joined >= cfg.split_request_delay
        # Ignored: not asked again within drain_deadline, then asked less and less often.
        await trio.sleep(60)
        times = [t for e, t in zip(a.events, a.times, strict=True) if isinstance(e, SplitRequested)]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert len(times) >= 3
        assert all(gap >= cfg.drain_deadline for gap in gaps), times
        assert gaps == sorted(gaps), gaps
        assert gaps[-1] > gaps[0], gaps
        # A split answers the request: the residual goes to the idle lane.
        rid = await a.c.split("s0", _range(0, 50), _range(50, 100))
        await b.wait_for(Gained, rid, within=10)
        assert b.of(SplitRequested) == []
        nursery.cancel_scope.cancel()


async def test_a_residual_counts_in_the_verdict_and_can_be_quarantined_and_requeued(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with client(server) as store, trio.open_nursery() as nursery:
        w = await spawn(
            nursery, store, "w", planner=ranges_planner([100]), cfg=config(max_attempts=1)
        )
        await w.wait_for(Gained, "s0")
        rid = await w.c.split("s0", _range(0, 50), _range(50, 100))
        await w.wait_for(Gained, rid)
        await w.c.commit("s0", Progress(50, completed=True))
        await w.c.fail(rid, "poison")
        stalled = await w.wait_for(Stalled)
        assert (stalled.completed, stalled.quarantined) == (1, 1)
        nursery.cancel_scope.cancel()
    async with client(server) as store:
        assert await spate.ops.requeue(store, JOB, [rid]) == [rid]
        record, _ = await record_of(store, rid)
        assert record.status.value == "runnable"


async def test_a_finished_parent_naming_an_unseeded_residual_does_not_end_the_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The owner split, finished its primary, and the leader has not seeded the residual yet:
    the verdict waits for the residual (seeded from the parent's record) to run."""
    server = MemoryServer()
    ran: list[str] = []

    async def handler(handle: SplitHandle) -> None:
        ran.append(handle.id)
        if handle.id == "s0" and not handle.progress.completed and len(ran) == 1:
            await handle.split(primary=_range(0, 50), residual=_range(50, 100))
        await handle.commit(1, completed=True)

    async with client(server) as store:
        verdict = await run_worker(
            store, job=JOB, instance="w", planner=ranges_planner([100]), handler=handler,
            config=config(),
        )  # fmt: skip
    assert verdict == AllComplete()
    assert len(ran) == 2
    assert ran[1] == residual_id("s0", 1, 0)


async def test_a_new_leader_asks_its_own_running_split_when_lanes_sit_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # a leads and runs a short split; b runs the long one. a finishes and leaves: b leads, and
    # c joins with an idle lane. The only running split is b's own, begun before b led.
    server = MemoryServer()
    cfg = config(max_in_flight=1)
    plan = ranges_planner([10, 1000], localities=["zone-a", "zone-b"])
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=plan, cfg=cfg, locality="zone-a/a")
        b = await spawn(nursery, client(server), "b", planner=plan, cfg=cfg, locality="zone-b/b")
        await a.wait_for(Gained, "s0", within=30)
        await b.wait_for(Gained, "s1", within=30)
        await a.c.commit("s0", Progress(10, completed=True))
        await a.c.depart()
        a.kill()
        await trio.sleep(30)  # b leads now, still running s1
        joined = trio.current_time()
        await spawn(nursery, client(server), "c", planner=plan, cfg=cfg, locality="zone-c/c")
        await trio.sleep(60)
        asked = [t for e, t in zip(b.events, b.times, strict=True) if isinstance(e, SplitRequested)]
        assert [t for t in asked if t > joined], f"s1 asked only at {asked}, before c joined"
        nursery.cancel_scope.cancel()


def test_residual_ids_are_valid_bounded_and_unique_however_deep_the_splitting_goes() -> None:
    from spate._plan import validate_split_id

    seen = set()
    parent = "p" * 200
    for _depth in range(50):
        for epoch in (1, 2):
            for n in range(3):
                rid = residual_id(parent, epoch, n)
                assert len(rid) <= 200
                validate_split_id(rid)
                assert rid not in seen
                seen.add(rid)
        parent = residual_id(parent, 1, 0)
    assert residual_id("a", 1, 0) == residual_id("a", 1, 0)  # derived, not random


def attrs_evolve(record: ProgressRecord, **changes: object) -> ProgressRecord:
    import attrs

    return attrs.evolve(record, **changes)  # type: ignore[arg-type]


def _encode(record: ProgressRecord) -> bytes:
    from spate._core.records import encode

    return encode(record)


async def test_a_follower_s_unasked_split_reaches_the_leader_with_its_next_presence_renewal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No request, and no backstop for an hour: the follower's next heartbeat names the split
    in its presence record, the leader reads the parent's record and seeds the residual."""
    server = MemoryServer()
    cfg = config(split_requests=False, reconcile_interval=3600.0, max_in_flight=1)
    async with trio.open_nursery() as nursery:
        leader = await spawn(
            nursery, client(server), "a", planner=ranges_planner([100, 100]), cfg=cfg
        )
        await leader.until(lambda: leader.c.is_leader and len(leader.c.owned) == 1)
        follower = await spawn(
            nursery, client(server), "b", planner=ranges_planner([100, 100]), cfg=cfg
        )
        await follower.until(lambda: len(follower.c.owned) == 1)
        (held,) = follower.c.owned
        start, end = _bounds(next(e for e in follower.of(Gained) if e.split == held).descriptor)
        split_at = trio.current_time()
        rid = await follower.c.split(held, _range(start, start + 50), _range(start + 50, end))
        spare = await spawn(
            nursery, client(server), "c", planner=ranges_planner([100, 100]), cfg=cfg
        )
        gained = await spare.wait_for(Gained, rid, within=60)
        assert gained.descriptor == _range(start + 50, end)
        # Within a heartbeat (a third of the 9 s lease) and a placement, not an hour.
        assert spare.time_of(gained) - split_at < 9.0
        nursery.cancel_scope.cancel()


async def test_the_leader_asks_one_split_per_idle_lane_the_longest_running_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    cfg = config(max_in_flight=3, drain_deadline=5.0)
    planner = ranges_planner([100, 100, 100])
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner, cfg=cfg)
        await a.until(lambda: len(a.c.owned) == 3)
        # s2's tenancy begins last: hand it back and take it again (a new lease, later).
        await a.c.release(["s2"])
        await a.until(lambda: len(a.c.owned) == 3)
        b = await spawn(nursery, client(server), "b", planner=planner, cfg=config(max_in_flight=2))
        await a.wait_for(SplitRequested, within=10)
        await trio.sleep(2.0)  # within drain_deadline: no request has timed out yet
        asked = [e.split for e in a.of(SplitRequested)]
        # b's two idle lanes: two requests, to the two tenancies running longest.
        assert sorted(asked) == ["s0", "s1"]
        assert b.of(SplitRequested) == []
        nursery.cancel_scope.cancel()
