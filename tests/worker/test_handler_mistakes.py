"""Mistakes in the handler are refused, not quarantined.

A handler that is not ``async def`` is refused by ``run_worker`` before it joins the job. A
commit with a float watermark or a ``str`` state is a ConfigError raised to the handler, with
nothing written and the split not failed; a handler that lets that error escape stops
``run_worker`` with it, failing no split (the bug would fail every split it runs).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.testing

import spate
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, client, config, planner, progress_of


def sync_handler(split: spate.SplitHandle) -> None:
    """Not async def: a mistake."""


@pytest.mark.parametrize("handler", [sync_handler, lambda split: None, 42])
async def test_a_handler_that_is_not_async_is_refused_at_start(handler: Any) -> None:
    with pytest.raises(spate.ConfigError, match="handler must be an async def function"):
        await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(1), handler=handler
        )


class AsyncCallable:
    async def __call__(self, split: spate.SplitHandle, *, completed: bool = True) -> None:
        await split.commit(1, completed=completed)


async def finish(split: spate.SplitHandle, *, completed: bool) -> None:
    await split.commit(1, completed=completed)


@pytest.mark.parametrize(
    "handler",
    [AsyncCallable(), functools.partial(finish, completed=True)],
    ids=["object", "partial"],
)
async def test_async_callables_and_partials_are_handlers(
    handler: Any, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(60):
        verdict = await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(1), handler=handler,
            config=config(),
        )  # fmt: skip
    assert verdict == spate.AllComplete()


@pytest.mark.parametrize(
    ("call", "complaint"),
    [
        ({"watermark": 1.5}, r"the watermark must be an int \(or None\), not 1.5 \(float\)"),
        ({"watermark": True}, "the watermark must be an int"),
        ({"watermark": 1, "state": "text"}, r"state must be bytes, not str \(encode text first"),
        ({"watermark": 1, "completed": 1}, "completed must be True or False"),
    ],
)
async def test_a_bad_commit_is_a_clear_error_to_the_handler_with_nothing_written(
    call: dict[str, Any], complaint: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = client(MemoryServer())
    refused: list[spate.ConfigError] = []

    async def handle(split: spate.SplitHandle) -> None:
        try:
            await split.commit(**call)
        except spate.ConfigError as exc:
            refused.append(exc)
        record = await progress_of(store, split.id)
        assert record.watermark is None  # nothing was written
        await split.commit(2, completed=True)

    with trio.fail_after(60):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    assert verdict == spate.AllComplete()
    (error,) = refused
    assert "nothing was written" in str(error)
    with pytest.raises(spate.ConfigError, match=complaint):
        raise error
    record = await progress_of(store, "s00")
    assert (record.attempts, record.reason) == (0, "")  # the split was not failed


async def test_a_bad_commit_that_escapes_stops_the_worker_and_fails_no_split(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())

    async def handle(split: spate.SplitHandle) -> None:
        await split.commit(0.5)  # type: ignore[arg-type]

    with (
        pytest.raises(spate.ConfigError, match="the watermark must be an int"),
        trio.fail_after(60),
    ):
        await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    record = await progress_of(store, "s00")
    assert record.attempts == 0
    assert record.status.value == "runnable"
    assert record.watermark is None
