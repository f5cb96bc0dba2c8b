"""Conformance: writes sent together (:class:`spate.store.BatchedWrites`, optional).

A store that offers ``write_many`` promises that each write of a group lands or loses exactly
as its own ``create``, ``update`` or ``delete`` would, whatever the others do; the runtime's
group commit relies on it for every write it sends in a group. Stores without it skip these
tests, naming why.
"""

from __future__ import annotations

import pytest
import trio

from spate import StoreError, ValueTooLarge
from spate.store import (
    BatchedWrites,
    Conflict,
    Create,
    Delete,
    Entry,
    Keyspace,
    Put,
    Remove,
    Store,
    Swap,
    Won,
)
from spate_testing.conformance._support import (
    NAMESPACE,
    StoreFactory,
    Timing,
    expect_won,
    next_event,
    unique_prefix,
)

__all__ = ["BatchedConformance"]

DURABLE = Keyspace.DURABLE
EPHEMERAL = Keyspace.EPHEMERAL


def _batched(store: Store) -> BatchedWrites:
    if not isinstance(store, BatchedWrites):
        pytest.skip(
            f"{store.capabilities.system} does not offer write_many (BatchedWrites): its "
            "writes are sent one by one"
        )
    assert store.max_batch >= 1, f"max_batch is {store.max_batch}; it must be at least 1"
    return store


class BatchedConformance:
    """Writes sent together are independent conditional writes, each as if sent alone."""

    async def test_each_swap_of_a_group_lands_or_loses_on_its_own(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Current revisions win, stale and missing ones lose, in one call, result for result."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            first = expect_won(await store.create(DURABLE, prefix + "a", b"a1"), "create a")
            other = expect_won(await store.create(DURABLE, prefix + "b", b"b1"), "create b")
            moved = expect_won(
                await store.update(DURABLE, prefix + "b", b"b2", other.revision), "b"
            )
            results = await batched.write_many(
                [
                    Swap(prefix + "a", b"a2", first.revision),  # current: wins
                    Swap(prefix + "b", b"stale", other.revision),  # moved on: loses
                    Swap(prefix + "missing", b"m", first.revision),  # absent: loses, not created
                ]
            )
            assert len(results) == 3, f"three swaps gave {len(results)} results"
            won = results[0]
            assert isinstance(won, Won), f"the swap at the current revision got {won!r}"
            assert won.revision > first.revision, "a won swap did not increase the revision"
            assert isinstance(results[1], Conflict), f"a stale swap got {results[1]!r}"
            assert isinstance(results[2], Conflict), f"a swap of a missing key got {results[2]!r}"
            assert await store.get(DURABLE, prefix + "a") == Entry(
                prefix + "a", b"a2", won.revision
            )
            assert await store.get(DURABLE, prefix + "b") == Entry(
                prefix + "b", b"b2", moved.revision
            )
            assert await store.get(DURABLE, prefix + "missing") is None, "a swap created a key"

    async def test_a_full_group_lands_and_reaches_watchers(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """``max_batch`` swaps in one call all land, and a watcher hears each as a Put."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            count = min(batched.max_batch, 64)
            keys = [f"{prefix}k{n:03d}" for n in range(count)]
            revisions = {}
            for key in keys:
                revisions[key] = expect_won(
                    await store.create(DURABLE, key, b"v1"), "create"
                ).revision
            async with store.watch(DURABLE, prefix) as events:
                for _ in keys:
                    await next_event(events, "the snapshot")
                await next_event(events, "SnapshotDone")
                results = await batched.write_many(
                    [Swap(key, key.encode(), revisions[key]) for key in keys]
                )
                for key, result in zip(keys, results, strict=True):
                    assert isinstance(result, Won), f"swap of {key} got {result!r}"
                    assert result.revision > revisions[key]
                    assert await store.get(DURABLE, key) == Entry(
                        key, key.encode(), result.revision
                    )
                heard = {}
                for _ in keys:
                    event = await next_event(events, "a Put for each swap")
                    assert isinstance(event, Put | Delete)
                    assert isinstance(event, Put), f"a swap was heard as {event!r}"
                    heard[event.entry.key] = event.entry
                won = {k: r for k, r in zip(keys, results, strict=True) if isinstance(r, Won)}
                assert heard == {k: Entry(k, k.encode(), won[k].revision) for k in keys}

    async def test_a_refused_swap_leaves_the_others_alone(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """An oversize value or a bad key is refused (its result is the error); others land."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            first = expect_won(await store.create(DURABLE, prefix + "a", b"a1"), "create a")
            big = expect_won(await store.create(DURABLE, prefix + "big", b"small"), "create big")
            too_big = b"x" * (store.capabilities.max_value_size + 1)
            results = await batched.write_many(
                [
                    Swap(prefix + "big", too_big, big.revision),
                    Swap(prefix + "a", b"a2", first.revision),
                    Swap("not a key!", b"v", first.revision),
                ]
            )
            assert isinstance(results[0], ValueTooLarge), f"an oversize value got {results[0]!r}"
            assert isinstance(results[1], Won), f"the valid swap got {results[1]!r}"
            assert isinstance(results[2], StoreError), f"an invalid key got {results[2]!r}"
            assert await store.get(DURABLE, prefix + "big") == Entry(
                prefix + "big", b"small", big.revision
            )
            assert await store.get(DURABLE, prefix + "a") == Entry(
                prefix + "a", b"a2", results[1].revision
            )

    async def test_a_call_naming_a_key_twice_is_refused_whole(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Two swaps of one key in one call: StoreError, and neither is written."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            first = expect_won(await store.create(DURABLE, prefix + "a", b"a1"), "create a")
            other = expect_won(await store.create(DURABLE, prefix + "b", b"b1"), "create b")
            with pytest.raises(StoreError):
                await batched.write_many(
                    [
                        Swap(prefix + "a", b"x", first.revision),
                        Swap(prefix + "b", b"y", other.revision),
                        Swap(prefix + "a", b"z", first.revision),
                    ]
                )
            assert await store.get(DURABLE, prefix + "a") == Entry(
                prefix + "a", b"a1", first.revision
            )
            assert await store.get(DURABLE, prefix + "b") == Entry(
                prefix + "b", b"b1", other.revision
            )

    async def test_a_call_holding_something_not_a_write_is_refused_whole(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """A call with an element that is not a Create, Swap or Remove: StoreError, nothing."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            with pytest.raises(StoreError, match="Create, Swap or Remove"):
                await batched.write_many(
                    [Create(prefix + "a", b"v"), (prefix + "b", b"v")]  # type: ignore[list-item]
                )
            assert await store.get(DURABLE, prefix + "a") is None, "a refused call wrote a member"

    async def test_an_empty_group_writes_nothing(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """No writes, no results (and no error)."""
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            assert list(await batched.write_many([])) == []

    async def test_creates_and_deletes_of_a_group_land_or_lose_on_their_own(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Creates win once, deletes as guarded; result for result, in one call."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            held = expect_won(await store.create(DURABLE, prefix + "held", b"h"), "create held")
            stale = expect_won(await store.create(DURABLE, prefix + "stale", b"s1"), "create stale")
            moved = expect_won(
                await store.update(DURABLE, prefix + "stale", b"s2", stale.revision), ""
            )
            gone = expect_won(await store.create(DURABLE, prefix + "gone", b"g"), "create gone")
            taken = expect_won(await store.create(DURABLE, prefix + "taken", b"t"), "create taken")
            results = await batched.write_many(
                [
                    Create(prefix + "new", b"n"),  # absent: wins
                    Create(prefix + "taken", b"again"),  # exists: loses, unchanged
                    Remove(prefix + "held", held.revision),  # at its revision: wins
                    Remove(prefix + "stale", stale.revision),  # moved on: loses, kept
                    Remove(prefix + "gone"),  # unguarded, exists: wins
                    Remove(prefix + "never"),  # unguarded, absent: loses
                ]
            )
            assert len(results) == 6, f"six writes gave {len(results)} results"
            created = results[0]
            assert isinstance(created, Won), f"a create of a new key got {created!r}"
            assert isinstance(results[1], Conflict), (
                f"a create of an existing key got {results[1]!r}"
            )
            assert isinstance(results[2], Won), f"a delete at the revision got {results[2]!r}"
            assert isinstance(results[3], Conflict), f"a stale guarded delete got {results[3]!r}"
            assert isinstance(results[4], Won), f"an unguarded delete of a key got {results[4]!r}"
            assert isinstance(results[5], Conflict), f"a delete of a missing key got {results[5]!r}"
            assert created.revision > gone.revision, "a create's revision did not move on"
            assert await store.get(DURABLE, prefix + "new") == Entry(
                prefix + "new", b"n", created.revision
            )
            assert await store.get(DURABLE, prefix + "taken") == Entry(
                prefix + "taken", b"t", taken.revision
            )
            assert await store.get(DURABLE, prefix + "held") is None, "a won delete left its key"
            assert await store.get(DURABLE, prefix + "stale") == Entry(
                prefix + "stale", b"s2", moved.revision
            )
            assert await store.get(DURABLE, prefix + "gone") is None, "a won delete left its key"

    async def test_ephemeral_writes_of_a_group_belong_to_its_session(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """A group's ephemeral writes name its session: they live and end with it."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            batched = _batched(store)
            timing = Timing.of(store)
            async with store.session() as session:
                lease = expect_won(
                    await store.create(EPHEMERAL, prefix + "old", b"o", session=session), ""
                )
                results = await batched.write_many(
                    [
                        Create(prefix + "lease", b"l", EPHEMERAL),
                        Create(prefix + "record", b"r"),  # durable: outlives the session
                        Remove(prefix + "old", lease.revision, EPHEMERAL),
                    ],
                    session=session,
                )
                created = results[0]
                assert isinstance(created, Won), f"an ephemeral create got {created!r}"
                assert isinstance(results[1], Won), f"a durable create got {results[1]!r}"
                assert isinstance(results[2], Won), f"an ephemeral delete got {results[2]!r}"
                assert await store.get(EPHEMERAL, prefix + "lease") == Entry(
                    prefix + "lease", b"l", created.revision
                )
                assert await store.get(EPHEMERAL, prefix + "old") is None, (
                    "a won delete left its key"
                )
            ended = trio.current_time()
            with pytest.raises(StoreError):
                # A group naming an ended session is refused whole: nothing of it is written.
                await batched.write_many(
                    [
                        Create(prefix + "late", b"x", EPHEMERAL),
                        Create(prefix + "late-record", b"x"),
                    ],
                    session=session,
                )
            assert await store.get(DURABLE, prefix + "late-record") is None, (
                "a group naming an ended session wrote its durable member"
            )
            await trio.sleep_until(timing.gone_by(ended))
            assert await store.get(EPHEMERAL, prefix + "lease") is None, (
                "an ephemeral entry written in a group outlived its ended session by more "
                "than TTL + slack"
            )
            assert await store.get(EPHEMERAL, prefix + "late") is None, (
                "a refused group was applied"
            )
            assert await store.get(DURABLE, prefix + "record") is not None, (
                "a durable entry expired"
            )
