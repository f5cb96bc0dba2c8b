"""Claims end to end: what only the Trio runtime does around a commit (its hold-back of echoes).

The claim rules themselves are specified machine by machine in
``tests/core/test_claim_lifecycle.py``.
"""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from spate import (
    Lost,
    Progress,
)
from spate._core.machine import Machine
from spate.store import Entry, Keyspace, Won, WriteResult
from spate_stores.memory import MemoryServer

from .harness import (
    KEYS,
    HookStore,
    client,
    planner_of,
    record_of,
    spawn,
)


async def test_the_echo_of_a_commit_heard_before_its_reply_is_never_folded_as_news(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store tells its watchers of a commit before the committer hears its reply: the
    echo waits until the commit has landed and is then dropped by revision, undecoded."""
    posted: list[tuple[str, int]] = []
    watch_put = Machine.watch_put

    def spy(self: Machine, keyspace: Keyspace, entry: Entry) -> None:
        posted.append((entry.key, entry.revision))
        watch_put(self, keyspace, entry)

    monkeypatch.setattr(Machine, "watch_put", spy)
    store = HookStore(client(MemoryServer()))
    landed: list[int] = []

    async def slow_reply(kind: str, ks: Keyspace, key: str, result: WriteResult) -> None:
        if kind == "update" and key == KEYS.split("s00") and isinstance(result, Won):
            landed.append(result.revision)
            await trio.sleep(0.05)  # the watch hears of it first

    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        store.after = slow_reply
        for watermark in range(1, 6):
            await a.c.commit("s00", Progress(watermark, b"x"))
        await trio.testing.wait_all_tasks_blocked()
        assert len(landed) == 5
        assert not {(KEYS.split("s00"), revision) for revision in landed} & set(posted)
        record, revision = await record_of(store, "s00")
        assert record.watermark == 5
        assert revision == landed[-1]
        assert a.c.owned == {"s00"}
        assert not a.of(Lost)
        nursery.cancel_scope.cancel()
