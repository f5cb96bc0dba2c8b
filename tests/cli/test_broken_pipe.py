"""`spate status --json | head -1`: a reader that goes away ends the command quietly.

The command's standard output is a pipe whose read end is already closed, which is what
``head`` leaves behind once it has its line: the command exits 141 (as if killed by SIGPIPE)
with nothing on standard error, no traceback and no "Exception ignored" line.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio

from spate_stores import open_store
from spate_testing.servers.etcd import EtcdServer
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server
from tests.ops.test_ops import JOB, seed_job


def _run_into_a_closed_pipe(*argv: str) -> subprocess.CompletedProcess[bytes]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "spate", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            check=False,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    finally:
        os.close(write_end)


def _seeded(server: EtcdServer, namespace: str) -> str:
    url = server.store_url(namespace)

    async def seed() -> None:
        async with open_store(url) as store:
            await seed_job(store)

    trio.run(seed)
    return url


@pytest.mark.etcd
def test_status_json_into_a_closed_pipe_exits_141_quietly(
    etcd_session_server: EtcdServer,
) -> None:
    url = _seeded(etcd_session_server, "broken-pipe-json")
    result = _run_into_a_closed_pipe("status", "--store", url, "--job", JOB, "--json")
    assert result.stderr.decode() == ""
    assert result.returncode == 141


@pytest.mark.etcd
def test_the_status_table_into_a_closed_pipe_ends_quietly(
    etcd_session_server: EtcdServer,
) -> None:
    # rich handles its own broken pipe (stdout onto /dev/null, then exit 1).
    url = _seeded(etcd_session_server, "broken-pipe-table")
    result = _run_into_a_closed_pipe("status", "--store", url, "--job", JOB)
    assert result.stderr.decode() == ""
    assert result.returncode != 0
