"""Conformance: listings in bounded pages (``Store.list_pages``)."""

from __future__ import annotations

import pytest
import trio

from spate import StoreError
from spate.store import Entry, Keyspace, Store
from spate_testing.conformance._support import (
    INVALID_KEYS,
    KEYSPACES,
    NAMESPACE,
    OTHER_NAMESPACE,
    StoreFactory,
    expect_won,
    unique_prefix,
)

__all__ = ["PagesConformance"]

PAGE_SIZES_OF_SEVEN = [1, 2, 3, 7, 8]
"""Page sizes for a listing of seven keys: one a page, sizes that leave a short last page or
divide nothing evenly, exactly the count (one full page, then the iterator stops) and more."""


class _LeftEarly(Exception):
    """Raised inside a listing's block to leave it early."""


async def take_pages(
    store: Store, keyspace: Keyspace, prefix: str, page_size: int
) -> list[list[Entry]]:
    """Every page of one listing, each checked against the shape the contract promises."""
    pages: list[list[Entry]] = []
    async with store.list_pages(keyspace, prefix, page_size=page_size) as iterator:
        async for page in iterator:
            pages.append(list(page))
    check_shape(pages, page_size)
    return pages


def check_shape(pages: list[list[Entry]], page_size: int) -> None:
    """Pages are non-empty, sorted by key, at most ``page_size``, all but the last exactly it."""
    for n, page in enumerate(pages):
        keys = [entry.key for entry in page]
        assert page, f"page {n} of {len(pages)} is empty (an empty listing has no pages)"
        assert len(page) <= page_size, f"page {n} holds {len(page)} entries, page_size={page_size}"
        assert keys == sorted(keys), f"page {n} is not sorted by key: {keys}"
        if n < len(pages) - 1:
            assert len(page) == page_size, (
                f"page {n} holds {len(page)} entries but is not the last of {len(pages)}; "
                f"every page but the last holds exactly page_size={page_size}"
            )


def check_revisions_increase(pages: list[list[Entry]]) -> None:
    """A key that appears in several pages appears each time at a greater revision."""
    seen: dict[str, int] = {}
    for n, page in enumerate(pages):
        for entry in page:
            if entry.key in seen:
                assert entry.revision > seen[entry.key], (
                    f"{entry.key!r} appears again in page {n} at revision {entry.revision}, "
                    f"not greater than the {seen[entry.key]} it appeared at before"
                )
            seen[entry.key] = entry.revision


class PagesConformance:
    """A paged listing hands out every entry, a bounded page at a time, each page sorted."""

    async def test_list_pages_shape(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Each page is non-empty, sorted, at most page_size; all but the last exactly it."""
        prefix = unique_prefix()
        # Keys whose order differs from the order they are written in, and whose sort is not
        # their numeric order, so pages in write order or number order are caught unsorted.
        names = ["p.9", "p.10", "p-1", "p.2", "pZ", "p_", "p.1"]
        async with store_factory(NAMESPACE) as store:
            for name in names:
                expect_won(await store.create(Keyspace.DURABLE, prefix + name, b"v"), name)
            for page_size in PAGE_SIZES_OF_SEVEN:
                pages = await take_pages(store, Keyspace.DURABLE, prefix, page_size)
                assert sum(len(page) for page in pages) == len(names), (
                    f"page_size={page_size}: {len(names)} keys came in pages of "
                    f"{[len(page) for page in pages]}"
                )

    @KEYSPACES
    async def test_list_pages_together_equal_list(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A quiet listing's pages hold exactly what list returns (keys, values, revisions)."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            for n in reversed(range(7)):
                key = f"{prefix}k{n}"
                won = expect_won(await store.create(keyspace, key, f"v{n}".encode()), key)
                if n % 3 == 0:  # some revisions are not their key's first
                    expect_won(await store.update(keyspace, key, b"again", won.revision), key)
            listed = await store.list(keyspace, prefix)
            assert len(listed) == 7
            for page_size in PAGE_SIZES_OF_SEVEN:
                pages = await take_pages(store, keyspace, prefix, page_size)
                together = sorted((e for page in pages for e in page), key=lambda e: e.key)
                assert together == listed, f"page_size={page_size}: pages {pages} != list"
            for page_size in (1, 5):
                assert await take_pages(store, keyspace, prefix + "none.", page_size) == [], (
                    "a listing of a prefix with no keys must yield no pages"
                )

    async def test_list_pages_respect_the_prefix(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Only keys under the prefix, of this keyspace and namespace, appear in pages."""
        base = unique_prefix()
        inside = [base + "p", base + "p.2", base + "p-1", base + "p.10", base + "pZ"]
        outside = [base + "o", base + "q", base + "P.1", base + "a.p"]
        async with store_factory(NAMESPACE) as store, store_factory(OTHER_NAMESPACE) as other:
            for key in [*reversed(inside), *outside]:
                expect_won(await store.create(Keyspace.DURABLE, key, b"d"), key)
            for key in [*inside, base + "p.other"]:
                expect_won(await store.create(Keyspace.EPHEMERAL, key + "e", b"e"), key)
                expect_won(await other.create(Keyspace.DURABLE, key + "x", b"x"), key)
            for page_size in (1, 2, 100):
                pages = await take_pages(store, Keyspace.DURABLE, base + "p", page_size)
                keys = sorted(e.key for page in pages for e in page)
                assert keys == sorted(inside), f"page_size={page_size}"
            pages = await take_pages(store, Keyspace.DURABLE, base + "p.", 1)
            assert sorted(e.key for page in pages for e in page) == [base + "p.10", base + "p.2"]

    async def test_list_pages_see_untouched_keys_while_others_change(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Keys left alone all appear, at their revision, while others change between pages.

        Between taking two pages the test deletes a key, creates one and rewrites one; those
        may or may not appear, and the rewritten key, if it appears twice, appears later at a
        greater revision.
        """
        prefix = unique_prefix()
        durable = Keyspace.DURABLE
        stable: dict[str, int] = {}
        held: dict[str, set[int]] = {}  # every revision each key was written at
        doomed: list[str] = []
        rewritten = prefix + "m.rewritten"
        async with store_factory(NAMESPACE) as store, store_factory(NAMESPACE) as writer:
            # Interleaved and in reverse key order, so stream order differs from key order.
            for n in reversed(range(10)):
                key = f"{prefix}s.{n:02d}"
                stable[key] = expect_won(await store.create(durable, key, b"s"), key).revision
                if n < 6:
                    key = f"{prefix}c.{n:02d}"
                    held[key] = {expect_won(await store.create(durable, key, b"c"), key).revision}
                    doomed.append(key)
            won = expect_won(await store.create(durable, rewritten, b"0"), "create rewritten")
            held[rewritten] = {won.revision}
            last = won.revision
            pages: list[list[Entry]] = []
            async with store.list_pages(durable, prefix, page_size=3) as iterator:
                async for page in iterator:
                    pages.append(list(page))
                    # Another client changes other keys before the next page is taken.
                    if doomed:
                        expect_won(await writer.delete(durable, doomed.pop()), "delete")
                    key = f"{prefix}n.{len(pages):02d}"
                    held[key] = {expect_won(await writer.create(durable, key, b"n"), key).revision}
                    last = expect_won(
                        await writer.update(durable, rewritten, b"%d" % len(pages), last),
                        "rewrite",
                    ).revision
                    held[rewritten].add(last)
        check_shape(pages, 3)
        check_revisions_increase(pages)
        appeared: dict[str, set[int]] = {}
        for page in pages:
            for entry in page:
                appeared.setdefault(entry.key, set()).add(entry.revision)
        for key, revision in stable.items():
            assert appeared.get(key) == {revision}, (
                f"{key!r}, untouched during the listing, should appear at revision {revision}; "
                f"it appeared at {sorted(appeared.get(key, ()))}"
            )
        for key, revisions in appeared.items():
            if key in stable:
                continue
            assert key in held, f"{key!r} appeared in a page but was never written"
            assert revisions <= held[key], (
                f"{key!r} appeared at revisions {sorted(revisions)}; it was written at "
                f"{sorted(held[key])} only"
            )

    async def test_list_pages_refuse_a_page_size_below_one(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """page_size 0, -1, True and 1.5 are refused with StoreError, and so is a bad prefix."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            expect_won(await store.create(Keyspace.DURABLE, prefix + "k", b"v"), "create")

            async def listing(prefix: str, page_size: object) -> None:
                # Refused when called, entered or iterated: each is a refusal.
                async with store.list_pages(
                    Keyspace.DURABLE,
                    prefix,
                    page_size=page_size,  # type: ignore[arg-type]
                ) as pages:
                    async for _ in pages:
                        pass

            for page_size in (0, -1, True, 1.5):
                with pytest.raises(StoreError):
                    await listing(prefix, page_size)
            for key in INVALID_KEYS:
                if key:
                    with pytest.raises(StoreError):
                        await listing(key, 1)
            await listing(prefix, 1)  # the store still works

    async def test_list_pages_left_early_is_clean(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Leaving the block early (not iterated, after a page, raising) frees the listing."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            for n in range(6):
                expect_won(await store.create(Keyspace.DURABLE, f"{prefix}{n}", b"v"), "create")
            async with store.list_pages(Keyspace.DURABLE, prefix, page_size=2):
                pass
            async with store.list_pages(Keyspace.DURABLE, prefix, page_size=2) as pages:
                async for page in pages:
                    assert len(page) == 2
                    break

            async def leave_by_raising() -> None:
                async with store.list_pages(Keyspace.DURABLE, prefix, page_size=2) as pages:
                    async for _ in pages:
                        raise _LeftEarly

            # The caller's exception comes out as it is (not wrapped in a group).
            with pytest.raises(_LeftEarly):
                await leave_by_raising()
            # The store carries on: writes land and a new listing sees all of them.
            expect_won(await store.create(Keyspace.DURABLE, f"{prefix}6", b"v"), "create")
            pages_again = await take_pages(store, Keyspace.DURABLE, prefix, 2)
            assert [len(page) for page in pages_again] == [2, 2, 2, 1]
            together = sorted((e for page in pages_again for e in page), key=lambda e: e.key)
            assert together == await store.list(Keyspace.DURABLE, prefix)

    async def test_list_pages_of_a_few_hundred_entries(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """320 entries in pages of 50: six full pages and a short one, together the listing."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            for n in range(320):
                key = f"{prefix}{n:04d}"
                expect_won(await store.create(Keyspace.DURABLE, key, key.encode()), key)
            pages = await take_pages(store, Keyspace.DURABLE, prefix, 50)
            assert [len(page) for page in pages] == [50] * 6 + [20]
            together = sorted((e for page in pages for e in page), key=lambda e: e.key)
            assert together == await store.list(Keyspace.DURABLE, prefix)
