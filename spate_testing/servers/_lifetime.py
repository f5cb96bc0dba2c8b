"""How a store cluster fixture is started and stopped, shared by the etcd and NATS clusters.

Ports are picked free, then bound by the servers a moment later; another process can take one
in between. A start that failed for that reason is tried again on new ports, and a cluster that
failed to start is cleaned up (its processes stopped, its data directories removed) whatever
the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Protocol, TypeVar

import trio


class Cluster(Protocol):
    """What the lifetime helpers need of a cluster."""

    def start_sync(self) -> None:
        """Start every member and wait until the cluster is ready (blocking)."""

    def cleanup(self) -> None:
        """Stop every member and remove the cluster's data (blocking)."""


C = TypeVar("C", bound=Cluster)


def start_on_free_ports(
    new: Callable[[], C], port_taken: Callable[[C, Exception], bool], attempts: int = 3
) -> C:
    """A started cluster made by ``new``; a new one when ``port_taken`` says a port was lost."""
    for attempt in range(attempts):
        cluster = new()
        try:
            cluster.start_sync()
            return cluster
        except Exception as exc:
            retry = port_taken(cluster, exc)  # before the cleanup removes the members' logs
            cluster.cleanup()
            if not retry or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def running_sync(start: Callable[[], C]) -> Iterator[C]:
    """Start a cluster with ``start``, yield it, and clean it up (blocking)."""
    cluster = start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@asynccontextmanager
async def running(start: Callable[[], C]) -> AsyncIterator[C]:
    """Start a cluster with ``start`` in a thread, yield it, and clean it up, even if cancelled."""
    cluster = await trio.to_thread.run_sync(start)
    try:
        yield cluster
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(cluster.cleanup)
