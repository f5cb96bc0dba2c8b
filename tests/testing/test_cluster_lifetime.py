"""The cluster fixtures' shared start and stop: retry on a lost port, always clean up."""

from __future__ import annotations

import pytest
import trio

from spate_testing.servers._lifetime import running, running_sync, start_on_free_ports


class FakeCluster:
    def __init__(self, log: list[str], failure: Exception | None) -> None:
        self.log = log
        self.failure = failure

    def start_sync(self) -> None:
        self.log.append("start")
        if self.failure is not None:
            raise self.failure

    def cleanup(self) -> None:
        self.log.append("cleanup")


def _port_taken(cluster: FakeCluster, exc: Exception) -> bool:
    return "address already in use" in str(exc)


def test_a_lost_port_starts_a_new_cluster() -> None:
    log: list[str] = []
    failures = [RuntimeError("address already in use"), None]
    cluster = start_on_free_ports(lambda: FakeCluster(log, failures.pop(0)), _port_taken)
    assert cluster.failure is None
    assert log == ["start", "cleanup", "start"]


def test_any_other_failure_is_cleaned_up_and_raised_at_once() -> None:
    log: list[str] = []
    with pytest.raises(ValueError, match="bad flag"):
        start_on_free_ports(lambda: FakeCluster(log, ValueError("bad flag")), _port_taken)
    assert log == ["start", "cleanup"]


def test_ports_lost_on_every_attempt_raise_the_last_failure() -> None:
    log: list[str] = []
    with pytest.raises(RuntimeError, match="in use"):
        start_on_free_ports(
            lambda: FakeCluster(log, RuntimeError("address already in use")), _port_taken
        )
    assert log == ["start", "cleanup"] * 3


def test_the_blocking_form_cleans_up_when_its_block_raises() -> None:
    log: list[str] = []
    with (
        pytest.raises(KeyError),
        running_sync(lambda: start_on_free_ports(lambda: FakeCluster(log, None), _port_taken)),
    ):
        raise KeyError("boom")
    assert log == ["start", "cleanup"]


async def test_the_trio_form_cleans_up_even_when_cancelled() -> None:
    log: list[str] = []
    with trio.CancelScope() as scope:
        async with running(lambda: FakeCluster(log, None)):
            scope.cancel()
            await trio.sleep_forever()
    assert log == ["cleanup"]  # this start made the cluster without starting it
