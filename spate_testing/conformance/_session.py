"""Conformance: ephemeral entries die with their session, not with the store client.

An application commonly keeps one store client for its whole life and starts, stops and
restarts workers inside it. If a stopped worker's leader key and leases lived on with the
client, its splits would be stranded until the process exited. So the session rules hold on
every store, whatever its expiry semantics: an ended session's entries are gone within TTL plus
slack while the client stays open, a second session on the same client is unaffected, writes
naming an ended session are refused, and a session cut off for longer than the TTL has lost
its entries (and, on a session store, is reported lost).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import pytest
import trio

from spate import StoreError, StoreUnavailable
from spate.store import Entry, EphemeralSemantics, Keyspace, SessionLost, Store
from spate_testing.conformance._support import (
    NAMESPACE,
    StoreFactory,
    Timing,
    expect_won,
    require_semantics,
    unique_prefix,
)

__all__ = ["Link", "PartitionedStoreFactory", "SessionConformance"]

EPHEMERAL = Keyspace.EPHEMERAL
RECONNECT_TIMEOUT = 20.0
"""Seconds a client gets to reconnect after a healed partition before the test fails."""


class Link(Protocol):
    """The network between one client and its server, which a test can cut and heal."""

    def cut(self) -> None:
        """Stop every byte both ways (nothing is reset)."""

    def heal(self) -> None:
        """Let bytes flow again."""


PartitionedStoreFactory = Callable[[str], AbstractAsyncContextManager[tuple[Store, Link]]]
"""``namespace -> async context manager of (a new client, the link it talks over)``."""


class SessionConformance:
    """Sessions end their entries; the store client's life does not matter."""

    @pytest.fixture
    def partitioned_store_factory(self) -> PartitionedStoreFactory | None:
        """Clients whose link to the server a test can cut; None skips the partition test.

        :mod:`spate_testing.blackhole` puts a real server behind a cuttable link.
        """
        return None

    async def test_ended_session_entries_vanish_while_the_client_stays_open(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Leaving a session's block ends its entries within TTL + slack; the client lives."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as store:
            timing = Timing.of(store)
            async with store.session() as session:
                expect_won(await store.create(EPHEMERAL, key, b"v", session=session), "create")
            ended = trio.current_time()
            with pytest.raises(StoreError):
                await store.create(EPHEMERAL, key + "-late", b"late", session=session)
            await trio.sleep_until(timing.gone_by(ended))
            assert await store.get(EPHEMERAL, key) is None, (
                "an entry outlived its ended session by more than TTL + slack while the store "
                "client stayed open"
            )
            assert await store.get(EPHEMERAL, key + "-late") is None, (
                "a write naming an ended session was applied"
            )

    async def test_a_second_session_on_the_same_client_is_unaffected(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Ending one session leaves the entries of another session of the same client alone."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            timing = Timing.of(store)
            per_key = store.capabilities.ephemeral is EphemeralSemantics.PER_KEY
            async with store.session() as keeper:
                kept = expect_won(
                    await store.create(EPHEMERAL, prefix + "kept", b"0", session=keeper), "create"
                )
                async with store.session() as other:
                    expect_won(
                        await store.create(EPHEMERAL, prefix + "gone", b"g", session=other),
                        "create",
                    )
                deadline = timing.gone_by(trio.current_time())
                renewals = 0
                while trio.current_time() < deadline:
                    await trio.sleep(min(timing.ttl / 2, deadline - trio.current_time()))
                    if per_key:
                        # A per-key entry lives by its writes; its session renews it as the
                        # protocol does. A session store keeps it with no write at all.
                        renewals += 1
                        kept = expect_won(
                            await store.update(
                                EPHEMERAL,
                                prefix + "kept",
                                b"%d" % renewals,
                                kept.revision,
                                session=keeper,
                            ),
                            f"renewal {renewals} under the live session",
                        )
                assert await store.get(EPHEMERAL, prefix + "gone") is None, (
                    "an ended session's entry outlived it by more than TTL + slack"
                )
                assert await store.get(EPHEMERAL, prefix + "kept") == Entry(
                    prefix + "kept", b"%d" % renewals, kept.revision
                ), "ending one session disturbed another session's entry on the same client"

    async def test_session_entries_live_past_ttl_while_the_session_lives(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """On a session store, a live session keeps its entries with no write at all."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.SESSION)
            timing = Timing.of(observer)
            async with store_factory(NAMESPACE) as store, store.session() as session:
                won = expect_won(
                    await store.create(EPHEMERAL, key, b"v", session=session), "create"
                )
                await trio.sleep(2 * timing.ttl + timing.slack)
                assert not session.lost, "a session kept alive was reported lost"
                assert await observer.get(EPHEMERAL, key) == Entry(key, b"v", won.revision), (
                    "a session entry expired while its session was alive"
                )
                last = session.last_confirmed
                assert last is not None, "a session store session reports no confirmed keepalive"
                assert trio.current_time() - last < timing.ttl, (
                    "a live session store session reports no recent confirmed keepalive"
                )

    async def test_a_session_cut_off_longer_than_the_ttl_has_lost_its_entries(
        self,
        store_factory: StoreFactory,
        partitioned_store_factory: PartitionedStoreFactory | None,
        spate_clock: trio.abc.Clock | None,
    ) -> None:
        """A partition longer than the TTL ends the session's entries.

        A session store also reports the session lost (writes naming it raise SessionLost).
        A new session on the same client works after the heal.
        """
        if partitioned_store_factory is None:
            pytest.skip("no partitioned_store_factory fixture: this test needs a cuttable link")
        key = unique_prefix() + "lease"
        async with (
            store_factory(NAMESPACE) as observer,
            partitioned_store_factory(NAMESPACE) as (store, link),
        ):
            timing = Timing.of(store)
            session_store = store.capabilities.ephemeral is EphemeralSemantics.SESSION
            async with store.session() as session:
                expect_won(await store.create(EPHEMERAL, key, b"v", session=session), "create")
                written = trio.current_time()
                link.cut()
                await trio.sleep_until(timing.gone_by(written) + timing.margin)
                assert await observer.get(EPHEMERAL, key) is None, (
                    "an entry outlived a partition of its writer longer than TTL + slack"
                )
                if session_store:
                    assert session.lost, "a session cut off for longer than the TTL is not lost"
                link.heal()
                if session_store:
                    with pytest.raises(SessionLost):
                        await store.create(EPHEMERAL, key, b"late", session=session)
                    assert await observer.get(EPHEMERAL, key) is None
            await _write_when_reconnected(store, observer, key)


async def _write_when_reconnected(store: Store, observer: Store, key: str) -> None:
    """Open a new session and create ``key`` under it, waiting out the client's reconnect."""
    with trio.move_on_after(RECONNECT_TIMEOUT):
        while True:
            try:
                async with store.session() as fresh:
                    won = expect_won(
                        await store.create(EPHEMERAL, key, b"again", session=fresh),
                        "create under a new session after the heal",
                    )
                    assert await observer.get(EPHEMERAL, key) == Entry(key, b"again", won.revision)
                    return
            except StoreUnavailable:
                await trio.sleep(0.2)
    raise AssertionError(f"the client did not recover within {RECONNECT_TIMEOUT} s of the heal")
