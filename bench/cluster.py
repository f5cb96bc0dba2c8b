"""Benchmark 9: spate on 3-member store clusters, and the stall when the store's leader dies.

1. **Commit latency on a cluster** — benchmark 1 (``SplitHandle.commit`` against the same
   client's bare ``store.update``, interleaved rounds) on a 3-member etcd cluster and a
   3-server NATS cluster with R3 buckets, through URLs naming every member.
2. **Store-leader stall** — one worker holds 4 splits, each committing back to back. The
   store's leader (etcd's raft leader; the durable bucket's stream leader on NATS) is
   SIGKILLed; the figure is the time from the kill until the first commit *sent after the
   kill* is acknowledged, against the store's own election timeout (etcd: the cluster's
   ``--election-timeout``; NATS: JetStream's minimum raft election timeout, 4 s (it draws
   each one from 4-9 s and does not let one configure it)). Each round restarts the killed
   member before the next.

Run alone with ``python -m bench --only cluster``.
"""

from __future__ import annotations

import math
from typing import Any

import trio

from bench._fleet import JOB, planner_of
from bench._harness import Backend, Options, Row, _url_backend, fmt_seconds, median, namespace
from bench.commit import commit_latency
from spate import Config, Fenced, SplitHandle, StoreError, StoreUnavailable, run_worker
from spate.store import Keyspace
from spate_stores.nats._keys import bucket_name

STALL_TTL = 15.0
SPLITS = 4


async def _stall_once(backend: Backend, cluster: Any, kind: str, ns: str) -> float:
    """Kill the store's leader under a committing worker; seconds until commits succeed."""
    killed_at = math.inf
    first_after: list[float] = []  # acknowledgement times of commits sent after the kill
    recovered = trio.Event()
    ready = trio.Event()
    held: list[SplitHandle] = []

    async def handler(split: SplitHandle) -> None:
        held.append(split)
        if len(held) == SPLITS:
            ready.set()
        watermark = 0
        while True:
            watermark += 1
            sent = trio.current_time()
            try:
                await split.commit(watermark)
            except Fenced:
                return
            except (StoreUnavailable, StoreError):
                await trio.sleep(0.005)
                continue
            if sent >= killed_at:
                first_after.append(trio.current_time())
                recovered.set()

    async with backend.open(ns, STALL_TTL) as store, trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_worker(
                store,
                job=JOB,
                instance="committer",
                planner=planner_of(SPLITS),
                handler=handler,
                config=Config(max_in_flight=SPLITS),
            )
        )
        with trio.fail_after(60):
            await ready.wait()
        await trio.sleep(1.0)  # steady commits before the kill
        if kind == "etcd":
            killed = await trio.to_thread.run_sync(cluster.member, "leader")
        else:
            stream = "KV_" + bucket_name(ns, Keyspace.DURABLE)
            killed = await trio.to_thread.run_sync(cluster.member, "leader", stream)
        killed_at = trio.current_time()
        cluster.stop_member_sync(killed, kill=True)  # SIGKILL: returns once it is dead
        with trio.fail_after(60):
            await recovered.wait()
        stall = min(first_after) - killed_at
        nursery.cancel_scope.cancel()
    await cluster.restart(killed)
    return stall


async def _cluster_rows(kind: str, options: Options) -> list[Row]:
    rows: list[Row] = []
    from spate_testing.servers.clusters import etcd_cluster, nats_cluster

    start: Any = etcd_cluster if kind == "etcd" else nats_cluster
    async with start() as cluster:
        backend = _url_backend(f"{kind}-cluster", cluster.store_url)
        ops = 30 if options.quick else 200
        rows.append(await commit_latency(backend, ops=ops, rounds=2 if options.quick else 4))
        print(rows[-1].line(), flush=True)
        # etcd: a write forwarded to a dying leader waits out the client's request timeout
        # (the URL's timeout=, 5 s by default), so the stall is measured at two settings.
        for timeout in ("5", "1") if kind == "etcd" else ("",):
            if timeout:
                timed = _url_backend(
                    f"{kind}-cluster",
                    lambda ns, ttl, t=timeout: cluster.store_url(ns, ttl=ttl, timeout=t),
                )
            else:
                timed = backend
            stalls = []
            for number in range(1 if options.quick else 3):
                ns = namespace(f"stall{number}")
                stalls.append(await _stall_once(timed, cluster, kind, ns))
            election = float(cluster.election_timeout)
            stall = median(stalls)
            rows.append(
                Row(
                    bench="9 store-leader stall",
                    store=f"{kind}-cluster" + (f" timeout={timeout}" if timeout else ""),
                    measured=f"{fmt_seconds(stall)} (max {fmt_seconds(max(stalls))})",
                    baseline=f"{fmt_seconds(election)} election timeout",
                    ratio=stall / election if election else math.nan,
                    note=f"{len(stalls)} leader kills under {SPLITS} committing splits",
                )
            )
            print(rows[-1].line(), flush=True)
    return rows


def run(options: Options) -> list[Row]:
    """Both figures on each cluster the run asks for (stores ``etcd`` / ``nats``)."""
    rows: list[Row] = []
    for kind in ("etcd", "nats"):
        if options.wants(kind) or options.wants(f"{kind}-cluster"):
            rows += trio.run(_cluster_rows, kind, options)
    return rows
