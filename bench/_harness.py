"""What every benchmark of the suite shares: result rows, statistics, stores, real servers.

Figures are ratios taken side by side in one run (docs/performance.md): these machines are
shared and noisy, so an absolute timing from one run says little about another, while a measurement
interleaved with its baseline, on the same server, in the same process, says a lot.
"""

from __future__ import annotations

import itertools
import math
import secrets
import statistics
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

import attrs
import trio

from spate import StoreUnavailable
from spate.store import Keyspace, Store, Won
from spate_stores import open_store
from spate_stores.memory import MemoryServer, MemoryStore

__all__ = [
    "Backend",
    "Options",
    "Row",
    "backends",
    "cas",
    "fmt_bytes",
    "fmt_rate",
    "fmt_seconds",
    "median",
    "namespace",
    "percentile",
    "print_rows",
    "raw_cas_latencies",
]

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL


@attrs.frozen
class Options:
    """What the whole run was asked for."""

    stores: tuple[str, ...] = ("memory", "etcd", "nats")
    """Stores to measure (each benchmark measures the ones it applies to)."""
    quick: bool = False
    """Smaller counts and fewer rounds: a smoke run of the suite, not figures to quote."""

    def wants(self, store: str) -> bool:
        """Whether ``store`` is measured in this run."""
        return store in self.stores


@attrs.frozen
class Row:
    """One line of the results table: a measurement, its baseline, and their ratio."""

    bench: str
    """Which benchmark (its number in the results table and a short name)."""
    store: str
    measured: str
    baseline: str
    ratio: float | None
    """measured / baseline (None where the figure is not a ratio)."""
    target: str = "—"
    met: bool | None = None
    """Whether the target was met (None where there is no target)."""
    note: str = ""

    @property
    def ratio_text(self) -> str:
        """The ratio as printed (``1.08x``), or a dash."""
        if self.ratio is None or not math.isfinite(self.ratio):
            return "—"
        return f"{self.ratio:.2f}x" if self.ratio < 100 else f"{self.ratio:.0f}x"

    def line(self) -> str:
        """One progress line for the console while the suite runs."""
        return (
            f"  {self.bench} [{self.store}]: {self.measured} vs {self.baseline} -> "
            f"{self.ratio_text} {self.verdict if self.met is not None else ''}"
        ).rstrip()

    @property
    def verdict(self) -> str:
        """``met``, ``MISSED`` or a dash."""
        return "—" if self.met is None else ("met" if self.met else "MISSED")


# -- statistics and formatting ---------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median (NaN for no values)."""
    data = list(values)
    return statistics.median(data) if data else math.nan


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile by nearest rank (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def fmt_seconds(seconds: float) -> str:
    """A duration with a unit that keeps three significant figures or so."""
    if not math.isfinite(seconds):
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_rate(per_second: float, unit: str = "/s") -> str:
    """A rate, thousands grouped."""
    return f"{per_second:,.0f}{unit}" if per_second >= 100 else f"{per_second:.1f}{unit}"


def fmt_bytes(count: float) -> str:
    """A byte count in B / KiB / MiB."""
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MiB"
    if count >= 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count:.0f} B"


def print_rows(rows: Sequence[Row], *, title: str = "") -> str:
    """Print ``rows`` as a Markdown table (and return the text)."""
    header = ["#", "store", "spate", "baseline", "ratio", "target", "", "note"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        cells = [
            row.bench,
            row.store,
            row.measured,
            row.baseline,
            row.ratio_text,
            row.target,
            row.verdict,
            row.note,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    text = "\n".join(([f"\n{title}\n"] if title else []) + lines)
    print(text, flush=True)
    return text


_counter = itertools.count()


def namespace(tag: str) -> str:
    """A namespace no earlier run (or other benchmark of this run) used."""
    return f"bench{tag}{next(_counter)}x{secrets.token_hex(3)}"


# -- stores ----------------------------------------------------------------------------------


@attrs.define
class Backend:
    """A kind of store the suite measures: how to open a fresh client on one server."""

    name: str
    _open: Callable[[str, float], AbstractAsyncContextManager[Store]] = attrs.field(alias="open")
    url: Callable[[str, float], str] | None = None
    """The store URL of a namespace and TTL, for a worker in another process (real servers)."""

    def open(self, namespace: str, ttl: float) -> AbstractAsyncContextManager[Store]:
        """A new store client ("process") on this backend's server, in ``namespace``."""
        return self._open(namespace, ttl)


def memory_backend(server: MemoryServer | None = None) -> Backend:
    """Clients of one :class:`MemoryServer` (a fresh one unless given)."""
    shared = server if server is not None else MemoryServer()

    @asynccontextmanager
    async def open_memory(ns: str, ttl: float) -> AsyncIterator[Store]:
        async with MemoryStore(server=shared, namespace=ns, ephemeral_ttl=ttl) as store:
            yield store

    return Backend("memory", open=open_memory)


def _url_backend(name: str, store_url: Callable[..., str]) -> Backend:
    def url(ns: str, ttl: float) -> str:
        return store_url(ns, ttl=ttl)

    def open_url(ns: str, ttl: float) -> AbstractAsyncContextManager[Store]:
        return open_store(url(ns, ttl))

    return Backend(name, open=open_url, url=url)


@asynccontextmanager
async def backends(names: Iterable[str]) -> AsyncIterator[dict[str, Backend]]:
    """Start a real server for each of ``names`` ("etcd", "nats"; "memory" needs none), on free
    loopback ports, and stop them on exit. ``etcd-cluster`` and ``nats-cluster`` start a
    3-member cluster instead (URLs naming every member; R3 buckets)."""
    wanted = list(dict.fromkeys(names))
    found: dict[str, Backend] = {}
    async with AsyncExitStack() as stack:
        for name in wanted:
            if name == "memory":
                found[name] = memory_backend()
            elif name == "etcd":
                from spate_testing.servers.etcd import etcd_server

                etcd = await stack.enter_async_context(etcd_server())
                found[name] = _url_backend("etcd", etcd.store_url)
            elif name == "nats":
                from spate_testing.servers.nats import nats_server

                nats = await stack.enter_async_context(nats_server(websocket=False))
                found[name] = _url_backend("nats", nats.store_url)
            elif name == "etcd-cluster":
                from spate_testing.servers.clusters import etcd_cluster

                members = await stack.enter_async_context(etcd_cluster())
                found[name] = _url_backend(name, members.store_url)
            elif name == "nats-cluster":
                from spate_testing.servers.clusters import nats_cluster

                servers = await stack.enter_async_context(nats_cluster())
                found[name] = _url_backend(name, servers.store_url)
            else:
                raise ValueError(
                    f"unknown store {name!r}: use memory, etcd, nats, etcd-cluster or nats-cluster"
                )
        yield found


async def raw_cas_latencies(store: Store, key: str, value: bytes, ops: int) -> list[float]:
    """``ops`` sequential compare-and-swaps of one durable key: the store's own round trip."""
    entry = await store.get(DURABLE, key)
    if entry is None:
        created = await store.create(DURABLE, key, value)
        assert isinstance(created, Won), created
        revision = created.revision
    else:
        revision = entry.revision
    latencies: list[float] = []
    for _ in range(ops):
        started = trio.current_time()
        revision = await cas(store, key, value, revision)
        latencies.append(trio.current_time() - started)
    return latencies


async def cas(store: Store, key: str, value: bytes, revision: int) -> int:
    """One compare-and-swap of a durable key only this caller writes; its new revision.

    An unknown outcome is settled the way spate settles its own (read back, write again), and
    the time that takes counts: SplitHandle.commit pays it too.
    """
    while True:
        try:
            result = await store.update(DURABLE, key, value, revision)
        except StoreUnavailable:
            entry = await store.get(DURABLE, key)
            assert entry is not None, f"{key} vanished"
            if entry.revision != revision:
                return entry.revision  # it landed
            continue
        assert isinstance(result, Won), result
        return result.revision
