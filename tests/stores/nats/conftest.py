"""Real nats-server fixtures: the pip server (2.11+) and, when one is installed, a 2.9."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from spate_testing.servers.nats import NatsServer, nats_server_version
from spate_testing.servers.nats import spate_nats_server as spate_nats_server

LEGACY_CANDIDATES = ("/usr/sbin/nats-server", "/usr/bin/nats-server")


def legacy_nats_binary() -> str | None:
    """A nats-server before 2.11 (Debian ships 2.9): $NATS_SERVER_LEGACY_BIN or the system's."""
    for candidate in (os.environ.get("NATS_SERVER_LEGACY_BIN"), *LEGACY_CANDIDATES):
        if (
            candidate
            and Path(candidate).is_file()
            and os.access(candidate, os.X_OK)
            and nats_server_version(candidate) < (2, 11)
        ):
            return candidate
    return None


@pytest.fixture(scope="session")
def legacy_nats_server() -> Iterator[NatsServer]:
    """A session-wide nats-server before 2.11 (silent expiry), or skip when none is installed."""
    binary = legacy_nats_binary()
    if binary is None:
        pytest.skip(
            "no nats-server before 2.11 installed (apt-get install nats-server gives 2.9, or "
            "set NATS_SERVER_LEGACY_BIN)"
        )
    server = NatsServer(binary=binary)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"t-{secrets.token_hex(4)}"
