"""Bulk work and the garbage collector (spate._runtime.bulk): what is paused or deferred, when,
and that the application's own settings come back unchanged."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from spate._core.records import PlanRecord, decode
from spate._runtime.bulk import BULK, Deferral, collector_paused
from spate.store import Keyspace
from spate_stores.memory import MemoryServer

from .harness import KEYS, client, config, planner_of, spawn


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[tuple[int, ...]]:
    """The process's thresholds before the test, put back after it whatever it did."""
    before = gc.get_threshold()
    enabled = gc.isenabled()
    yield before
    gc.set_threshold(*before)
    if enabled:
        gc.enable()


def test_a_bulky_synchronous_fold_pauses_the_collector_and_a_small_one_does_not() -> None:
    with collector_paused(BULK - 1):
        assert gc.isenabled()
    with collector_paused(BULK):
        assert not gc.isenabled()
    assert gc.isenabled()


def test_deferring_raises_only_the_full_collections_threshold_and_restores_it(
    thresholds: tuple[int, ...],
) -> None:
    young, middle, _ = thresholds
    deferral = Deferral()
    deferral.hold(BULK - 1)
    assert gc.get_threshold() == thresholds
    deferral.hold(BULK)
    deferred = gc.get_threshold()
    assert deferred[:2] == (young, middle)  # young collections go on as before
    assert deferred[2] > 1_000_000
    deferral.hold(BULK - 1)
    assert gc.get_threshold() == thresholds


def test_thresholds_the_application_sets_meanwhile_are_left_as_it_set_them() -> None:
    deferral = Deferral()
    deferral.hold(BULK)
    gc.set_threshold(500, 5, 5)
    deferral.release()
    assert gc.get_threshold() == (500, 5, 5)


def test_a_deferral_held_across_steps_is_taken_once_and_given_back_once(
    thresholds: tuple[int, ...],
) -> None:
    first, second = Deferral(), Deferral()
    first.hold(BULK)
    first.hold(BULK * 2)  # still bulky: nothing more is taken
    second.hold(BULK)  # two coordinators planning at once share one deferral
    first.release()
    assert gc.get_threshold() != thresholds  # the second still holds it
    second.hold(0)
    assert gc.get_threshold() == thresholds
    second.release()  # releasing what is not held changes nothing
    assert gc.get_threshold() == thresholds


async def test_a_bulky_plan_defers_full_collections_while_it_is_seeded(
    autojump_clock: trio.abc.Clock, thresholds: tuple[int, ...]
) -> None:
    """From the planner's answer until its records are written the leader's runtime defers
    full collections (seen from the young collections that run meanwhile); then it puts the
    thresholds back."""
    seen: set[tuple[int, ...]] = set()

    def observe(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.add(gc.get_threshold())

    server = MemoryServer()
    store = client(server)
    gc.callbacks.append(observe)
    try:
        async with trio.open_nursery() as nursery:
            await spawn(nursery, store, "w0", planner=planner_of(BULK), cfg=config(max_in_flight=1))
            with trio.fail_after(600):
                while True:
                    entry = await store.get(Keyspace.DURABLE, KEYS.plan)
                    if entry and decode(PlanRecord, KEYS.plan, entry.value).planned == BULK:
                        break
                    await trio.sleep(0.1)
            await trio.testing.wait_all_tasks_blocked()
            assert gc.get_threshold() == thresholds
            nursery.cancel_scope.cancel()
    finally:
        gc.callbacks.remove(observe)
    assert any(t[2] > 1_000_000 for t in seen), seen
