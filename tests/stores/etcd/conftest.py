"""Real etcd fixtures for the etcd store tests: one session server, fresh ones on demand."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from spate_testing.servers.etcd import EtcdServer, etcd_server_sync
from spate_testing.servers.etcd import etcd_fresh_server as etcd_fresh_server
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server

AUTH_TOKEN_TTL = 2
"""Seconds an idle auth token lives on the auth server (etcd's default is 300)."""


@pytest.fixture
def namespace() -> str:
    """A namespace no other test (or earlier run against the same server) uses."""
    return f"t-{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def etcd_auth_server() -> Iterator[EtcdServer]:
    """An etcd with authentication on (user root) whose idle tokens expire after 2 s."""
    with etcd_server_sync(auth=True, auth_token_ttl=AUTH_TOKEN_TTL) as server:
        yield server


@pytest.fixture(scope="session")
def etcd_tls_server() -> Iterator[EtcdServer]:
    """An etcd serving clients over TLS with client-certificate auth (a throwaway CA)."""
    with etcd_server_sync(tls=True) as server:
        yield server
