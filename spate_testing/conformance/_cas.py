"""Conformance: create-if-absent, compare-and-swap, guarded delete, revisions, the probe.

Every guard in the protocol is one of these conditional writes, so each rule gets its own
test, in both keyspaces.
"""

from __future__ import annotations

import trio

from spate._runtime.probe import probe_store
from spate.store import Entry, Keyspace
from spate_testing.conformance._support import (
    KEYSPACES,
    NAMESPACE,
    StoreFactory,
    expect_lost,
    expect_won,
    unique_prefix,
)

__all__ = ["CasConformance"]


class CasConformance:
    """Conditional writes are exact: each wins when its condition holds and only then."""

    @KEYSPACES
    async def test_create_wins_once_then_loses(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A fresh key's create wins; a second create of it loses and changes nothing."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            won = expect_won(await store.create(keyspace, key, b"first"), "create of a fresh key")
            assert await store.get(keyspace, key) == Entry(key, b"first", won.revision)
            expect_lost(await store.create(keyspace, key, b"second"), "create of an existing key")
            assert await store.get(keyspace, key) == Entry(key, b"first", won.revision), (
                "a lost create changed the entry"
            )

    @KEYSPACES
    async def test_update_at_current_revision_wins(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """An update at the key's current revision wins with a strictly larger revision."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            first = expect_won(await store.create(keyspace, key, b"v1"), "create")
            second = expect_won(
                await store.update(keyspace, key, b"v2", first.revision), "update at current"
            )
            assert second.revision > first.revision, "an update did not increase the revision"
            assert await store.get(keyspace, key) == Entry(key, b"v2", second.revision)

    @KEYSPACES
    async def test_update_at_stale_revision_loses(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Once a key has moved on, an update expecting its old revision loses."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            first = expect_won(await store.create(keyspace, key, b"v1"), "create")
            second = expect_won(await store.update(keyspace, key, b"v2", first.revision), "update")
            expect_lost(
                await store.update(keyspace, key, b"stale", first.revision),
                "update at a stale revision",
            )
            assert await store.get(keyspace, key) == Entry(key, b"v2", second.revision), (
                "a lost update changed the entry"
            )

    @KEYSPACES
    async def test_update_of_missing_key_loses(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """An update never creates: a never-written or deleted key stays absent."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            expect_lost(
                await store.update(keyspace, prefix + "never", b"v", 1), "update of a missing key"
            )
            assert await store.get(keyspace, prefix + "never") is None, "an update created a key"
            won = expect_won(await store.create(keyspace, prefix + "gone", b"v1"), "create")
            expect_won(await store.delete(keyspace, prefix + "gone", won.revision), "delete")
            expect_lost(
                await store.update(keyspace, prefix + "gone", b"v2", won.revision),
                "update of a deleted key at its last revision",
            )
            assert await store.get(keyspace, prefix + "gone") is None, "an update recreated a key"

    @KEYSPACES
    async def test_guarded_delete_at_stale_revision_loses(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A delete guarded by an old revision loses and leaves the entry in place."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            first = expect_won(await store.create(keyspace, key, b"v1"), "create")
            second = expect_won(await store.update(keyspace, key, b"v2", first.revision), "update")
            expect_lost(
                await store.delete(keyspace, key, first.revision), "delete at a stale revision"
            )
            assert await store.get(keyspace, key) == Entry(key, b"v2", second.revision), (
                "a lost delete changed the entry"
            )

    @KEYSPACES
    async def test_guarded_delete_at_current_revision_wins(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A delete guarded by the current revision wins and the key is gone."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            first = expect_won(await store.create(keyspace, key, b"v1"), "create")
            deleted = expect_won(
                await store.delete(keyspace, key, first.revision), "delete at current revision"
            )
            assert deleted.revision > first.revision, "a delete did not advance the revision"
            assert await store.get(keyspace, key) is None, "a won delete left the key in place"
            expect_lost(await store.delete(keyspace, key, first.revision), "second guarded delete")

    @KEYSPACES
    async def test_unguarded_delete_wins_on_existing_key_only(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """An unguarded delete wins if the key exists, whatever its revision, and then loses."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            first = expect_won(await store.create(keyspace, key, b"v1"), "create")
            expect_won(await store.update(keyspace, key, b"v2", first.revision), "update")
            expect_won(await store.delete(keyspace, key), "unguarded delete of an existing key")
            assert await store.get(keyspace, key) is None, "a won delete left the key in place"
            expect_lost(await store.delete(keyspace, key), "unguarded delete of a deleted key")

    @KEYSPACES
    async def test_delete_of_missing_key_loses(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Deleting a key that never existed loses, guarded or not."""
        key = unique_prefix() + "never"
        async with store_factory(NAMESPACE) as store:
            expect_lost(await store.delete(keyspace, key), "unguarded delete of a missing key")
            expect_lost(await store.delete(keyspace, key, 1), "guarded delete of a missing key")

    @KEYSPACES
    async def test_revisions_strictly_increase_per_key(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Every write of a key, across deletion and re-creation, gets a larger revision.

        A store that restarts a key's counter on re-creation (etcd's ``version``, say) would
        let a zombie holding the old life's revision write over the new one.
        """
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            revisions = [expect_won(await store.create(keyspace, key, b"0"), "create").revision]
            for n in range(1, 4):
                won = expect_won(
                    await store.update(keyspace, key, b"%d" % n, revisions[-1]), f"update {n}"
                )
                revisions.append(won.revision)
                assert await store.get(keyspace, key) == Entry(key, b"%d" % n, won.revision)
            expect_won(await store.delete(keyspace, key, revisions[-1]), "delete")
            revisions.append(
                expect_won(await store.create(keyspace, key, b"again"), "recreate").revision
            )
            again = expect_won(
                await store.update(keyspace, key, b"again2", revisions[-1]), "update of recreated"
            )
            revisions.append(again.revision)
            assert revisions == sorted(set(revisions)), (
                f"revisions of successive writes of one key do not strictly increase: {revisions}"
            )
            expect_lost(
                await store.update(keyspace, key, b"zombie", revisions[0]),
                "update at the first life's revision after re-creation",
            )

    async def test_startup_probe_passes(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """The coordinator's startup CAS probe accepts the store."""
        async with store_factory(NAMESPACE) as store:
            await probe_store(store, key_prefix=unique_prefix() + "probe")
