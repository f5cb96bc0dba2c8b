"""A zombie's refused write is said as what it is, not as a failure.

A handler whose tenancy ended without this worker noticing yet (a zombie) writes to its sink,
whose fence refuses the stale write; the error escapes the handler. Its failure charges no
attempt (the fail write is fenced), and the log says so at INFO: a stale tenancy's write
refused by the sink, nothing to do; no ERROR, no traceback.
"""

from __future__ import annotations

import logging

import attrs
import pytest
import trio
import trio.testing

import spate
from spate._core.records import ProgressRecord, decode, encode
from spate.store import Keyspace, Won
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, KEYS, client, config, planner, progress_of


class StaleFence(spate.Fenced):
    """The recipe's sink refusal (docs/exactly-once.md): a newer owner wrote to the sink."""


async def test_a_zombies_refused_write_is_logged_as_stale_not_as_a_failure(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = client(MemoryServer())
    raised = trio.Event()

    async def handle(split: spate.SplitHandle) -> None:
        # Another worker takes the split over behind this one's back (this worker hears
        # nothing of it: nobody watches progress records), and writes to the sink first.
        entry = await store.get(Keyspace.DURABLE, KEYS.split(split.id))
        assert entry is not None
        record = decode(ProgressRecord, entry.key, entry.value)
        taken = attrs.evolve(record, epoch=record.epoch + 1, owner="b", owner_nonce="other")
        result = await store.update(Keyspace.DURABLE, entry.key, encode(taken), entry.revision)
        assert isinstance(result, Won)
        raised.set()
        raise StaleFence(split.id, f"the sink refused rows of fence {split.fence}")

    caplog.set_level(logging.INFO, logger="spate")
    async with trio.open_nursery() as nursery:

        async def work() -> None:
            await spate.run_worker(
                store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
            )

        nursery.start_soon(work)
        await raised.wait()
        with trio.fail_after(30):
            while not any("stale tenancy" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    said = [r for r in caplog.records if "stale tenancy" in r.getMessage()]
    # (The worker may gain the split again and meet the same takeover before it is stopped.)
    assert said
    assert {r.levelno for r in said} == {logging.INFO}
    assert "no attempt was consumed and there is nothing to do" in said[0].getMessage()
    assert said[0].exc_info is None
    assert not [
        r for r in caplog.records if r.name == "spate.worker" and r.levelno >= logging.ERROR
    ]
    assert not [r for r in caplog.records if "attempt 1 of" in r.getMessage()]
    record = await progress_of(store, "s00")
    # No failure was written (a fail records its reason); the attempts a later takeover from
    # the fake owner "b" may charge are the expiry rule's, not this failure's.
    assert record.reason == ""
