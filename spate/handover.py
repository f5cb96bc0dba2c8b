"""Waiting for a graceful hand-over to finish: the splits a worker released are held elsewhere.

A rolling deploy should not lose time to lease expiry: a leaving worker hands its splits back
and then waits, bounded by its caller's deadline, until another worker owns each of them (or
it is finished). Only then does the process exit, so the fleet never has a window in which
released work sits unowned because the process that could explain it is gone.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from spate.errors import StoreUnavailable
from spate.records import KeyKind, Keys, ProgressRecord, Status, UnreadableRecord, decode
from spate.store import Keyspace, Put, Store

__all__ = ["wait_until_held_elsewhere"]


def _settled(record: ProgressRecord, instance: str) -> bool:
    if record.status is not Status.RUNNABLE or record.completed:
        return True
    return record.owner is not None and record.owner != instance


async def wait_until_held_elsewhere(
    store: Store, job: str, instance: str, splits: Iterable[str]
) -> None:
    """Return once every split in ``splits`` is owned by another worker, or finished.

    Watches the job's progress records (re-watching if the watch breaks). It never returns
    early on its own: callers bound it with a cancel scope (``trio.move_on_after``).
    """
    keys = Keys(job)
    pending = set(splits)
    backoff = 0.05
    while pending:
        try:
            async with store.watch(Keyspace.DURABLE, keys.split_prefix) as events:
                async for event in events:
                    if isinstance(event, Put):
                        kind = keys.classify(event.entry.key)
                        if kind is None or kind[0] is not KeyKind.SPLIT or kind[1] not in pending:
                            continue
                        try:
                            record = decode(
                                ProgressRecord, event.entry.key, event.entry.value, split=kind[1]
                            )
                        except UnreadableRecord:
                            continue
                        if _settled(record, instance):
                            pending.discard(kind[1])
                    if not pending:
                        return
        except StoreUnavailable:
            await trio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
