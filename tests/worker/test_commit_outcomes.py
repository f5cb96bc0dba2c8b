"""A commit tells the truth: Fenced only when the store shows the write did not land.

A commit whose reply is lost (it landed) and whose read-backs fail has an unknown outcome:
the handle keeps finding out while the tenancy lasts, and the handler never hears Fenced for
a write the store holds (one that undoes its effects on Fenced would lose data).
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

import spate
from spate._core.records import ProgressRecord, decode
from spate.store import Entry, Keyspace, Revision, Won, WriteResult
from spate_stores.memory import MemoryServer
from tests.runtime.harness import HookStore
from tests.worker.test_worker import JOB, KEYS, client, config, planner, progress_of


class LostReplyThenUnreadable(HookStore):
    """The first commit of ``watermark`` to ``split`` lands with its reply lost; the next
    ``reads`` reads of the split's record then fail."""

    def __init__(self, inner: Any, split: str, watermark: int, reads: int) -> None:
        super().__init__(inner)
        self.key = KEYS.split(split)
        self.watermark = watermark
        self.reads = reads
        self.armed = True
        self.failing = 0
        self.failed_reads = 0

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        result = await self.inner.update(keyspace, key, value, expected, **named)
        if (
            self.armed
            and key == self.key
            and isinstance(result, Won)
            and decode(ProgressRecord, key, value).watermark == self.watermark
        ):
            self.armed = False
            self.failing = self.reads
            raise spate.StoreUnavailable("injected: the reply to a landed commit was lost")
        return result

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        if key == self.key and self.failing:
            self.failing -= 1
            self.failed_reads += 1
            raise spate.StoreUnavailable("injected: the record cannot be read")
        entry: Entry | None = await self.inner.get(keyspace, key)
        return entry


async def test_a_commit_whose_reply_and_read_back_are_lost_lands_without_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = LostReplyThenUnreadable(client(server), "s00", watermark=100, reads=3)
    seen: list[BaseException] = []
    runs = 0

    async def handle(split: spate.SplitHandle) -> None:
        nonlocal runs
        runs += 1
        try:
            await split.commit(100, state=b"done", completed=True)
        except BaseException as exc:
            seen.append(exc)
            raise

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    assert seen == []  # the handler heard of no Fenced: the write had landed
    assert verdict == spate.AllComplete()
    assert runs == 1
    assert store.failed_reads == 3  # every failed read-back was an unknown outcome, retried
    record = await progress_of(client(server), "s00")
    assert (record.watermark, record.state, record.completed) == (100, b"done", True)
    assert record.attempts == 0  # nothing was failed or taken over


async def test_a_tenancy_that_ends_while_a_commit_is_unknown_says_it_may_have_landed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The reply of a landed commit is lost and the record stays unreadable; the tenancy ends
    # meanwhile (here: the handle's own run ends, as when its task outlives the handler). The
    # handle's retry is refused, and the commit raises StoreUnavailable saying it may have
    # landed, never Fenced, which would say nothing was written.
    server = MemoryServer()
    store = LostReplyThenUnreadable(client(server), "s00", watermark=100, reads=10_000)
    outcome: list[BaseException] = []
    started = trio.Event()
    handles: list[spate.SplitHandle] = []

    async def late_commit() -> None:
        try:
            await handles[0].commit(100, state=b"x")
        except Exception as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:

        async def handle(split: spate.SplitHandle) -> None:
            if handles:
                await split.commit(200, state=b"y", completed=True)
                return
            handles.append(split)
            nursery.start_soon(late_commit)
            started.set()
            await trio.sleep(5)  # the commit is retrying meanwhile; then this run ends
            store.failing = 0  # the store answers again
            raise RuntimeError("give the split up")

        with trio.fail_after(300):
            verdict = await spate.run_worker(
                store, job=JOB, instance="a", planner=planner(1), handler=handle,
                config=config(),
            )  # fmt: skip
    assert verdict == spate.AllComplete()
    (error,) = outcome
    assert isinstance(error, spate.StoreUnavailable), error
    assert not isinstance(error, spate.Fenced)
    assert "may have landed" in str(error)
