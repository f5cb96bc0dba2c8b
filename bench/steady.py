"""Benchmark 6: the store writes a steady, balanced fleet makes, against the protocol's minimum.

Four :func:`spate.run_worker` calls share 64 splits (16 each); their handlers hold their
splits and do nothing. Each worker's store client is wrapped in a recorder that counts every
call by key category. Once the fleet is balanced and has settled, the counters are reset and
the fleet runs for a number of leases: twenty of virtual time on the memory store (Trio's
MockClock: exact, and free in wall time), ten of real time on etcd.

On every store the minimum a live fleet must write is one renewal per session per third of
a lease: every presence key and the leader key, (workers + 1) x 3 / lease, with zero
per-split renewals. On a session store (etcd) each worker's session keepalive (not a key
write) keeps its lease keys alive; on a per-key store (memory, NATS) a lease is a durable key
naming its owner's session, the presence record, and nobody renews it. Everything else —
assignments, progress records, leases — should be zero while nothing changes. Nothing is
asserted; the figures are reported. Run alone with ``python -m bench --only steady``.
"""

from __future__ import annotations

import collections

import trio
import trio.testing

from bench._fleet import JOB, RecordingStore, planner_of
from bench._harness import Backend, Options, Row, backends, fmt_rate, memory_backend, namespace
from spate import Config, SplitHandle, run_worker
from spate._core.records import Keys
from spate.store import EphemeralSemantics

WORKERS = 4
SPLITS = 64
LEASE = 9.0
LEASES = 20
ETCD_LEASE = 3.0
"""A short lease keeps the real-time etcd run to about a minute."""
ETCD_LEASES = 10


async def _steady(
    backend: Backend, lease: float, workers: int, splits: int, leases: int
) -> tuple[dict[str, int], dict[str, int], int, float, bool]:
    ns = namespace("steady")
    held: set[str] = set()
    everyone_holds = trio.Event()
    lost = 0
    config = Config(max_in_flight=splits // workers, planner_thread=backend.name != "memory")
    recorders: list[RecordingStore] = []
    session_store = False

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

            async def worker(name: str = f"w{number}") -> None:
                nonlocal session_store
                async with backend.open(ns, lease) as inner:
                    store = RecordingStore(inner)
                    recorders.append(store)
                    session_store = inner.capabilities.ephemeral is EphemeralSemantics.SESSION
                    await run_worker(
                        store,
                        job=JOB,
                        instance=name,
                        planner=planner_of(splits),
                        handler=handler,
                        config=config,
                    )

            nursery.start_soon(worker)
        with trio.fail_after(100 * lease):
            await everyone_holds.wait()
        await trio.sleep(3 * lease)  # settle: rebalancing done, every lease renewed since
        for store in recorders:
            store.calls.clear()
        lost_before = lost
        started = trio.current_time()
        await trio.sleep(leases * lease)
        ended = trio.current_time()
        # The session's renewals (presence) on a per-key store; nothing renews a lease.
        prefix = Keys(JOB).worker("")
        gap = max(s.longest_renewal_gap(started, ended, prefix) for s in recorders)
        writes: collections.Counter[str] = collections.Counter()
        reads: collections.Counter[str] = collections.Counter()
        for store in recorders:
            writes += store.writes()
            for (op, what), count in store.calls.items():
                if op in ("get", "list", "watch"):
                    reads[f"{op} {what}"] += count
        nursery.cancel_scope.cancel()
    return dict(writes), dict(reads), lost - lost_before, gap, session_store


def run(options: Options) -> list[Row]:
    """One steady fleet on the memory store in virtual time, one on etcd in real time."""
    rows: list[Row] = []
    if options.wants("memory"):
        leases = 5 if options.quick else LEASES
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(_steady, memory_backend(), LEASE, WORKERS, SPLITS, leases, clock=clock)
        rows.append(_row("memory", LEASE, leases, "virtual", *result))
    if options.wants("etcd"):
        leases = 3 if options.quick else ETCD_LEASES
        rows.append(trio.run(_on_etcd, leases))
    return rows


async def _on_etcd(leases: int) -> Row:
    async with backends(["etcd"]) as found:
        result = await _steady(found["etcd"], ETCD_LEASE, WORKERS, SPLITS, leases)
    return _row("etcd", ETCD_LEASE, leases, "real", *result)


def _row(
    store: str,
    lease: float,
    leases: int,
    clock: str,
    writes: dict[str, int],
    reads: dict[str, int],
    lost: int,
    gap: float,
    session_store: bool,
) -> Row:
    seconds = leases * lease
    total = sum(writes.values())
    # Presence keys and the leader key, on every store: nothing is renewed per split.
    per_third = WORKERS + 1
    minimum = per_third / (lease / 3)
    kinds = ", ".join(f"{k} {fmt_rate(v / seconds)}" for k, v in sorted(writes.items()))
    read_kinds = ", ".join(f"{k} {fmt_rate(v / seconds)}" for k, v in sorted(reads.items()))
    lease_writes = writes.get("lease", 0)
    renewals = (
        f"per-split lease writes {lease_writes} (the session keepalive keeps them)"
        if session_store
        else f"per-split lease writes {lease_writes} (each lease a durable key naming its "
        f"owner's presence record), longest gap between two renewals of a presence record "
        f"{gap:.2f} s"
    )
    row = Row(
        bench=f"6 store writes/s, steady fleet ({WORKERS} workers, {SPLITS} splits)",
        store=store,
        measured=fmt_rate(total / seconds, " writes/s"),
        baseline=fmt_rate(minimum, " writes/s minimum") + f" ({per_third} keys per lease/3)",
        ratio=(total / seconds) / minimum,
        note=(
            f"lease {lease:g} s, {leases} leases of {clock} time; by kind: {kinds}; "
            f"{renewals}; assignment writes {writes.get('assignment', 0)}; Lost {lost}; "
            f"reads: {read_kinds or 'none'}"
        ),
    )
    print(row.line(), flush=True)
    return row
