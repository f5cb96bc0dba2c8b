"""Paged listings: the store's ``list_pages`` blocks, held open between a flow's page requests.

A flow lists page by page (``Op("list-page")``, resumed with a :class:`~spate._core.flows.Page`
each time), so it folds each page and lets it go before asking for the next. The store's
listing is an async context manager that must stay open across those requests; each runs in a
task of its own here, which enters it, serves one page per request, and leaves it at the last
page, on an error, or when no request has come for ``idle`` seconds (its flow gave up: it
stopped leading, or its request timed out). Holding the block in one task keeps it
entered and exited in that task, whatever the adapter's context manager holds (a nursery, a
cancel scope).
"""

from __future__ import annotations

import itertools
from typing import TypeAlias

import outcome
import trio

from spate._core.flows import Op, Page
from spate._errors import StoreError, StoreUnavailable
from spate._store import Entry, Store

__all__ = ["Listings"]

_Reply: TypeAlias = "trio.MemorySendChannel[outcome.Outcome[list[Entry] | None]]"


class Listings:
    """The paged listings in flight, each held open by a task of its own."""

    def __init__(self, store: Store, nursery: trio.Nursery, *, idle: float) -> None:
        self._store = store
        self._nursery = nursery
        self._idle = idle
        self._open: dict[int, trio.MemorySendChannel[_Reply]] = {}
        self._tokens = itertools.count(1)

    @property
    def open(self) -> int:
        """How many listings are held open now (for tests)."""
        return len(self._open)

    async def page(self, op: Op) -> Page:
        """The next page of the listing ``op`` names (a new listing when its cursor is None)."""
        if op.cursor is None:
            token = next(self._tokens)
            asks_send, asks_receive = trio.open_memory_channel[_Reply](1)
            self._open[token] = asks_send
            self._nursery.start_soon(self._serve, token, op, asks_receive, name="spate listing")
        else:
            assert isinstance(op.cursor, int)
            token = op.cursor
            found = self._open.get(token)
            if found is None:
                raise StoreUnavailable(
                    f"the listing of {op.key!r} was closed before its next page was asked for "
                    "(no page was asked for in time, or the store broke it); list again"
                )
            asks_send = found
        reply_send, reply_receive = trio.open_memory_channel[outcome.Outcome[list[Entry] | None]](1)
        try:
            asks_send.send_nowait(reply_send)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            # A previous request is still being served (it timed out here), or the task ended.
            raise StoreUnavailable(
                f"the listing of {op.key!r} is busy or closed; list again"
            ) from None
        entries = (await reply_receive.receive()).unwrap()
        if entries is None:
            return Page([], None)
        # A short page is the last (the store contract): its listing has ended.
        return Page(entries, token if len(entries) >= op.page_size else None)

    async def _serve(self, token: int, op: Op, asks: trio.MemoryReceiveChannel[_Reply]) -> None:
        try:
            reply = await asks.receive()  # the first request is already queued
            try:
                async with self._store.list_pages(
                    op.keyspace, op.key, page_size=op.page_size
                ) as pages:
                    async for page in pages:
                        _answer(reply, outcome.Value(page))
                        if len(page) < op.page_size:
                            return
                        with trio.move_on_after(self._idle):
                            reply = await asks.receive()
                            continue
                        return  # abandoned: nobody asked for the next page
                    _answer(reply, outcome.Value(None))
            except (StoreUnavailable, StoreError) as exc:
                _answer(reply, outcome.Error(exc))
        finally:
            self._open.pop(token, None)
            asks.close()


def _answer(reply: _Reply, result: outcome.Outcome[list[Entry] | None]) -> None:
    # Each request is answered once; an error leaving the block after its last page was
    # answered has nobody left to tell (the page it came with was already taken).
    try:
        reply.send_nowait(result)
    except (trio.WouldBlock, trio.BrokenResourceError):
        pass
