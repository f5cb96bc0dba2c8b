"""Conformance: the ephemeral keyspace keeps exactly the lifetime promise the store declares.

Leases are ephemeral keys. Expiring one early lets two workers own a split; never expiring
one leaves a dead worker's split stranded. Per-key stores are held to "not before TTL after the
last write, gone within the declared slack after that"; session stores to "alive while the
writer's session lives, gone within TTL plus slack after it stops".
"""

from __future__ import annotations

import trio

from spate.store import Entry, EphemeralSemantics, Keyspace
from spate_testing.conformance._support import (
    NAMESPACE,
    StoreFactory,
    Timing,
    expect_lost,
    expect_won,
    require_semantics,
    unique_prefix,
)

__all__ = ["ExpiryConformance"]

EPHEMERAL = Keyspace.EPHEMERAL


class ExpiryConformance:
    """Ephemeral entries live exactly as long as the store's declared semantics say."""

    async def test_ephemeral_entry_lives_at_least_ttl_after_create(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Shortly before its TTL runs out, an entry its live writer created still exists."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as store:
            timing = Timing.of(store)
            started = trio.current_time()
            won = expect_won(await store.create(EPHEMERAL, key, b"v"), "create")
            await trio.sleep_until(timing.alive_check_at(started))
            assert await store.get(EPHEMERAL, key) == Entry(key, b"v", won.revision), (
                f"an ephemeral entry vanished before its TTL of {timing.ttl} s"
            )
            assert [e.key for e in await store.list(EPHEMERAL, key)] == [key]

    async def test_durable_entries_never_expire(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """A durable entry outlives the ephemeral TTL and its writer's client."""
        key = unique_prefix() + "record"
        async with store_factory(NAMESPACE) as observer:
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as writer:
                won = expect_won(await writer.create(Keyspace.DURABLE, key, b"v"), "create")
            await trio.sleep(timing.ttl + timing.slack + timing.margin)
            assert await observer.get(Keyspace.DURABLE, key) == Entry(key, b"v", won.revision)

    async def test_per_key_entry_is_gone_within_slack_after_ttl(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """An entry nobody rewrites is gone by TTL + slack; then the key is free again."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as store:
            require_semantics(store.capabilities, EphemeralSemantics.PER_KEY)
            timing = Timing.of(store)
            won = expect_won(await store.create(EPHEMERAL, key, b"v"), "create")
            written = trio.current_time()
            await trio.sleep_until(timing.gone_by(written))
            assert await store.get(EPHEMERAL, key) is None, (
                f"an ephemeral entry outlived its TTL of {timing.ttl} s plus the declared "
                f"slack of {timing.slack} s"
            )
            assert await store.list(EPHEMERAL, key) == []
            expect_lost(
                await store.update(EPHEMERAL, key, b"late", won.revision), "update after expiry"
            )
            again = expect_won(await store.create(EPHEMERAL, key, b"again"), "create after expiry")
            assert again.revision > won.revision, "a re-created key reused an old revision"

    async def test_per_key_update_refreshes_ttl(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Updates every half TTL keep an entry alive well past its first TTL; then it expires."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as store:
            require_semantics(store.capabilities, EphemeralSemantics.PER_KEY)
            timing = Timing.of(store)
            won = expect_won(await store.create(EPHEMERAL, key, b"0"), "create")
            unrefreshed_gone_by = timing.gone_by(trio.current_time())
            renewals = 0
            while trio.current_time() <= unrefreshed_gone_by:
                await trio.sleep(timing.ttl / 2)
                renewals += 1
                won = expect_won(
                    await store.update(EPHEMERAL, key, b"%d" % renewals, won.revision),
                    f"renewal {renewals} at half the TTL",
                )
            assert await store.get(EPHEMERAL, key) == Entry(key, b"%d" % renewals, won.revision)
            renewed = trio.current_time()
            await trio.sleep_until(timing.gone_by(renewed))
            assert await store.get(EPHEMERAL, key) is None, (
                "an entry outlived TTL + slack after its last renewal"
            )

    async def test_per_key_entry_outlives_its_writer_until_ttl(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Per-key expiry ignores the writer's client: closing it neither kills nor keeps keys."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.PER_KEY)
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as writer:
                started = trio.current_time()
                won = expect_won(await writer.create(EPHEMERAL, key, b"v"), "create")
                written = trio.current_time()
            await trio.sleep_until(timing.alive_check_at(started))
            assert await observer.get(EPHEMERAL, key) == Entry(key, b"v", won.revision), (
                "a per-key entry died with its writer's client"
            )
            await trio.sleep_until(timing.gone_by(written))
            assert await observer.get(EPHEMERAL, key) is None

    async def test_session_entry_lives_past_ttl_while_its_writer_lives(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """While the writer's session is alive, its entry survives long past the TTL."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.SESSION)
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as writer:
                won = expect_won(await writer.create(EPHEMERAL, key, b"v"), "create")
                await trio.sleep(2 * timing.ttl + timing.slack)
                assert await observer.get(EPHEMERAL, key) == Entry(key, b"v", won.revision), (
                    "a session entry expired while its writer's session was alive"
                )

    async def test_session_entry_is_gone_within_ttl_after_its_writer_closes(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """When the writer's client closes, its entries are gone within TTL + slack."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.SESSION)
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as writer:
                won = expect_won(await writer.create(EPHEMERAL, key, b"v"), "create")
            await trio.sleep_until(timing.gone_by(trio.current_time()))
            assert await observer.get(EPHEMERAL, key) is None, (
                "a session entry outlived its writer's session by more than TTL + slack"
            )
            expect_lost(
                await observer.update(EPHEMERAL, key, b"late", won.revision),
                "update after the session ended",
            )

    async def test_session_entry_follows_its_last_writer(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """An update moves the entry onto the updating client's session.

        A lease taken over by another worker must not die with its previous holder.
        """
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.SESSION)
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as second:
                async with store_factory(NAMESPACE) as first:
                    won = expect_won(await first.create(EPHEMERAL, key, b"1"), "create")
                    won = expect_won(
                        await second.update(EPHEMERAL, key, b"2", won.revision), "takeover"
                    )
                await trio.sleep(timing.ttl + timing.slack + timing.margin)
                assert await observer.get(EPHEMERAL, key) == Entry(key, b"2", won.revision), (
                    "an entry died with the session of a client that no longer wrote it"
                )
            await trio.sleep_until(timing.gone_by(trio.current_time()))
            assert await observer.get(EPHEMERAL, key) is None, (
                "an entry outlived its last writer's session by more than TTL + slack"
            )
