"""Conformance: watches give a snapshot, then SnapshotDone, then every later change in order.

The coordinator folds watch events into its view of the job, so a missing SnapshotDone leaves
it waiting forever, a reordered pair makes it believe a stale entry, and a gap between the
snapshot and the live events hides a write for good.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import trio

from spate.store import Delete, Entry, EphemeralSemantics, Keyspace, Put, SnapshotDone, WatchEvent
from spate_testing.conformance._support import (
    KEYSPACES,
    NAMESPACE,
    OTHER_NAMESPACE,
    StoreFactory,
    Timing,
    expect_won,
    next_event,
    require_expiry_reaches_watchers,
    require_semantics,
    unique_prefix,
)

__all__ = ["WatchConformance", "check_no_gap"]

EPHEMERAL = Keyspace.EPHEMERAL


async def _read_snapshot(events: AsyncIterator[WatchEvent], count: int) -> dict[str, Entry]:
    """Read ``count`` snapshot Puts and the SnapshotDone after them."""
    snapshot: dict[str, Entry] = {}
    for n in range(count):
        event = await next_event(events, f"snapshot Put {n + 1} of {count}")
        assert isinstance(event, Put), f"expected snapshot Put {n + 1} of {count}, got {event!r}"
        assert event.entry.key not in snapshot, f"the snapshot repeated {event.entry.key!r}"
        snapshot[event.entry.key] = event.entry
    event = await next_event(events, f"SnapshotDone after {count} snapshot entries")
    assert event == SnapshotDone(), f"expected SnapshotDone after the snapshot, got {event!r}"
    return snapshot


async def check_no_gap(store_factory: StoreFactory, keyspace: Keyspace, *, exact: bool) -> None:
    """A watch opened while its key is being rewritten misses none of the later writes.

    A writer rewrites one key 40 times (each value one more than the last); a watch of the key
    opens after the first few writes and must deliver the snapshot and then every later write,
    in order. An ``exact`` watch is of that key alone: a lookalike (the key and a suffix) is
    created after each write, and any event of one would show as a jump.
    """
    key = unique_prefix() + "counter"
    total = 40
    async with store_factory(NAMESPACE) as writer, store_factory(NAMESPACE) as watcher:
        created = expect_won(await writer.create(keyspace, key, b"0"), "create")
        writing = trio.Event()

        async def write_all() -> None:
            revision = created.revision
            for n in range(1, total + 1):
                if n == total // 4:
                    writing.set()
                won = await writer.update(keyspace, key, b"%d" % n, revision)
                revision = expect_won(won, f"write {n}").revision
                if exact:
                    other = f"{key}{n}"
                    expect_won(await writer.create(keyspace, other, b"other"), f"create {other}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_all)
            await writing.wait()
            # A prefix watch is opened as callers did before exact= existed: without it.
            watch = (
                watcher.watch(keyspace, key, exact=True) if exact else watcher.watch(keyspace, key)
            )
            async with watch as events:
                snapshot = await _read_snapshot(events, 1)
                assert key in snapshot, f"a watch of {key!r} began with {snapshot!r}"
                last = snapshot[key]
                while int(last.value) < total:
                    event = await next_event(events, f"the write after {last.value!r}")
                    assert isinstance(event, Put), f"unexpected {event!r}"
                    assert event.entry.key == key, f"a watch of {key!r} delivered {event!r}"
                    assert int(event.entry.value) == int(last.value) + 1, (
                        f"after {last.value!r} the watch jumped to {event.entry.value!r}"
                    )
                    assert event.entry.revision > last.revision
                    last = event.entry


def _assert_in_revision_order(events: list[WatchEvent]) -> None:
    revisions = [e.entry.revision if isinstance(e, Put) else e.revision for e in events]  # type: ignore[union-attr]
    assert revisions == sorted(set(revisions)), (
        f"live events are not in strictly increasing revision order: {revisions}"
    )


class WatchConformance:
    """Watches: snapshot, SnapshotDone, then ordered live events, for every watcher."""

    @KEYSPACES
    async def test_watch_starts_with_snapshot_then_snapshot_done(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A watch first yields a Put per existing entry (as get sees it), then SnapshotDone."""
        prefix = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            for name in ("a", "b", "c"):
                expect_won(await store.create(keyspace, prefix + name, name.encode()), name)
            b = await store.get(keyspace, prefix + "b")
            assert b is not None
            expect_won(await store.update(keyspace, prefix + "b", b"B", b.revision), "update b")
            expect_won(await store.delete(keyspace, prefix + "c"), "delete c")
            expected = {e.key: e for e in await store.list(keyspace, prefix)}
            async with store.watch(keyspace, prefix) as events:
                assert await _read_snapshot(events, len(expected)) == expected
                won = expect_won(await store.create(keyspace, prefix + "d", b"d"), "create d")
                event = await next_event(events, "the live Put after the snapshot")
                assert event == Put(Entry(prefix + "d", b"d", won.revision))

    @KEYSPACES
    async def test_watch_delivers_live_puts_and_deletes_in_order(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """Creates, updates and deletes arrive once each, in the order they were made."""
        p = unique_prefix()
        async with store_factory(NAMESPACE) as store, store.watch(keyspace, p) as events:
            first = await next_event(events, "SnapshotDone of an empty range")
            assert first == SnapshotDone(), f"an empty range's watch began with {first!r}"
            a1 = expect_won(await store.create(keyspace, p + "a", b"a1"), "create a")
            b1 = expect_won(await store.create(keyspace, p + "b", b"b1"), "create b")
            a2 = expect_won(await store.update(keyspace, p + "a", b"a2", a1.revision), "update a")
            expect_won(await store.delete(keyspace, p + "b", b1.revision), "delete b")
            c1 = expect_won(await store.create(keyspace, p + "c", b""), "create c")
            expect_won(await store.delete(keyspace, p + "a"), "delete a")
            expected: list[tuple[str, str, bytes | None, int]] = [
                ("put", p + "a", b"a1", a1.revision),
                ("put", p + "b", b"b1", b1.revision),
                ("put", p + "a", b"a2", a2.revision),
                ("delete", p + "b", None, b1.revision),
                ("put", p + "c", b"", c1.revision),
                ("delete", p + "a", None, a2.revision),
            ]
            seen: list[WatchEvent] = []
            for kind, key, value, revision in expected:
                event = await next_event(events, f"{kind} of {key!r}")
                seen.append(event)
                if value is not None:
                    assert event == Put(Entry(key, value, revision)), (
                        f"expected Put of {key!r} at revision {revision}; got {event!r} "
                        f"after {seen[:-1]!r}"
                    )
                else:
                    assert isinstance(event, Delete), (
                        f"expected Delete of {key!r}; got {event!r} after {seen[:-1]!r}"
                    )
                    assert event.key == key, f"expected Delete of {key!r}; got {event!r}"
                    assert event.revision > revision, (
                        f"Delete of {key!r} at revision {event.revision}, not after its last "
                        f"write at {revision}"
                    )
            _assert_in_revision_order(seen)

    async def test_several_watchers_see_the_same_events(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Concurrent watchers, on one client or several, each see every change, in order."""
        p = unique_prefix()
        async with AsyncExitStack() as stack:
            writer = await stack.enter_async_context(store_factory(NAMESPACE))
            other = await stack.enter_async_context(store_factory(NAMESPACE))
            expect_won(await writer.create(EPHEMERAL, p + "old", b"old"), "create old")
            watches = [
                await stack.enter_async_context(client.watch(EPHEMERAL, p))
                for client in (writer, writer, other, other)
            ]
            snapshots = [await _read_snapshot(events, 1) for events in watches]
            assert all(s == snapshots[0] for s in snapshots)
            won = expect_won(await writer.create(EPHEMERAL, p + "new", b"1"), "create new")
            won = expect_won(await other.update(EPHEMERAL, p + "new", b"2", won.revision), "update")
            expect_won(await writer.delete(EPHEMERAL, p + "old"), "delete old")
            streams = [
                [await next_event(events, f"live event {n + 1} of 3") for n in range(3)]
                for events in watches
            ]
            assert streams[0][1] == Put(Entry(p + "new", b"2", won.revision))
            assert [type(e) for e in streams[0]] == [Put, Put, Delete]
            for stream in streams[1:]:
                assert stream == streams[0], "two watchers of one prefix saw different events"

    @KEYSPACES
    async def test_watch_filters_by_prefix(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A watch sees only keys starting with its prefix, in its snapshot and live."""
        base = unique_prefix()
        async with store_factory(NAMESPACE) as store:
            in_snapshot = expect_won(await store.create(keyspace, base + "p0", b"0"), "p0")
            expect_won(await store.create(keyspace, base + "x0", b"0"), "x0")
            async with store.watch(keyspace, base + "p") as events:
                assert await _read_snapshot(events, 1) == {
                    base + "p0": Entry(base + "p0", b"0", in_snapshot.revision)
                }
                for key in (base + "o", base + "q", base + "P1", base + "xp", base + "x0p"):
                    expect_won(await store.create(keyspace, key, b"out"), f"create {key}")
                inside = expect_won(await store.create(keyspace, base + "p.1", b"in"), "p.1")
                event = await next_event(events, f"the Put of {base + 'p.1'!r}")
                assert event == Put(Entry(base + "p.1", b"in", inside.revision)), (
                    f"a watch of prefix {base + 'p'!r} delivered {event!r}"
                )

    async def test_watch_is_confined_to_its_keyspace_and_namespace(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """Writes to the other keyspace, or in another namespace, never reach a watch."""
        p = unique_prefix()
        async with (
            store_factory(NAMESPACE) as store,
            store_factory(OTHER_NAMESPACE) as other,
            store.watch(EPHEMERAL, p) as events,
        ):
            assert await next_event(events, "SnapshotDone") == SnapshotDone()
            expect_won(await store.create(Keyspace.DURABLE, p + "k", b"durable"), "durable")
            for keyspace in Keyspace:
                expect_won(await other.create(keyspace, p + "k", b"foreign"), "other namespace")
            mine = expect_won(await store.create(EPHEMERAL, p + "k", b"mine"), "ephemeral")
            event = await next_event(events, "the Put of this keyspace and namespace")
            assert event == Put(Entry(p + "k", b"mine", mine.revision)), (
                f"a watch received a foreign event {event!r}"
            )

    @KEYSPACES
    async def test_watch_has_no_gap_between_snapshot_and_live_events(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None, keyspace: Keyspace
    ) -> None:
        """A watch opened while a key is being rewritten misses none of the later writes."""
        await check_no_gap(store_factory, keyspace, exact=False)

    async def test_watch_reports_per_key_expiry_as_delete(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """An expiring per-key entry reaches watchers as a Delete, not early and not late."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as store:
            require_semantics(store.capabilities, EphemeralSemantics.PER_KEY)
            require_expiry_reaches_watchers(store.capabilities)
            timing = Timing.of(store)
            started = trio.current_time()
            won = expect_won(await store.create(EPHEMERAL, key, b"v"), "create")
            written = trio.current_time()
            async with store.watch(EPHEMERAL, key) as events:
                await _read_snapshot(events, 1)
                deadline = timing.gone_by(written) + timing.grace
                event = await next_event(events, "the expiry's Delete", deadline=deadline)
                assert isinstance(event, Delete), f"expected the Delete of {key!r}, got {event!r}"
                assert event.key == key, f"expected the Delete of {key!r}, got {event!r}"
                assert event.revision > won.revision
                assert trio.current_time() >= timing.alive_check_at(started), (
                    f"the entry expired before its TTL of {timing.ttl} s"
                )

    async def test_watch_reports_session_expiry_as_delete(
        self, store_factory: StoreFactory, spate_clock: trio.abc.Clock | None
    ) -> None:
        """When its writer's session ends, a session entry's expiry reaches watchers in time."""
        key = unique_prefix() + "lease"
        async with store_factory(NAMESPACE) as observer:
            require_semantics(observer.capabilities, EphemeralSemantics.SESSION)
            require_expiry_reaches_watchers(observer.capabilities)
            timing = Timing.of(observer)
            async with observer.watch(EPHEMERAL, key) as events:
                assert await next_event(events, "SnapshotDone") == SnapshotDone()
                async with store_factory(NAMESPACE) as writer:
                    won = expect_won(await writer.create(EPHEMERAL, key, b"v"), "create")
                    event = await next_event(events, "the Put of the session entry")
                    assert event == Put(Entry(key, b"v", won.revision))
                deadline = timing.gone_by(trio.current_time()) + timing.grace
                event = await next_event(events, "the expiry's Delete", deadline=deadline)
                assert isinstance(event, Delete), f"expected the Delete of {key!r}, got {event!r}"
                assert event.key == key, f"expected the Delete of {key!r}, got {event!r}"
                assert event.revision > won.revision
