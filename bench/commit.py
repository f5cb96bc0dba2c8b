"""Benchmarks 1 and 2: what a commit costs through spate, against the store's own CAS.

1. **Commit latency** — one split held by :func:`spate.run_worker`; its handle commits op
   after op (``SplitHandle.commit``: the API call, the control loop, the fenced CAS, the
   reply) in rounds interleaved with rounds of bare ``store.update`` on a key of the same
   size, through the same store client. Ratio: median commit / median CAS, per round pair,
   median over rounds. On the memory store a second row commits 16 KiB of resume state each
   time: the part of a commit's cost that grows with the state (its encoding and copies).
2. **Commit throughput** — one coordinator holding 64 splits, one task per split committing
   as fast as replies come back, in rounds interleaved with 64 tasks doing bare
   ``store.update`` on 64 keys of their own. Ratio: commits/s over CAS/s. Nothing is renewed
   per split on any store: the coordinator's session keeps every lease it holds. Meanwhile
   every session renewal it makes (presence, and the leader key) is recorded: none may fail,
   no split may be lost, and the longest gap between two renewals of its presence record
   (on NATS, a per-key TTL store) or between two confirmed keepalives of its session lease
   (on etcd) shows how far the session was from starving behind the commit traffic.

Run alone with ``python -m bench --only commit``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from bench._fleet import JOB, RecordingStore, idle, planner_of, split_id, start_worker
from bench._harness import (
    DURABLE,
    Backend,
    Options,
    Row,
    backends,
    cas,
    fmt_rate,
    fmt_seconds,
    median,
    namespace,
    percentile,
)
from spate import Config, Fenced, Progress, SplitHandle, StoreUnavailable, run_worker
from spate._core.records import Keys
from spate.store import EphemeralSemantics, Store, Won

LATENCY_TTL = 10.0
THROUGHPUT_TTL = 6.0
SPLITS = 64
THROUGHPUT_TARGETS = {"etcd": 0.9, "nats": 0.8}
"""The 64-split row's floor on each store (commits/s over concurrent CAS/s); on both, the
longest gap between renewals (or confirmed keepalives) must stay under half a lease."""
KEYS = Keys(JOB)


async def _template(store: Store, split: str) -> bytes:
    """The stored progress record of ``split``: raw CAS writes a value of the same size."""
    entry = await store.get(DURABLE, KEYS.split(split))
    assert entry is not None, f"no progress record for {split}"
    return entry.value


async def _raw_revision(store: Store, key: str, value: bytes) -> int:
    entry = await store.get(DURABLE, key)
    if entry is not None:
        return entry.revision
    created = await store.create(DURABLE, key, value)
    assert isinstance(created, Won), created
    return created.revision


STATE_SIZE = 16 * 1024
"""The resume state of the second memory latency row."""


# -- 1. latency ------------------------------------------------------------------------------


async def commit_latency(backend: Backend, *, ops: int, rounds: int, state_size: int = 0) -> Row:
    """Median ``SplitHandle.commit`` against median ``store.update``, interleaved.

    Each commit carries ``state_size`` bytes of resume state (the raw CAS writes a value the
    size of the progress record that holds it).
    """
    state = bytes(range(256)) * (state_size // 256) + bytes(state_size % 256)
    async with backend.open(namespace("lat"), LATENCY_TTL) as store:
        handles: list[SplitHandle] = []
        gained = trio.Event()

        async def handler(split: SplitHandle) -> None:
            handles.append(split)
            gained.set()
            await idle(split)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_worker(
                    store,
                    job=JOB,
                    instance="committer",
                    planner=planner_of(1),
                    handler=handler,
                    config=Config(max_in_flight=1),
                )
            )
            with trio.fail_after(60):
                await gained.wait()
            handle = handles[0]
            watermark = 1
            await handle.commit(watermark, state=state)
            value = await _template(store, handle.id)
            raw_key = f"raw.latency{state_size}"
            revision = await _raw_revision(store, raw_key, value)

            async def spate_round() -> list[float]:
                nonlocal watermark
                times: list[float] = []
                for n in range(ops + ops // 10):
                    watermark += 1
                    started = trio.current_time()
                    await handle.commit(watermark, state=state)
                    if n >= ops // 10:  # the first tenth warms up
                        times.append(trio.current_time() - started)
                return times

            async def raw_round() -> list[float]:
                nonlocal revision
                times: list[float] = []
                for n in range(ops + ops // 10):
                    started = trio.current_time()
                    revision = await cas(store, raw_key, value, revision)
                    elapsed = trio.current_time() - started
                    if n >= ops // 10:
                        times.append(elapsed)
                return times

            spate_all: list[float] = []
            raw_all: list[float] = []
            ratios: list[float] = []
            for number in range(rounds):
                # Alternate which goes first, so a drift in the machine's load favours neither.
                if number % 2 == 0:
                    ours, theirs = await spate_round(), await raw_round()
                else:
                    theirs, ours = await raw_round(), await spate_round()
                spate_all += ours
                raw_all += theirs
                ratios.append(median(ours) / median(theirs))
            nursery.cancel_scope.cancel()

    ratio = median(ratios)
    ours_median, raw_median = median(spate_all), median(raw_all)
    real = backend.name != "memory"
    return Row(
        bench=f"1 commit latency{f', {state_size // 1024} KiB state' if state_size else ''}",
        store=backend.name,
        measured=f"{fmt_seconds(ours_median)} (p99 {fmt_seconds(percentile(spate_all, 0.99))})",
        baseline=(
            f"{fmt_seconds(raw_median)} store.update (p99 {fmt_seconds(percentile(raw_all, 0.99))})"
        ),
        ratio=ratio,
        target="≤ 1.15x" if real else "—",
        met=(ratio <= 1.15) if real else None,
        note=(
            f"+{fmt_seconds(ours_median - raw_median)} per commit; {rounds} interleaved rounds "
            f"x {ops} ops, per-round ratios {min(ratios):.2f}-{max(ratios):.2f}"
        ),
    )


# -- 2. throughput ---------------------------------------------------------------------------


async def _run_for(seconds: float, workers: list[Callable[[], Awaitable[None]]]) -> float:
    """Run every worker until ``seconds`` after they all started; the time actually taken."""
    deadline = math.inf
    go = trio.Event()

    async def loop(step: Callable[[], Awaitable[None]]) -> None:
        await go.wait()
        while trio.current_time() < deadline:
            await step()

    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(loop, worker)
        await trio.sleep(0.05)
        began = trio.current_time()
        deadline = began + seconds
        go.set()
    return trio.current_time() - began


async def commit_throughput(backend: Backend, *, seconds: float, rounds: int) -> Row:
    """Commits/s of one process holding 64 splits against 64 concurrent bare CAS loops."""
    async with backend.open(namespace("tput"), THROUGHPUT_TTL) as inner:
        store = RecordingStore(inner)
        async with trio.open_nursery() as nursery:
            worker = await start_worker(
                nursery,
                store,
                "busy",
                planner=planner_of(SPLITS),
                config=Config(max_in_flight=SPLITS),
            )
            await worker.until(lambda: len(worker.owned) == SPLITS, 120, "hold every split")
            session_store = inner.capabilities.ephemeral is EphemeralSemantics.SESSION
            if session_store:
                nursery.start_soon(store.sample_keepalives)
            coord = worker.c
            value = await _template(store, split_id(0))
            raw_keys = [f"raw.tput.{n}" for n in range(SPLITS)]
            revisions = {k: await _raw_revision(store, k, value) for k in raw_keys}
            watermarks = dict.fromkeys(coord.owned, 0)
            counts = {"spate": 0, "raw": 0}
            errors = {"spate": 0, "raw": 0}
            fenced: set[str] = set()

            def committer(split: str) -> Callable[[], Awaitable[None]]:
                async def step() -> None:
                    if split in fenced:
                        await trio.sleep(0.01)
                        return
                    progress = Progress(watermarks[split] + 1)
                    try:
                        await coord.commit(split, progress)
                    except StoreUnavailable:
                        # Unknown outcome: the next step retries the same commit, which is
                        # adopted if it landed (what SplitHandle.commit does for a handler).
                        errors["spate"] += 1
                        return
                    except Fenced:
                        fenced.add(split)  # lost: counted with the Lost events
                        return
                    watermarks[split] = progress.watermark or 0
                    counts["spate"] += 1

                return step

            def updater(key: str) -> Callable[[], Awaitable[None]]:
                async def step() -> None:
                    try:
                        result = await store.update(DURABLE, key, value, revisions[key])
                    except StoreUnavailable:
                        errors["raw"] += 1
                        entry = await store.get(DURABLE, key)
                        assert entry is not None
                        revisions[key] = entry.revision
                        return
                    assert isinstance(result, Won), result
                    revisions[key] = result.revision
                    counts["raw"] += 1

                return step

            async def measure(which: str, seconds: float = seconds) -> float:
                counts[which] = 0
                if which == "spate":
                    took = await _run_for(seconds, [committer(s) for s in sorted(watermarks)])
                else:
                    took = await _run_for(seconds, [updater(k) for k in raw_keys])
                return counts[which] / took

            # Warm up both paths first (an HTTP client opens its pooled connections).
            await measure("spate", 0.5)
            await measure("raw", 0.5)
            errors.update(spate=0, raw=0)

            lost_before = len(worker.lost)
            writes_before = worker.metrics.writes.copy()
            started = trio.current_time()
            spate_rates: list[float] = []
            raw_rates: list[float] = []
            ratios: list[float] = []
            for number in range(rounds):
                if number % 2 == 0:
                    ours, theirs = await measure("spate"), await measure("raw")
                else:
                    theirs, ours = await measure("raw"), await measure("spate")
                spate_rates.append(ours)
                raw_rates.append(theirs)
                ratios.append(ours / theirs)
            ended = trio.current_time()
            still_held = len(worker.owned)
            lost = worker.lost[lost_before:]
            during = worker.metrics.writes - writes_before
            renew: dict[str, int] = {}
            for (op, outcome), n in during.items():
                if op in ("presence-renew", "leader-renew"):
                    renew[outcome] = renew.get(outcome, 0) + n
            if session_store:
                gaps = store.longest_keepalive_gap(started, ended)
                session_lost = any(session.lost for session in store.sessions)
            else:
                gaps = store.longest_renewal_gap(started, ended, KEYS.worker("busy"))
                session_lost = False
            nursery.cancel_scope.cancel()

    ratio = median(ratios)
    floor = THROUGHPUT_TARGETS[backend.name]
    healthy = (
        not lost
        and still_held == SPLITS
        and not renew.get("lost")
        and not renew.get("error")
        and not session_lost
        and gaps < THROUGHPUT_TTL
    )
    kept = (
        f"session keepalive: longest gap between two confirmed keepalives {fmt_seconds(gaps)}"
        if session_store
        else f"longest gap between two renewals of the session (presence) {fmt_seconds(gaps)}"
    )
    return Row(
        bench="2 commits/s, 64 splits",
        store=backend.name,
        measured=fmt_rate(median(spate_rates), " commits/s"),
        baseline=fmt_rate(median(raw_rates), " CAS/s (64 concurrent store.update)"),
        ratio=ratio,
        target=f"≥ {floor:g}x, gap < 0.5 lease",
        met=ratio >= floor and healthy and gaps < THROUGHPUT_TTL / 2,
        note=(
            f"per-round ratios {min(ratios):.2f}-{max(ratios):.2f}; "
            f"session renewals (presence, leader key) {renew.get('won', 0)} won / "
            f"{renew.get('lost', 0)} lost / "
            f"{renew.get('error', 0)} failed; Lost events {len(lost)}; unknown outcomes "
            f"(retried) {errors['spate']} commits, {errors['raw']} CAS; {kept} "
            f"(lease {THROUGHPUT_TTL:g} s)" + ("" if healthy else " — RENEWALS STARVED")
        ),
    )


# -- driver ----------------------------------------------------------------------------------


def run(options: Options) -> list[Row]:
    """Both benchmarks on every store they apply to."""
    return trio.run(_run, options)


async def _run(options: Options) -> list[Row]:
    rows: list[Row] = []
    quick = options.quick
    async with backends(options.stores) as found:
        for name in ("memory", "etcd", "nats", "etcd-cluster", "nats-cluster"):
            backend = found.get(name)
            if backend is None:
                continue
            ops = {"memory": 2000, "etcd": 300, "nats": 1000}.get(name, 200)
            if quick:
                ops //= 10
            rows.append(await commit_latency(backend, ops=ops, rounds=2 if quick else 6))
            print(rows[-1].line(), flush=True)
            if name == "memory":
                # What a commit's encoding of its state costs: on memory nothing else does.
                rows.append(
                    await commit_latency(
                        backend, ops=ops, rounds=2 if quick else 6, state_size=STATE_SIZE
                    )
                )
                print(rows[-1].line(), flush=True)
        for name in ("etcd", "nats"):
            backend = found.get(name)
            if backend is None:
                continue
            rows.append(
                await commit_throughput(
                    backend, seconds=0.5 if quick else 2.5, rounds=2 if quick else 4
                )
            )
            print(rows[-1].line(), flush=True)
    return rows
