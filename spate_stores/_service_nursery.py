"""A nursery for a store's own tasks that only the store's closing can cancel.

A store's background tasks (a NATS connection's reader, pinger and writer, an etcd lease
keepalive, a watch's pump) serve every caller of the store. Opened in a plain nursery, they
sit inside whatever cancel scope surrounds ``async with store:``, so cancelling that scope
kills them at once, while the code inside the block is still cleaning up: a worker cancelled
around its own store then cannot send its hand-backs (they time out, and its splits wait a
whole lease). A graceful leave is exactly the clean-up such a cancel starts, so the store's
connection must stay usable until the store itself is closed.

:func:`open_service_nursery` gives such a nursery: its tasks run under a shielded scope the
nursery owns, cancelled when the block exits (that is, when the store closes). The body of the
block is not shielded, and a task that raises still ends the block with its error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["open_service_nursery"]


@asynccontextmanager
async def open_service_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery whose tasks the caller's cancel scopes do not reach; closed with the block.

    Cancelling a scope around the block cancels the block's own code only; the nursery's
    tasks keep running until the block exits, then they are cancelled and awaited.
    """
    shield = trio.CancelScope(shield=True)

    async def host(task_status: trio.TaskStatus[trio.Nursery]) -> None:
        with shield:
            async with trio.open_nursery() as tasks:
                task_status.started(tasks)
                await trio.sleep_forever()

    async with trio.open_nursery() as outer:
        tasks: trio.Nursery = await outer.start(host)
        try:
            yield tasks
        finally:
            shield.cancel()
