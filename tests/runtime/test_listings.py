"""The runtime's paged listings: a store's ``list_pages`` block held open between page requests."""

from __future__ import annotations

import pytest
import trio

from spate import StoreUnavailable
from spate._core.flows import Op, Page
from spate._runtime.listings import Listings
from spate.store import Keyspace
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultyStore

from .harness import client

DURABLE = Keyspace.DURABLE
IDLE = 5.0


async def _seeded(store: object, count: int) -> None:
    for n in range(count):
        await store.create(DURABLE, f"job.k{n:02d}", b"%d" % n)  # type: ignore[attr-defined]
    await store.create(DURABLE, "other.k", b"not listed")  # type: ignore[attr-defined]


def _op(cursor: object = None, size: int = 3) -> Op:
    return Op("list-page", DURABLE, "job.", cursor=cursor, page_size=size)


async def _all_pages(listings: Listings, size: int) -> list[Page]:
    pages = [await listings.page(_op(size=size))]
    while pages[-1].cursor is not None:
        pages.append(await listings.page(_op(pages[-1].cursor, size)))
    return pages


@pytest.mark.parametrize(("count", "sizes"), [(7, [3, 3, 1]), (6, [3, 3, 0]), (0, [0])])
async def test_pages_follow_their_cursor_to_a_short_last_page(
    autojump_clock: trio.abc.Clock, count: int, sizes: list[int]
) -> None:
    store = client(MemoryServer())
    await _seeded(store, count)
    async with trio.open_nursery() as nursery:
        listings = Listings(store, nursery, idle=IDLE)
        pages = await _all_pages(listings, 3)
        assert [len(page.entries) for page in pages] == sizes
        assert [e.key for page in pages for e in page.entries] == [
            f"job.k{n:02d}" for n in range(count)
        ]
        await trio.testing.wait_all_tasks_blocked()
        assert listings.open == 0  # the last page closed the store's listing


async def test_an_abandoned_listing_is_closed_after_idle_and_its_cursor_then_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())
    await _seeded(store, 7)
    async with trio.open_nursery() as nursery:
        listings = Listings(store, nursery, idle=IDLE)
        first = await listings.page(_op())
        assert first.cursor is not None
        assert listings.open == 1
        await trio.sleep(IDLE + 1.0)
        assert listings.open == 0
        with pytest.raises(StoreUnavailable, match="list again"):
            await listings.page(_op(first.cursor))


async def test_a_listing_broken_between_pages_raises_store_unavailable(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = FaultyStore(client(MemoryServer()))
    await _seeded(store, 7)
    async with trio.open_nursery() as nursery:
        listings = Listings(store, nursery, idle=IDLE)
        first = await listings.page(_op())
        store.partition()
        with pytest.raises(StoreUnavailable):
            await listings.page(_op(first.cursor))
        await trio.testing.wait_all_tasks_blocked()
        assert listings.open == 0
        store.heal()
        # A new listing starts afresh.
        pages = await _all_pages(listings, 3)
        assert sum(len(page.entries) for page in pages) == 7
