"""Conformance: reads, listings, values, keys, and isolation between keyspaces and namespaces."""

from __future__ import annotations

import pytest
import trio

from spate import StoreError, ValueTooLarge
from spate.store import Entry, Keyspace
from spate_testing.conformance._support import (
    INVALID_KEYS,
    KEYSPACES,
    NAMESPACE,
    OTHER_NAMESPACE,
    StoreFactory,
    expect_lost,
    expect_won,
    unique_prefix,
)

__all__ = ["DataConformance"]


class DataConformance:
    """What is read back is exactly what was written, and only where it was written."""

    @KEYSPACES
    async def test_get_and_list_agree(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Every listed entry is what get returns for its key, with the last won revision."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            expected = {}
            for name in ("a", "b", "c"):
                won = expect_won(await store.create(keyspace, prefix + name, name.encode()), name)
                expected[prefix + name] = Entry(prefix + name, name.encode(), won.revision)
            won = expect_won(
                await store.update(keyspace, prefix + "b", b"B", expected[prefix + "b"].revision),
                "update b",
            )
            expected[prefix + "b"] = Entry(prefix + "b", b"B", won.revision)
            expect_won(await store.delete(keyspace, prefix + "c"), "delete c")
            del expected[prefix + "c"]
            listed = await store.list(keyspace, prefix)
            assert listed == [expected[k] for k in sorted(expected)]
            for entry in listed:
                assert await store.get(keyspace, entry.key) == entry
            assert await store.get(keyspace, prefix + "c") is None

    @KEYSPACES
    async def test_list_filters_by_prefix_and_sorts_by_key(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A listing holds exactly the keys starting with the prefix, in key order."""
        base = unique_prefix()
        inside = [base + "p", base + "p.2", base + "p-1", base + "p.10", base + "pZ", base + "p_"]
        outside = [base + "o", base + "q", base + "P.1", base + "a.p"]
        async with store_factory(NAMESPACE) as store:
            # Written out of order, so a store that returns insertion order fails.
            for key in [*reversed(inside), *outside]:
                expect_won(await store.create(keyspace, key, key.encode()), f"create {key}")
            listed = await store.list(keyspace, base + "p")
            assert [e.key for e in listed] == sorted(inside)
            assert all(e.value == e.key.encode() for e in listed)
            assert [e.key for e in await store.list(keyspace, base + "p.")] == sorted(
                [base + "p.2", base + "p.10"]
            )
            assert await store.list(keyspace, base + "zzz") == []

    async def test_keyspaces_are_isolated(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """One key name in both keyspaces is two unrelated entries."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as store:
            durable = expect_won(await store.create(Keyspace.DURABLE, key, b"d"), "durable create")
            expect_won(await store.create(Keyspace.EPHEMERAL, key, b"e"), "ephemeral create")
            assert await store.get(Keyspace.DURABLE, key) == Entry(key, b"d", durable.revision)
            expect_won(await store.delete(Keyspace.EPHEMERAL, key), "ephemeral delete")
            assert await store.get(Keyspace.EPHEMERAL, key) is None
            assert await store.get(Keyspace.DURABLE, key) == Entry(key, b"d", durable.revision)
            assert [e.key for e in await store.list(Keyspace.EPHEMERAL, key)] == []
            assert [e.key for e in await store.list(Keyspace.DURABLE, key)] == [key]

    async def test_namespaces_are_isolated(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Clients of different namespaces never see or fence each other's keys."""
        prefix = unique_prefix()
        key = prefix + "k"
        async with store_factory(NAMESPACE) as one, store_factory(OTHER_NAMESPACE) as other:
            for keyspace in Keyspace:
                won = expect_won(await one.create(keyspace, key, b"one"), "create in namespace 1")
                assert await other.get(keyspace, key) is None, "a key leaked across namespaces"
                assert await other.list(keyspace, prefix) == []
                expect_lost(
                    await other.update(keyspace, key, b"x", won.revision),
                    "update of a key that exists only in another namespace",
                )
                expect_lost(
                    await other.delete(keyspace, key), "delete of a key in another namespace"
                )
                theirs = expect_won(
                    await other.create(keyspace, key, b"other"), "create in namespace 2"
                )
                assert await one.get(keyspace, key) == Entry(key, b"one", won.revision)
                assert await other.get(keyspace, key) == Entry(key, b"other", theirs.revision)

    async def test_clients_of_one_namespace_share_data(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Two clients of one namespace see and fence each other's writes (two processes)."""
        key = unique_prefix() + "k"
        async with store_factory(NAMESPACE) as one, store_factory(NAMESPACE) as two:
            for keyspace in Keyspace:
                won = expect_won(await one.create(keyspace, key, b"1"), "create by client 1")
                assert await two.get(keyspace, key) == Entry(key, b"1", won.revision)
                expect_lost(await two.create(keyspace, key, b"2"), "create by client 2")
                moved = expect_won(
                    await two.update(keyspace, key, b"2", won.revision), "update by client 2"
                )
                expect_lost(
                    await one.update(keyspace, key, b"3", won.revision), "stale update by client 1"
                )
                assert await one.get(keyspace, key) == Entry(key, b"2", moved.revision)

    @KEYSPACES
    async def test_values_round_trip_byte_exact(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Empty, binary and non-UTF-8 values come back byte for byte, through every read."""
        prefix = unique_prefix()
        values = {
            "empty": b"",
            "all-bytes": bytes(range(256)),
            "not-utf8": b"\xff\xfe\xc3\x28\x00\x80",
            "nul": b"\x00",
            "whitespace": b" \r\n\t ",
            "text": "žluťoučký kůň".encode(),
        }
        async with store_factory(NAMESPACE) as store:
            for name, value in values.items():
                won = expect_won(await store.create(keyspace, prefix + name, value), name)
                assert await store.get(keyspace, prefix + name) == Entry(
                    prefix + name, value, won.revision
                ), f"{name} value did not round-trip through get"
            listed = {e.key[len(prefix) :]: e.value for e in await store.list(keyspace, prefix)}
            assert listed == values, "values did not round-trip through list"
            entry = await store.get(keyspace, prefix + "text")
            assert entry is not None
            won = expect_won(
                await store.update(keyspace, prefix + "text", b"", entry.revision), "update to b''"
            )
            assert await store.get(keyspace, prefix + "text") == Entry(
                prefix + "text", b"", won.revision
            )

    @KEYSPACES
    async def test_value_of_exactly_max_size_round_trips(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A value of exactly ``capabilities.max_value_size`` bytes is accepted and kept exact."""
        key = unique_prefix() + "big"
        async with store_factory(NAMESPACE) as store:
            size = store.capabilities.max_value_size
            value = bytes(i % 251 for i in range(size))
            won = expect_won(await store.create(keyspace, key, value), f"create of {size} bytes")
            assert await store.get(keyspace, key) == Entry(key, value, won.revision)
            flipped = value[::-1]
            moved = expect_won(
                await store.update(keyspace, key, flipped, won.revision), f"update of {size} bytes"
            )
            assert await store.get(keyspace, key) == Entry(key, flipped, moved.revision)

    @KEYSPACES
    async def test_value_over_max_size_raises_and_writes_nothing(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """One byte over the limit raises ValueTooLarge; neither create nor update lands."""
        key = unique_prefix() + "big"
        async with store_factory(NAMESPACE) as store:
            too_big = b"x" * (store.capabilities.max_value_size + 1)
            with pytest.raises(ValueTooLarge):
                await store.create(keyspace, key, too_big)
            assert await store.get(keyspace, key) is None, "an oversize create landed"
            won = expect_won(await store.create(keyspace, key, b"small"), "create")
            with pytest.raises(ValueTooLarge):
                await store.update(keyspace, key, too_big, won.revision)
            assert await store.get(keyspace, key) == Entry(key, b"small", won.revision), (
                "an oversize update landed"
            )

    async def test_invalid_keys_raise_store_error(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Keys outside ``[A-Za-z0-9._-]`` are refused with StoreError by every operation."""
        async with store_factory(NAMESPACE) as store:
            for keyspace in Keyspace:
                for key in INVALID_KEYS:
                    with pytest.raises(StoreError):
                        await store.get(keyspace, key)
                    with pytest.raises(StoreError):
                        await store.create(keyspace, key, b"v")
                    with pytest.raises(StoreError):
                        await store.update(keyspace, key, b"v", 1)
                    with pytest.raises(StoreError):
                        await store.delete(keyspace, key)
                    if key:
                        with pytest.raises(StoreError):
                            await store.list(keyspace, key)
                        with pytest.raises(StoreError):
                            async with store.watch(keyspace, key):
                                pass
