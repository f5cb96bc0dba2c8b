"""How a store cluster fixture is started and stopped, shared by the etcd and NATS clusters.

A cluster is made in a new temporary directory, started, yielded, and cleaned up (its processes
stopped, its directory removed) on exit, from blocking code (:func:`running_sync`) or a Trio
task (:func:`running`). Ports are picked free and bound by the servers a moment later; another
process can take one in between. A start that failed for that reason is tried again on new
ports, and a cluster that failed to start is cleaned up whatever the reason.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import trio


class Cluster(Protocol):
    """What the lifetime helpers need of a cluster class."""

    _kind: ClassVar[str]
    """Names its temporary directories (``spate-<_kind>-cluster-...``)."""

    def __init__(self, directory: Path, size: int = 3, /) -> None: ...

    def start_sync(self) -> None:
        """Start every member and wait until the cluster is ready (blocking)."""

    def cleanup(self) -> None:
        """Stop every member and remove the cluster's data (blocking)."""

    def _lost_a_port(self, error: Exception) -> bool:
        """Whether ``error`` (from :meth:`start_sync`) says another process took a port."""


C = TypeVar("C", bound=Cluster)


def start_on_free_ports(cls: type[C], size: int, attempts: int = 3) -> C:
    """A started cluster of ``size`` members; new ports when another process took one."""
    for attempt in range(attempts):
        cluster = cls(Path(tempfile.mkdtemp(prefix=f"spate-{cls._kind}-cluster-")), size)
        try:
            cluster.start_sync()
            return cluster
        except Exception as exc:
            retry = cluster._lost_a_port(exc)  # before the cleanup removes the members' logs
            cluster.cleanup()
            if not retry or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def running_sync(cls: type[C], size: int) -> Iterator[C]:
    """Start a cluster, yield it, and clean it up (blocking)."""
    cluster = start_on_free_ports(cls, size)
    try:
        yield cluster
    finally:
        cluster.cleanup()


@asynccontextmanager
async def running(cls: type[C], size: int) -> AsyncIterator[C]:
    """Start a cluster in a thread, yield it, and clean it up, even if cancelled."""
    cluster = await trio.to_thread.run_sync(start_on_free_ports, cls, size)
    try:
        yield cluster
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(cluster.cleanup)
