"""Benchmark 6: the store writes a steady, balanced fleet makes, against the protocol's minimum.

Four :func:`spate.run_worker` calls share 64 splits (16 each) on the memory store; their
handlers hold their splits and do nothing. Each worker's store client is wrapped in a
recorder that counts every call by key category. Once the fleet is balanced and has settled,
the counters are reset and the fleet runs for twenty leases of virtual time (Trio's
MockClock: exact, and free in wall time).

The minimum a live fleet must write is one renewal per ephemeral key per third of a lease:
every presence key, every held lease and the leader key. Everything else — assignments,
progress records — should be zero while nothing changes. Nothing is asserted; the figures
are reported. Run alone with ``python -m bench --only steady``.
"""

from __future__ import annotations

import collections

import trio
import trio.testing

from bench._fleet import JOB, RecordingStore, planner_of
from bench._harness import Options, Row, fmt_rate
from spate.config import Config
from spate.worker import SplitHandle, run_worker
from spate_stores.memory import MemoryServer, MemoryStore

WORKERS = 4
SPLITS = 64
LEASE = 9.0
LEASES = 20


async def _steady(
    workers: int, splits: int, leases: int
) -> tuple[dict[str, int], dict[str, int], int, float]:
    server = MemoryServer()
    held: set[str] = set()
    everyone_holds = trio.Event()
    lost = 0
    config = Config(max_in_flight=splits // workers, planner_thread=False)
    recorders = []

    async def handler(split: SplitHandle) -> None:
        nonlocal lost
        held.add(split.id)
        if len(held) == splits:
            everyone_holds.set()
        try:
            await split.revoke_requested.wait()
        except trio.Cancelled:
            if split.lost:
                lost += 1
            raise
        finally:
            held.discard(split.id)

    async with trio.open_nursery() as nursery:
        for number in range(workers):
            store = RecordingStore(MemoryStore(server=server, ephemeral_ttl=LEASE))
            recorders.append(store)

            async def worker(store: RecordingStore = store, name: str = f"w{number}") -> None:
                async with store.inner:
                    await run_worker(
                        store,
                        job=JOB,
                        instance=name,
                        planner=planner_of(splits),
                        handler=handler,
                        config=config,
                    )

            nursery.start_soon(worker)
        with trio.fail_after(100 * LEASE):
            await everyone_holds.wait()
        await trio.sleep(3 * LEASE)  # settle: rebalancing done, every lease renewed since
        for store in recorders:
            store.calls.clear()
        lost_before = lost
        started = trio.current_time()
        await trio.sleep(leases * LEASE)
        gap = max(s.longest_renewal_gap(started, trio.current_time()) for s in recorders)
        writes: collections.Counter[str] = collections.Counter()
        reads: collections.Counter[str] = collections.Counter()
        for store in recorders:
            writes += store.writes()
            for (op, what), count in store.calls.items():
                if op in ("get", "list", "watch"):
                    reads[f"{op} {what}"] += count
        nursery.cancel_scope.cancel()
    return dict(writes), dict(reads), lost - lost_before, gap


def run(options: Options) -> list[Row]:
    """One steady fleet on the memory store, in virtual time."""
    if not options.wants("memory"):
        return []
    leases = 5 if options.quick else LEASES
    clock = trio.testing.MockClock(autojump_threshold=0)
    writes, reads, lost, gap = trio.run(_steady, WORKERS, SPLITS, leases, clock=clock)
    seconds = leases * LEASE
    total = sum(writes.values())
    per_third = WORKERS + SPLITS + 1  # presence keys, leases, the leader key
    minimum = per_third / (LEASE / 3)
    kinds = ", ".join(f"{k} {fmt_rate(v / seconds)}" for k, v in sorted(writes.items()))
    read_kinds = ", ".join(f"{k} {fmt_rate(v / seconds)}" for k, v in sorted(reads.items()))
    leases_per = writes.get("lease", 0) / SPLITS / leases
    row = Row(
        bench=f"6 store writes/s, steady fleet ({WORKERS} workers, {SPLITS} splits)",
        store="memory",
        measured=fmt_rate(total / seconds, " writes/s"),
        baseline=fmt_rate(minimum, " writes/s minimum") + f" ({per_third} keys per lease/3)",
        ratio=(total / seconds) / minimum,
        note=(
            f"lease {LEASE:g} s, {leases} leases of virtual time; by kind: {kinds}; "
            f"each lease renewed {leases_per:.2f}x per lease (minimum 3), longest gap "
            f"{gap:.2f} s; assignment writes "
            f"{writes.get('assignment', 0)}; Lost {lost}; reads: {read_kinds or 'none'}"
        ),
    )
    print(row.line(), flush=True)
    return [row]
