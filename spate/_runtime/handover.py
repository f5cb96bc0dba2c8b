"""Waiting for a graceful hand-over to finish: the splits a worker released are held elsewhere.

A rolling deploy should not lose time to lease expiry: a leaving worker hands its splits back
and then waits, bounded by its caller's deadline, until another worker owns each of them (or
it is finished). Only then does the process exit, so the fleet never has a window in which
released work sits unowned because the process that could explain it is gone. When no other
worker is alive there is nobody to wait for, and the wait ends at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import trio

from spate._core.backoff import Backoff
from spate.errors import StoreUnavailable
from spate.records import KeyKind, Keys, ProgressRecord, Status, UnreadableRecord, decode
from spate.store import Delete, Keyspace, Put, SnapshotDone, Store, WatchEvent

__all__ = ["wait_until_held_elsewhere"]


def _settled(record: ProgressRecord, instance: str) -> bool:
    if record.status is not Status.RUNNABLE or record.completed:
        return True
    return record.owner is not None and record.owner != instance


REWATCH_BACKOFF = (0.05, 1.0)
"""First and largest delay before watching again after the store broke the watch."""


async def _watching(
    store: Store,
    keyspace: Keyspace,
    prefix: str,
    on_event: Callable[[WatchEvent], bool],
    on_start: Callable[[], None] = lambda: None,
) -> None:
    """Feed watch events to ``on_event`` until it returns True, re-watching on breaks.

    ``on_start`` runs before each (re-)watch: every watch begins with a fresh snapshot.
    """
    backoff = Backoff.of(REWATCH_BACKOFF)
    while True:
        on_start()
        try:
            async with store.watch(keyspace, prefix) as events:
                async for event in events:
                    if on_event(event):
                        return
        except StoreUnavailable:
            await trio.sleep(backoff.delay())


async def wait_until_held_elsewhere(
    store: Store, job: str, instance: str, splits: Iterable[str]
) -> None:
    """Return once every split in ``splits`` is owned by another worker or finished.

    Also returns as soon as no other worker of the job is alive (nobody could take them).
    It never gives up on its own: callers bound it with a cancel scope.
    """
    keys = Keys(job)
    pending = set(splits)
    if not pending:
        return

    def on_progress(event: WatchEvent) -> bool:
        if isinstance(event, Put):
            kind = keys.classify(event.entry.key)
            if kind is not None and kind[0] is KeyKind.SPLIT and kind[1] in pending:
                try:
                    record = decode(
                        ProgressRecord, event.entry.key, event.entry.value, split=kind[1]
                    )
                except UnreadableRecord:
                    return False
                if _settled(record, instance):
                    pending.discard(kind[1])
        return not pending

    others: set[str] = set()
    snapshot_seen = False

    def restart_presence() -> None:
        nonlocal snapshot_seen
        others.clear()
        snapshot_seen = False

    def on_presence(event: WatchEvent) -> bool:
        nonlocal snapshot_seen
        if isinstance(event, Put | Delete):
            key = event.entry.key if isinstance(event, Put) else event.key
            kind = keys.classify(key)
            if kind is not None and kind[0] is KeyKind.WORKER and kind[1] != instance:
                if isinstance(event, Put):
                    others.add(kind[1])
                else:
                    others.discard(kind[1])
        elif isinstance(event, SnapshotDone):
            snapshot_seen = True
        return snapshot_seen and not others

    async with trio.open_nursery() as nursery:

        async def first_of(watch: Callable[[], Awaitable[None]]) -> None:
            await watch()
            nursery.cancel_scope.cancel()

        nursery.start_soon(
            first_of, lambda: _watching(store, Keyspace.DURABLE, keys.split_prefix, on_progress)
        )
        nursery.start_soon(
            first_of,
            lambda: _watching(
                store, Keyspace.EPHEMERAL, f"{keys.prefix}worker.", on_presence, restart_presence
            ),
        )
