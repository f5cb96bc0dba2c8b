"""Conformance: conditional writes stay exact when many clients race for one key.

Sequential tests cannot tell an atomic compare-and-swap from a read-check-write that a
concurrent writer slips through; these can. The racers are spread over several clients, as
the workers of a fleet would be.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import trio

from spate.store import Entry, Keyspace, Store, Won
from spate_testing.conformance._support import (
    KEYSPACES,
    NAMESPACE,
    StoreFactory,
    expect_won,
    unique_prefix,
)

__all__ = ["ConcurrencyConformance"]

CLIENTS = 3
RACERS = 12
INCREMENTERS = 4
INCREMENT_ATTEMPTS = 8


async def _open_clients(stack: AsyncExitStack, factory: StoreFactory) -> list[Store]:
    return [await stack.enter_async_context(factory(NAMESPACE)) for _ in range(CLIENTS)]


class ConcurrencyConformance:
    """Exactly one racer wins every race, and no win is lost."""

    @KEYSPACES
    async def test_concurrent_creates_exactly_one_wins(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Of N concurrent creates of one key, exactly one wins, and its value is stored."""
        key = unique_prefix() + "k"
        results: dict[int, object] = {}
        async with AsyncExitStack() as stack:
            clients = await _open_clients(stack, store_factory)

            async def racer(n: int) -> None:
                results[n] = await clients[n % CLIENTS].create(keyspace, key, b"%d" % n)

            async with trio.open_nursery() as nursery:
                for n in range(RACERS):
                    nursery.start_soon(racer, n)
            winners = {n: r for n, r in results.items() if isinstance(r, Won)}
            assert len(winners) == 1, f"{len(winners)} of {RACERS} concurrent creates won"
            [(n, won)] = winners.items()
            assert await clients[0].get(keyspace, key) == Entry(key, b"%d" % n, won.revision)

    @KEYSPACES
    async def test_concurrent_updates_from_one_revision_exactly_one_wins(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Of N concurrent compare-and-swaps expecting the same revision, exactly one wins."""
        key = unique_prefix() + "k"
        results: dict[int, object] = {}
        async with AsyncExitStack() as stack:
            clients = await _open_clients(stack, store_factory)
            base = expect_won(await clients[0].create(keyspace, key, b"base"), "create")

            async def racer(n: int) -> None:
                client = clients[n % CLIENTS]
                results[n] = await client.update(keyspace, key, b"%d" % n, base.revision)

            async with trio.open_nursery() as nursery:
                for n in range(RACERS):
                    nursery.start_soon(racer, n)
            winners = {n: r for n, r in results.items() if isinstance(r, Won)}
            assert len(winners) == 1, (
                f"{len(winners)} of {RACERS} concurrent updates from one revision won"
            )
            [(n, won)] = winners.items()
            assert await clients[0].get(keyspace, key) == Entry(key, b"%d" % n, won.revision)

    @KEYSPACES
    async def test_concurrent_guarded_deletes_exactly_one_wins(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Of N concurrent deletes guarded by the same revision, exactly one wins."""
        key = unique_prefix() + "k"
        results: list[object] = []
        async with AsyncExitStack() as stack:
            clients = await _open_clients(stack, store_factory)
            base = expect_won(await clients[0].create(keyspace, key, b"base"), "create")

            async def racer(n: int) -> None:
                results.append(await clients[n % CLIENTS].delete(keyspace, key, base.revision))

            async with trio.open_nursery() as nursery:
                for n in range(RACERS):
                    nursery.start_soon(racer, n)
            wins = sum(isinstance(r, Won) for r in results)
            assert wins == 1, f"{wins} of {RACERS} concurrent guarded deletes won"
            assert await clients[0].get(keyspace, key) is None

    @KEYSPACES
    async def test_cas_increment_race_counts_every_win(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Racing read-increment-CAS loops leave the counter equal to the number of wins.

        A lost update (two wins from one read) would make the counter fall short.
        """
        key = unique_prefix() + "counter"
        won_revisions: list[int] = []
        async with AsyncExitStack() as stack:
            clients = await _open_clients(stack, store_factory)
            expect_won(await clients[0].create(keyspace, key, b"0"), "create")

            async def incrementer(client: Store) -> None:
                for _ in range(INCREMENT_ATTEMPTS):
                    entry = await client.get(keyspace, key)
                    assert entry is not None, "the counter vanished"
                    result = await client.update(
                        keyspace, key, b"%d" % (int(entry.value) + 1), entry.revision
                    )
                    if isinstance(result, Won):
                        won_revisions.append(result.revision)

            async with trio.open_nursery() as nursery:
                for n in range(INCREMENTERS):
                    nursery.start_soon(incrementer, clients[n % CLIENTS])
            final = await clients[0].get(keyspace, key)
            assert final is not None
            assert won_revisions, "no increment won at all"
            assert int(final.value) == len(won_revisions), (
                f"{len(won_revisions)} increments won but the counter reads {int(final.value)}"
            )
            assert len(set(won_revisions)) == len(won_revisions), (
                "two won updates reported the same revision"
            )
            assert final.revision == max(won_revisions)
