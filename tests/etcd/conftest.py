"""Real etcd fixtures for the etcd store tests: one session server, fresh ones on demand."""

from __future__ import annotations

import secrets

import pytest

from spate_testing.servers.etcd import etcd_fresh_server as etcd_fresh_server
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server


@pytest.fixture
def namespace() -> str:
    """A namespace no other test (or earlier run against the same server) uses."""
    return f"t-{secrets.token_hex(4)}"
