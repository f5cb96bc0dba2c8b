"""The cluster fixtures' shared start and stop: retry on a lost port, always clean up."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
import trio

from spate_testing.servers._lifetime import running, running_sync, start_on_free_ports


class FakeCluster:
    """Fails its first starts as ``FAILURES`` says; logs what is done to it."""

    _kind: ClassVar[str] = "fake"
    FAILURES: ClassVar[list[Exception | None]] = []
    LOG: ClassVar[list[str]] = []

    def __init__(self, directory: Path, size: int = 3) -> None:
        assert directory.name.startswith("spate-fake-cluster-")
        self.directory = directory
        self.failure = self.FAILURES.pop(0) if self.FAILURES else None

    def start_sync(self) -> None:
        self.LOG.append("start")
        if self.failure is not None:
            raise self.failure

    def cleanup(self) -> None:
        self.LOG.append("cleanup")
        self.directory.rmdir()

    def _lost_a_port(self, error: Exception) -> bool:
        return "address already in use" in str(error)


@pytest.fixture(autouse=True)
def fresh() -> None:
    FakeCluster.FAILURES = []
    FakeCluster.LOG = []


def test_a_lost_port_starts_a_new_cluster() -> None:
    FakeCluster.FAILURES = [RuntimeError("address already in use")]
    cluster = start_on_free_ports(FakeCluster, 3)
    assert cluster.failure is None
    assert FakeCluster.LOG == ["start", "cleanup", "start"]
    cluster.cleanup()


def test_any_other_failure_is_cleaned_up_and_raised_at_once() -> None:
    FakeCluster.FAILURES = [ValueError("bad flag")]
    with pytest.raises(ValueError, match="bad flag"):
        start_on_free_ports(FakeCluster, 3)
    assert FakeCluster.LOG == ["start", "cleanup"]


def test_ports_lost_on_every_attempt_raise_the_last_failure() -> None:
    FakeCluster.FAILURES = [RuntimeError("address already in use")] * 3
    with pytest.raises(RuntimeError, match="in use"):
        start_on_free_ports(FakeCluster, 3)
    assert FakeCluster.LOG == ["start", "cleanup"] * 3


def test_the_blocking_form_cleans_up_when_its_block_raises() -> None:
    with pytest.raises(KeyError), running_sync(FakeCluster, 3):
        raise KeyError("boom")
    assert FakeCluster.LOG == ["start", "cleanup"]


async def test_the_trio_form_cleans_up_even_when_cancelled() -> None:
    with trio.CancelScope() as scope:
        async with running(FakeCluster, 3):
            scope.cancel()
            await trio.sleep_forever()
    assert FakeCluster.LOG == ["start", "cleanup"]
