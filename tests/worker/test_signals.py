"""``run_worker(..., handle_signals=True)``: SIGINT and SIGTERM leave gracefully, twice at once.

These send real signals to this process (pytest-trio runs Trio in the main thread), on the
real clock: a signal arrives through Trio's wakeup file descriptor, not the virtual clock.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading

import pytest
import trio

import spate
from spate_stores import open_store
from spate_testing.faults import FaultyStore
from tests.worker.leave_checks import TTL, Commits, plan


def _url() -> str:
    return f"memory://sig-{secrets.token_hex(4)}?ttl={TTL:g}"


async def _wait_all_committed(commits: Commits, instance: str, since: float) -> None:
    with trio.fail_after(60):
        await commits.wait_all(instance, since)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_the_first_signal_leaves_gracefully_and_run_worker_returns_left(
    signum: signal.Signals,
) -> None:
    url = _url()
    commits = Commits()
    config = spate.Config(membership_debounce=0.5)
    results: list[object] = []
    returned = trio.Event()
    async with open_store(url) as store, trio.open_nursery() as nursery:

        async def leaving() -> None:
            left = await spate.run_worker(
                store, job="sig", instance="a", planner=plan,
                handler=commits.handler("a"), config=config, handle_signals=True,
            )  # fmt: skip
            results.append(left)
            returned.set()

        async def staying() -> None:
            await spate.run_worker(
                store, job="sig", instance="b", planner=plan,
                handler=commits.handler("b"), config=config,
            )  # fmt: skip

        nursery.start_soon(leaving)
        await _wait_all_committed(commits, "a", 0)
        nursery.start_soon(staying)
        await trio.sleep(1)  # b is present before a leaves
        sent = trio.current_time()
        os.kill(os.getpid(), signum)
        with trio.fail_after(TTL / 2):  # handed back, not left to expire
            await _wait_all_committed(commits, "b", sent)
            await returned.wait()
        nursery.cancel_scope.cancel()
    assert results == [spate.Left(signal=signum.name, graceful=True)]


async def test_a_second_signal_leaves_at_once() -> None:
    url = _url()
    commits = Commits()
    config = spate.Config(membership_debounce=0.5)
    results: list[object] = []
    returned = trio.Event()
    async with open_store(url) as store, trio.open_nursery() as nursery:
        frozen = FaultyStore(store)  # b: present, then unable to take anything

        async def leaving() -> None:
            left = await spate.run_worker(
                store, job="sig2", instance="a", planner=plan,
                handler=commits.handler("a"), config=config, handle_signals=True,
            )  # fmt: skip
            results.append(left)
            returned.set()

        async def stuck() -> None:
            await spate.run_worker(
                frozen, job="sig2", instance="b", planner=plan,
                handler=commits.handler("b"), config=config,
            )  # fmt: skip

        nursery.start_soon(leaving)
        await _wait_all_committed(commits, "a", 0)
        nursery.start_soon(stuck)
        await trio.sleep(1)
        frozen.freeze()
        os.kill(os.getpid(), signal.SIGTERM)
        await trio.sleep(0.5)
        # The graceful leave waits for b (present, but frozen) to take the splits, until b's
        # presence expires a lease later; the second signal ends it now.
        assert not results
        os.kill(os.getpid(), signal.SIGTERM)
        with trio.fail_after(TTL / 2):
            await returned.wait()
        frozen.thaw()
        nursery.cancel_scope.cancel()
    assert results == [spate.Left(signal="SIGTERM", graceful=False)]


async def test_handle_signals_outside_the_main_thread_is_a_clear_config_error() -> None:
    errors: list[BaseException] = []

    def in_a_thread() -> None:
        async def main() -> None:
            async with open_store(_url()) as store:
                await spate.run_worker(
                    store, job="thread", planner=plan,
                    handler=Commits().handler("t"), handle_signals=True,
                )  # fmt: skip

        try:
            trio.run(main)
        except BaseException as exc:  # (recorded for the assertion below)
            errors.append(exc)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    await trio.to_thread.run_sync(thread.join)
    (error,) = errors
    assert isinstance(error, spate.ConfigError)
    assert "must run in the main thread" in str(error)
    assert "handle_signals=False" in str(error)


async def test_a_worker_that_stops_with_an_error_gives_the_signals_back() -> None:
    # An error from the coordinator (here: the store was closed under it) must come out of
    # run_worker, not hang on the signal watcher, and the SIGINT handler is restored.
    before = signal.getsignal(signal.SIGINT)  # (Trio's own KeyboardInterrupt handler)
    async with open_store(_url()) as store:
        pass
    with trio.fail_after(60), pytest.raises(spate.SpateError):
        await spate.run_worker(
            store, job="closed", planner=plan, handler=Commits().handler("x"),
            handle_signals=True,
        )  # fmt: skip
    assert signal.getsignal(signal.SIGINT) is before
