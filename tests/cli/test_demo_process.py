"""``spate worker`` (the demo process) opens its store with the startup budget."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import spate_stores
from spate import AllComplete, Config, StoreUnavailable
from spate._cli.demo.process import run_demo_worker
from spate.store import Store
from spate_testing.faults import FaultyStore


class _UnreachableAtFirst(FaultyStore):
    """A store whose first ``refusals`` opens fail as a cluster electing a leader does."""

    refused = 0

    def __init__(self, inner: Store, refusals: int) -> None:
        super().__init__(inner, owns_inner=True)
        self._refusals = refusals

    async def __aenter__(self) -> FaultyStore:
        if _UnreachableAtFirst.refused < self._refusals:
            _UnreachableAtFirst.refused += 1
            raise StoreUnavailable("no reply to STREAM.INFO within 5 s")
        return await super().__aenter__()


def _flaky_opens(monkeypatch: pytest.MonkeyPatch, refusals: int) -> None:
    real = spate_stores.store_from_url
    _UnreachableAtFirst.refused = 0
    monkeypatch.setattr(
        spate_stores, "store_from_url", lambda url: _UnreachableAtFirst(real(url), refusals)
    )


async def _work() -> object:
    return await run_demo_worker(
        store_url="memory://demo-open",
        job="demo-open",
        instance="w0",
        splits=2,
        seed=3,
        batch_seconds=0.1,
        max_in_flight=2,
    )


async def test_a_worker_started_during_an_election_waits_for_the_store(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four unanswered opens take ~ 0.2 + 0.4 + 0.8 + 1.6 s of backoff: a JetStream election.
    _flaky_opens(monkeypatch, refusals=4)
    verdict = await _work()
    assert isinstance(verdict, AllComplete)
    assert _UnreachableAtFirst.refused == 4


async def test_a_store_that_never_answers_ends_the_worker_saying_what_to_do(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _flaky_opens(monkeypatch, refusals=1000)
    attempts = Config().startup_max_attempts
    with pytest.raises(StoreUnavailable) as caught:
        await _work()
    assert _UnreachableAtFirst.refused == attempts
    message = str(caught.value)
    assert f"did not succeed in {attempts} attempts" in message
    assert "no reply to STREAM.INFO" in message  # the cause
    assert "may still be electing a leader" in message
    assert "check that the store is reachable" in message
