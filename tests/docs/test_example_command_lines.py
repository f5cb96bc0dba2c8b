"""Both runnable examples take ``--help`` and ``--store URL`` (a real server as well as memory://)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spate_testing.servers.nats import NatsServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "fenced_sqlite": ROOT / "examples" / "fenced_sqlite.py",
    "splittable_backfill": ROOT / "examples" / "splittable_backfill.py",
}


def _run(example: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES[example]), *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip


@pytest.fixture(scope="module")
def nats() -> Iterator[NatsServer]:
    server = NatsServer(websocket=False)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.mark.parametrize("example", EXAMPLES)
def test_help_prints_usage_and_runs_nothing(example: str, tmp_path: Path) -> None:
    result = _run(example, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {example}.py")
    assert "--store URL" in result.stdout
    assert "memory://" in result.stdout
    assert list(tmp_path.iterdir()) == []  # no database named --help, no output at all


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_unknown_option_is_refused(example: str, tmp_path: Path) -> None:
    result = _run(example, "--store", "memory://", "--bogus", cwd=tmp_path)
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_fenced_sqlite_runs_on_the_store_given(tmp_path: Path) -> None:
    database = tmp_path / "out.db"
    result = _run("fenced_sqlite", str(database), "--store", "memory://?ttl=15", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{database}: every record exactly once: True" in result.stdout


@pytest.mark.nats
@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_runs_on_a_real_nats_server(
    example: str, nats: NatsServer, tmp_path: Path
) -> None:
    url = nats.store_url(f"ex-{uuid.uuid4().hex[:8]}", ttl=5)
    args = [str(tmp_path / "out.db")] if example == "fenced_sqlite" else []
    result = _run(example, *args, "--store", url, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exactly once: True" in result.stdout or "exactly once: yes" in result.stdout
