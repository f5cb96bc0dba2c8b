"""Conformance: an exact watch follows one key, and nothing that merely starts with it.

A follower watches only its own records (the job's plan, its ``assign.<instance>``, the
leader key) so that its cost does not grow with the fleet. A prefix cannot isolate one key:
``assign.w1`` is a prefix of ``assign.w10``, and ``plan`` of ``plan2`` and ``plan.y``. If
an exact watch leaked such keys, worker ``w1`` would fold ``w10``'s assignment into its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from spate import StoreError
from spate.store import (
    Delete,
    Entry,
    EphemeralSemantics,
    Keyspace,
    Put,
    SnapshotDone,
    Store,
    WatchEvent,
)
from spate_testing.conformance._support import (
    INVALID_KEYS,
    KEYSPACES,
    NAMESPACE,
    StoreFactory,
    Timing,
    expect_won,
    next_event,
    require_expiry_reaches_watchers,
    unique_prefix,
)
from spate_testing.conformance._watch import check_no_gap

__all__ = ["ExactWatchConformance"]

EPHEMERAL = Keyspace.EPHEMERAL

ASSIGNED = "x.assign.w1"
"""The key of the assignment watch; the keys below start with it but are other keys."""
ASSIGNED_LOOKALIKES = ("x.assign.w10", "x.assign.w1.y", "x.assign.w1-")
PLAN = "x.plan"
"""The key of the plan watch, which does not exist when the watch opens."""
PLAN_LOOKALIKES = ("x.plan2", "x.plan.y", "x.plan.")


class ExactWatchConformance:
    """Exact watches (``exact=True``): one key's snapshot and changes, and no other key's."""

    @KEYSPACES
    async def test_exact_watch_sees_only_its_key(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Snapshot, Puts and Deletes of the one key; keys that start with it never arrive."""
        base = unique_prefix()
        assigned, plan = base + ASSIGNED, base + PLAN
        lookalikes = [base + k for k in (*ASSIGNED_LOOKALIKES, *PLAN_LOOKALIKES)]
        async with store_factory(NAMESPACE) as store:
            for key in lookalikes:
                expect_won(await store.create(keyspace, key, b"other"), f"create {key}")
            first = expect_won(await store.create(keyspace, assigned, b"a1"), "create assign")
            async with (
                store.watch(keyspace, assigned, exact=True) as assignment,
                store.watch(keyspace, plan, exact=True) as plans,
            ):
                event = await next_event(assignment, f"the snapshot Put of {assigned!r}")
                assert event == Put(Entry(assigned, b"a1", first.revision)), (
                    f"an exact watch of {assigned!r} began with {event!r}"
                )
                event = await next_event(assignment, "SnapshotDone after one entry")
                assert event == SnapshotDone(), (
                    f"an exact watch of {assigned!r} went on after its key's entry with {event!r}"
                )
                event = await next_event(plans, "SnapshotDone of an absent key")
                assert event == SnapshotDone(), (
                    f"an exact watch of the absent {plan!r} began with {event!r}"
                )

                # Each watched write comes after writes of every lookalike, so a leak would
                # arrive first.
                await _touch_all(store, keyspace, lookalikes, b"again")
                second = expect_won(
                    await store.update(keyspace, assigned, b"a2", first.revision), "update assign"
                )
                made = expect_won(await store.create(keyspace, plan, b"p1"), "create plan")
                await _expect(assignment, Put(Entry(assigned, b"a2", second.revision)))
                await _expect(plans, Put(Entry(plan, b"p1", made.revision)))

                for key in lookalikes:
                    expect_won(await store.delete(keyspace, key), f"delete {key}")
                expect_won(await store.delete(keyspace, assigned, second.revision), "delete")
                await _expect_delete(assignment, assigned, after=second.revision)

                await _touch_all(store, keyspace, lookalikes, b"back")
                third = expect_won(await store.create(keyspace, assigned, b"a3"), "recreate")
                changed = expect_won(
                    await store.update(keyspace, plan, b"p2", made.revision), "update plan"
                )
                await _expect(assignment, Put(Entry(assigned, b"a3", third.revision)))
                await _expect(plans, Put(Entry(plan, b"p2", changed.revision)))

    @KEYSPACES
    async def test_exact_watch_has_no_gap_between_snapshot_and_live_events(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """An exact watch opened while its key is being rewritten misses none of the writes."""
        await check_no_gap(store_factory, keyspace, exact=True)

    async def test_exact_watch_reports_expiry_as_delete(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """The watched key's expiry arrives as its Delete; a lookalike's expiry does not."""
        key = unique_prefix() + "leader"
        lookalike = key + "2"
        async with store_factory(NAMESPACE) as observer:
            require_expiry_reaches_watchers(observer.capabilities)
            timing = Timing.of(observer)
            per_key = observer.capabilities.ephemeral is EphemeralSemantics.PER_KEY
            async with observer.watch(EPHEMERAL, key, exact=True) as events:
                assert await next_event(events, "SnapshotDone") == SnapshotDone()
                # The lookalike is written first, so it expires first: a leak arrives first.
                async with store_factory(NAMESPACE) as writer:
                    expect_won(await writer.create(EPHEMERAL, lookalike, b"l"), "lookalike")
                    won = expect_won(await writer.create(EPHEMERAL, key, b"v"), "create")
                    await _expect(events, Put(Entry(key, b"v", won.revision)))
                    if per_key:
                        # Per-key entries outlive the writer's session; leave it open anyway.
                        deadline = timing.gone_by(trio.current_time()) + timing.grace
                        await _expect_delete(events, key, after=won.revision, deadline=deadline)
                if not per_key:
                    deadline = timing.gone_by(trio.current_time()) + timing.grace
                    await _expect_delete(events, key, after=won.revision, deadline=deadline)
                # Anything leaked from the lookalike would come before this Put.
                again = expect_won(await observer.create(EPHEMERAL, key, b"w"), "recreate")
                await _expect(events, Put(Entry(key, b"w", again.revision)))

    async def test_exact_watch_refuses_an_invalid_key(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """An exact watch names a whole key: an invalid one (or the empty one) is StoreError."""
        async with store_factory(NAMESPACE) as store:
            for keyspace in Keyspace:
                for key in INVALID_KEYS:
                    with pytest.raises(StoreError):
                        async with store.watch(keyspace, key, exact=True):
                            pass


async def _touch_all(store: Store, keyspace: Keyspace, keys: list[str], value: bytes) -> None:
    """Write every key once, whatever state it is in (create, else update)."""
    for key in keys:
        current = await store.get(keyspace, key)
        if current is None:
            expect_won(await store.create(keyspace, key, value), f"create {key}")
        else:
            won = await store.update(keyspace, key, value, current.revision)
            expect_won(won, f"update {key}")


async def _expect(events: AsyncIterator[WatchEvent], expected: Put) -> None:
    event = await next_event(events, f"the Put of {expected.entry.key!r}")
    assert event == expected, (
        f"an exact watch of {expected.entry.key!r} delivered {event!r}, not {expected!r}"
    )


async def _expect_delete(
    events: AsyncIterator[WatchEvent], key: str, *, after: int, deadline: float | None = None
) -> None:
    event = await next_event(events, f"the Delete of {key!r}", deadline=deadline)
    assert isinstance(event, Delete), f"an exact watch of {key!r} delivered {event!r}, not Delete"
    assert event.key == key, f"an exact watch of {key!r} delivered {event!r}"
    assert event.revision > after, (
        f"Delete of {key!r} at revision {event.revision}, not after its last write at {after}"
    )
