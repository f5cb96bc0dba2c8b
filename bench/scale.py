"""Benchmark 5: how a coordinator's costs grow with the job, from 10 to 100,000 splits.

For each job size N (memory store, real clock):

* **plan** — one worker plans N splits and claims its first ones (wall time);
* **a follower's CPU per commit of others** — other writers update progress records of splits
  this worker does not hold (what a busy fleet's commits look like to every worker: since a
  plain commit is delivered to nobody, about nothing);
  ``time.process_time`` of the whole process over K such writes, minus the same K writes to
  keys nobody watches (interleaved rounds), divided by K. Flat across N means no per-event
  work grows with the job;
* **join** — a second worker opens on the job (its coordinator is ready once the snapshot of
  N splits is folded: the same work as a reconcile listing);
* **a follower's memory per split** — a third worker joins with ``tracemalloc`` on; the memory
  it keeps (its share of the job: a follower reads its own keys, not the job) divided by N,
  against the bytes of the job's records.

Then the leader's placement solved from scratch (a fresh index,
:func:`spate._core.placement.index.solve_placement`) over 100,000 splits and 100 workers without
zones: placing a fresh job, re-placing a balanced one (a fixpoint), and re-placing after a
worker left — timed against one ``sorted()`` of the same splits, with the reference model's
time (``spate_testing._placement_model``) beside it.

Then the same over 100,000 splits and 100 workers in 10 zones: a fresh job, a fixpoint, a
whole zone lost, and the cost per ownership change when the whole job is placed again (one
split completes: what the leader paid per change before it kept an index).

Then the leader's :class:`spate._core.placement.index.PlacementIndex` over the same job, with and
without zones: CPU per ownership change as the leader pays it (one split completes, the index
re-solves, the changed workers' assignments are read; then the moves it made land: their
owners hand back and the assignees claim), and per claim by the assignee (changes nothing).

Each size is bounded in time; a size that does not finish is reported as such and larger
ones are skipped. Run alone with ``python -m bench --only scale``.
"""

from __future__ import annotations

import functools
import gc
import random
import time
import tracemalloc
from collections.abc import Callable

import attrs
import trio
import trio.testing

from bench._fleet import JOB, planner_of, split_id, start_worker
from bench._harness import (
    DURABLE,
    Options,
    Row,
    fmt_bytes,
    fmt_seconds,
    median,
)
from spate import Config
from spate._core.placement.index import PlacementIndex, solve_placement
from spate._core.placement.report import placement_report
from spate._core.placement.vocabulary import Placement, Worker
from spate._core.protocol import fingerprint_hash
from spate._core.records import Keys, ProgressRecord, decode, encode
from spate.store import Won
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing._placement_model import desired_assignment, place

SIZES = (10, 100, 1_000, 10_000, 100_000)
EVENTS = 2_000
TTL = 30.0
KEYS = Keys(JOB)


def _config(max_in_flight: int) -> Config:
    # No periodic listing or replan during the measurement: their cost is the join's.
    return Config(max_in_flight=max_in_flight, reconcile_interval=3600.0, replan_interval=3600.0)


async def _quiet() -> None:
    """Until every task (coordinators included) has nothing left to do."""
    await trio.testing.wait_all_tasks_blocked(cushion=0.02)


async def _scale_point(size: int, events: int, rounds: int) -> dict[str, float]:
    server = MemoryServer()
    out: dict[str, float] = {}

    def client() -> MemoryStore:
        return MemoryStore(server=server, ephemeral_ttl=TTL)

    async with client() as store, trio.open_nursery() as nursery:
        began = time.perf_counter()
        leader = await start_worker(
            nursery, store, "leader", planner=planner_of(size), config=_config(8)
        )
        await leader.until(lambda: len(leader.owned) == min(8, size), 600, "plan and claim")
        out["plan"] = time.perf_counter() - began
        await _quiet()

        # -- CPU per watch event ------------------------------------------------------------
        foreign = [s for s in (split_id(n) for n in range(size)) if s not in leader.owned]
        targets = [KEYS.split(s) for s in foreign[: min(len(foreign), 1000)]]
        current = {}
        for key in targets:
            entry = await store.get(DURABLE, key)
            assert entry is not None
            current[key] = entry
        unwatched = {f"raw.cpu.{n}": current[k].value for n, k in enumerate(targets)}
        revisions = {}
        for key, value in unwatched.items():
            created = await store.create(DURABLE, key, value)
            assert isinstance(created, Won)
            revisions[key] = created.revision
        for key, entry in current.items():
            revisions[key] = entry.revision
        values = {k: e.value for k, e in current.items()} | unwatched

        async def burst(keys: list[str]) -> float:
            cpu = time.process_time()
            for n in range(events):
                key = keys[n % len(keys)]
                result = await store.update(DURABLE, key, values[key], revisions[key])
                assert isinstance(result, Won), result
                revisions[key] = result.revision
            await _quiet()
            return time.process_time() - cpu

        watched_cpu: list[float] = []
        bare_cpu: list[float] = []
        for number in range(rounds):
            if number % 2 == 0:
                watched_cpu.append(await burst(targets))
                bare_cpu.append(await burst(list(unwatched)))
            else:
                bare_cpu.append(await burst(list(unwatched)))
                watched_cpu.append(await burst(targets))
        out["cpu_per_event"] = max(0.0, median(watched_cpu) - median(bare_cpu)) / events
        out["cpu_per_write"] = median(bare_cpu) / events

        # -- CPU per ownership change -----------------------------------------------------------
        # A claim, a hand-back, an expiry or a completion changes who owns a split (or its
        # status): an input of the leader's placement. Each is folded on its own here (the
        # loop goes idle between them), as it is in a fleet that is not saturated.
        key = targets[0]
        record = decode(ProgressRecord, key, values[key])
        flips = [encode(attrs.evolve(record, owner="elsewhere")), values[key]]
        changes = max(10, min(events, 2_000_000 // size))

        async def flip(target: str) -> float:
            cpu = time.process_time()
            for n in range(changes):
                result = await store.update(DURABLE, target, flips[n % 2], revisions[target])
                assert isinstance(result, Won), result
                revisions[target] = result.revision
                await trio.testing.wait_all_tasks_blocked()
            return time.process_time() - cpu

        bare_key = next(iter(unwatched))
        owner_cpu = await flip(key)
        owner_bare = await flip(bare_key)
        out["cpu_per_owner_change"] = max(0.0, owner_cpu - owner_bare) / changes
        out["owner_changes"] = changes

        # -- join, then memory per split ------------------------------------------------------
        async with client() as second:
            began = time.perf_counter()
            joined = await start_worker(
                nursery, second, "joiner", planner=planner_of(size), config=_config(1)
            )
            out["join"] = time.perf_counter() - began
            await _quiet()
            listed = await store.list(DURABLE, KEYS.prefix)
            out["record_bytes"] = sum(len(e.value) for e in listed) / size
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                async with client() as third:
                    observer = await start_worker(
                        nursery, third, "observer", planner=planner_of(size), config=_config(1)
                    )
                    await _quiet()
                    gc.collect()
                    out["bytes_per_split"] = (tracemalloc.get_traced_memory()[0] - before) / size
                    observer.kill()
                    await _quiet()
            finally:
                tracemalloc.stop()
            joined.kill()
        nursery.cancel_scope.cancel()
    return out


def _time_it(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        call()
        times.append(time.process_time() - started)
    return median(times)


def assignment_rows(splits: int = 100_000, workers: int = 100, repeat: int = 3) -> list[Row]:
    """The placement from scratch over ``splits`` and ``workers`` without zones: fresh,
    balanced, after a departure (the reference model's time beside it)."""
    rng = random.Random(7)
    fleet = {f"w{n:03d}": splits // workers + 1 for n in range(workers)}
    weights = {split_id(n): rng.randint(1, 4) for n in range(splits)}
    seed = fingerprint_hash("bench")
    fresh = {s: Placement(w, None) for s, w in weights.items()}

    def place(pool: dict[str, Placement], who: dict[str, int]) -> dict[str, tuple[str, ...]]:
        lanes = {m: Worker(cap) for m, cap in who.items()}
        return solve_placement(lanes, pool, default_cap=8, seed=seed)

    def model(pool: dict[str, Placement], who: dict[str, int]) -> dict[str, tuple[str, ...]]:
        return desired_assignment(who, pool, default_cap=8, seed=seed)

    first = place(fresh, fleet)
    assert model(fresh, fleet) == first, "the placement left its reference model"
    owner = {s: m for m, held in first.items() for s in held}
    balanced = {s: Placement(w, owner[s]) for s, w in weights.items()}
    assert place(balanced, fleet) == first, "a balanced assignment is not a fixpoint"
    fewer = dict(fleet)
    del fewer["w000"]
    sort_time = _time_it(lambda: sorted((-w, s) for s, w in weights.items()), repeat)
    rows = []
    for label, pool, who in (
        ("fresh job", fresh, fleet),
        ("balanced (fixpoint)", balanced, fleet),
        ("one worker left", balanced, fewer),
    ):
        took = _time_it(functools.partial(place, pool, who), repeat)
        reference = _time_it(functools.partial(model, pool, who), repeat)
        rows.append(
            Row(
                bench=(
                    f"5 placement from scratch, {splits:,} splits x {workers} workers, "
                    f"no zones, {label}"
                ),
                store="—",
                measured=fmt_seconds(took),
                baseline=f"{fmt_seconds(sort_time)} (one sorted() of the splits)",
                ratio=took / sort_time,
                note=(
                    f"CPU time, median of {repeat}; a fresh index solved once "
                    f"(the reference model: {fmt_seconds(reference)})"
                ),
            )
        )
    return rows


def placement_rows(
    splits: int = 100_000, workers: int = 100, domains: int = 10, repeat: int = 3
) -> list[Row]:
    """The placement from scratch over ``splits`` and ``workers`` in ``domains`` zones: fresh,
    fixpoint, zone lost, and per change (one split leaves the pool; the whole job is placed
    again), the reference model's time beside each."""
    rng = random.Random(7)
    # Lanes for twice a fair share, so a lost zone's splits fit on the survivors.
    cap = 2 * splits // workers
    fleet = {
        f"w{n:03d}": Worker(cap, f"zone-{n % domains}/rack-{n % 3}/host-{n}")
        for n in range(workers)
    }
    weights = {split_id(n): rng.randint(1, 4) for n in range(splits)}
    seed = fingerprint_hash("bench")
    fresh = {s: Placement(w, None) for s, w in weights.items()}

    def run(pool: dict[str, Placement], who: dict[str, Worker]) -> dict[str, tuple[str, ...]]:
        return solve_placement(who, pool, default_cap=8, seed=seed)

    def model(pool: dict[str, Placement], who: dict[str, Worker]) -> dict[str, tuple[str, ...]]:
        return place(who, pool, default_cap=8, seed=seed)

    first = run(fresh, fleet)
    assert model(fresh, fleet) == first, "the placement left its reference model"
    owner = {s: m for m, held in first.items() for s in held}
    balanced = {s: Placement(w, owner[s]) for s, w in weights.items()}
    assert run(balanced, fleet) == first, "a balanced placement is not a fixpoint"
    survivors = {m: v for m, v in fleet.items() if not v.locality.startswith("zone-0/")}
    after = run(balanced, survivors)
    moved = sum(1 for m, held in after.items() for s in held if owner[s] != m)
    lost = sum(len(first[m]) for m in fleet if m not in survivors)
    localities = {m: v.locality for m, v in fleet.items()}
    radius = placement_report(first, localities, weights, 0).blast_radius
    radius_after = placement_report(
        after, {m: v.locality for m, v in survivors.items()}, weights, 0
    ).blast_radius
    one_done = dict(balanced)
    del one_done[next(iter(one_done))]
    sort_time = _time_it(lambda: sorted((-w, s) for s, w in weights.items()), repeat)
    label = f"{splits:,} splits x {workers} workers in {domains} zones"
    cases = (
        ("fresh job", fresh, fleet, f"blast radius {radius:.3f}"),
        ("balanced (fixpoint)", balanced, fleet, "nothing moves"),
        (
            "a whole zone lost",
            balanced,
            survivors,
            f"moved {moved:,} = the zone's {lost:,}; blast radius {radius_after:.3f}",
        ),
        (
            "per ownership change, from scratch (one split done, all re-placed)",
            one_done,
            fleet,
            "what the leader paid per change before the index",
        ),
    )
    rows = []
    for case, pool, who, note in cases:
        took = _time_it(functools.partial(run, pool, who), repeat)
        reference = _time_it(functools.partial(model, pool, who), repeat)
        rows.append(
            Row(
                bench=f"5 placement from scratch, {label}, {case}",
                store="—",
                measured=fmt_seconds(took),
                baseline=f"{fmt_seconds(sort_time)} (one sorted() of the splits)",
                ratio=took / sort_time,
                note=(
                    f"CPU time, median of {repeat}; {note}; "
                    f"the reference model: {fmt_seconds(reference)}"
                ),
            )
        )
    return rows


def index_rows(splits: int = 100_000, workers: int = 100, changes: int = 2_000) -> list[Row]:
    """The leader's placement index: CPU per ownership change, with and without zones."""
    rows = []
    for domains in (10, 0):
        rng = random.Random(11)
        cap = 2 * splits // workers
        fleet = {
            f"w{n:03d}": Worker(cap, f"zone-{n % domains}/host-{n}" if domains else "")
            for n in range(workers)
        }
        weights = {split_id(n): rng.randint(1, 4) for n in range(splits)}
        seed = fingerprint_hash("bench")
        first = solve_placement(fleet, {s: Placement(w, None) for s, w in weights.items()},
                                default_cap=8, seed=seed)  # fmt: skip
        owner = {s: m for m, held in first.items() for s in held}
        started = time.process_time()
        index = PlacementIndex(default_cap=8, seed=seed, isolation_tier=0)
        index.set_workers(fleet)
        for split, weight in weights.items():
            index.update(split, Placement(weight, owner[split]))
        index.take_changed()
        build = time.process_time() - started
        alive = sorted(weights)
        rng.shuffle(alive)

        moves = 0
        leader_cpu = 0.0
        for n in range(changes):
            cpu = time.process_time()
            done = alive[n]
            index.update(done, None)  # a completion: the split leaves the pool
            changed = index.take_changed()
            published = [index.assignment_of(m) for m in changed or ()]
            leader_cpu += time.process_time() - cpu
            assert published is not None
            del owner[done]
            landed = index.moves()  # the workers' part: hand back, and the assignees claim
            moves += len(landed)
            cpu = time.process_time()
            for split, worker in landed.items():
                owner[split] = worker
                index.update(split, Placement(weights[split], worker))
            assert index.take_changed() == set()  # the claims themselves change nothing
            leader_cpu += time.process_time() - cpu
        per_change = leader_cpu / changes
        cpu = time.process_time()
        for n in range(changes):  # a claim by the assignee (its split anchored on it already)
            split = alive[changes + n]
            index.update(split, Placement(weights[split], owner[split]))
            assert index.take_changed() == set()
        per_claim = (time.process_time() - cpu) / changes
        check = place(fleet, {s: Placement(weights[s], owner[s]) for s in alive[changes:]},
                      default_cap=8, seed=seed)  # fmt: skip
        assert index.assignment() == check, "the index left its reference model"
        label = (
            f"{splits:,} splits x {workers} workers in {domains} zones"
            if domains
            else f"{splits:,} splits x {workers} workers, no zones"
        )
        rows.append(
            Row(
                bench=f"5 placement index, {label}, CPU per ownership change",
                store="—",
                measured=fmt_seconds(per_change),
                baseline="1 ms (target)",
                ratio=per_change / 0.001,
                note=(
                    f"{changes:,} completions, each re-solved and published, then its moves "
                    f"claimed ({moves} moves in all); solves with the affinity step "
                    f"{index.affinity_solves}; building the index {fmt_seconds(build)}; "
                    f"a claim by the assignee "
                    f"{fmt_seconds(per_claim)}; equal to the reference model at the end"
                ),
            )
        )
    return rows


def run(options: Options) -> list[Row]:
    """Every job size that fits its time budget, then the placement at 100k x 100."""
    rows: list[Row] = []
    sizes = SIZES[:4] if options.quick else SIZES
    events = 200 if options.quick else EVENTS
    budget = 240.0
    smallest: float | None = None
    smallest_change: float | None = None
    for size in sizes:
        started = time.monotonic()
        # Each size starts from a collected heap: the garbage the suites and sizes before it
        # left (a whole job's records, in cycles with its tasks) must not be walked by this
        # size's collections.
        gc.collect()
        try:
            point = trio.run(_bounded, size, events, 2 if options.quick else 4, budget)
        except trio.TooSlowError:
            rows.append(
                Row(
                    bench=f"5 scale, {size:,} splits",
                    store="memory",
                    measured="did not finish",
                    baseline="—",
                    ratio=None,
                    note=f"over its {budget:g} s budget; larger jobs skipped",
                )
            )
            break
        per_event = point["cpu_per_event"]
        if smallest is None:
            smallest = per_event
        rows.append(
            Row(
                bench=f"5 a follower's CPU per commit of others, {size:,} splits",
                store="memory",
                measured=fmt_seconds(per_event),
                baseline=f"{fmt_seconds(smallest)} at {sizes[0]:,} splits",
                ratio=per_event / smallest if smallest else None,
                note=(
                    f"plan {fmt_seconds(point['plan'])}, join {fmt_seconds(point['join'])} "
                    f"({fmt_seconds(point['join'] / size)}/split); a bare store write "
                    f"{fmt_seconds(point['cpu_per_write'])} CPU"
                ),
            )
        )
        rows.append(
            Row(
                bench=f"5 a follower's memory per split of the job, {size:,} splits",
                store="memory",
                measured=fmt_bytes(point["bytes_per_split"]),
                baseline=f"{fmt_bytes(point['record_bytes'])} of stored records",
                ratio=point["bytes_per_split"] / point["record_bytes"],
                note=(
                    "tracemalloc, one joining follower: it keeps its own share of the job, "
                    "not the job (the leader's costs are the placement and fleet rows); "
                    f"this size took {time.monotonic() - started:.0f} s"
                ),
            )
        )
        if smallest_change is None:
            smallest_change = point["cpu_per_owner_change"]
        rows.append(
            Row(
                bench=f"5 a follower's CPU per progress write of others, {size:,} splits",
                store="memory",
                measured=fmt_seconds(point["cpu_per_owner_change"]),
                baseline=f"{fmt_seconds(smallest_change)} at {sizes[0]:,} splits",
                ratio=point["cpu_per_owner_change"] / smallest_change if smallest_change else None,
                note=(
                    f"{point['owner_changes']:.0f} writes of another split's progress record "
                    "naming a new owner, each alone: no worker watches progress records, so "
                    "none is delivered (the leader learns ownership from lease events)"
                ),
            )
        )
        for row in rows[-3:]:
            print(row.line(), flush=True)
    rows += assignment_rows(repeat=1 if options.quick else 3)
    for row in rows[-3:]:
        print(row.line(), flush=True)
    rows += placement_rows(repeat=1 if options.quick else 3)
    for row in rows[-4:]:
        print(row.line(), flush=True)
    rows += index_rows(changes=500 if options.quick else 2_000)
    for row in rows[-2:]:
        print(row.line(), flush=True)
    return rows


async def _bounded(size: int, events: int, rounds: int, budget: float) -> dict[str, float]:
    with trio.fail_after(budget):
        return await _scale_point(size, events, rounds)
