"""Group commit: writes queued behind one in flight go out together (renewals never wait)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
import trio.testing

from spate import StoreError, StoreUnavailable, ValueTooLarge
from spate._runtime.group_commit import GroupCommit, grouping
from spate.store import (
    Conflict,
    Create,
    Keyspace,
    Remove,
    Session,
    SessionLost,
    Swap,
    Won,
    Write,
    WriteResult,
)
from spate_stores.memory import MemoryStore

DURABLE = Keyspace.DURABLE
EPHEMERAL = Keyspace.EPHEMERAL
RTT = 0.01


class Slow:
    """A memory store whose writes take a round trip, and which counts its calls."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.updates: list[str] = []
        self.alone: list[str] = []
        """Creates and deletes sent on their own ("create k", "delete k")."""
        self.groups: list[list[str]] = []
        self.sessions: list[Session | None] = []
        self.fail_groups: BaseException | None = None
        self.hang = False

    @property
    def capabilities(self):  # type: ignore[no-untyped-def]
        return self.inner.capabilities

    @property
    def max_batch(self) -> int:
        return 8

    async def create(self, keyspace, key, value, *, session=None):  # type: ignore[no-untyped-def]
        self.alone.append(f"create {key}")
        await trio.sleep(RTT)
        return await self.inner.create(keyspace, key, value, session=session)

    async def delete(self, keyspace, key, expected=None):  # type: ignore[no-untyped-def]
        self.alone.append(f"delete {key}")
        await trio.sleep(RTT)
        return await self.inner.delete(keyspace, key, expected)

    async def update(self, keyspace, key, value, expected, *, session=None):  # type: ignore[no-untyped-def]
        self.updates.append(key)
        await trio.sleep(RTT)
        return await self.inner.update(keyspace, key, value, expected, session=session)

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        self.groups.append([w.key for w in writes])
        self.sessions.append(session)
        await trio.sleep(RTT)
        if self.hang:
            await trio.sleep_forever()
        if self.fail_groups is not None:
            raise self.fail_groups
        return await self.inner.write_many(writes, session=session)


async def _keys(store: MemoryStore, count: int) -> dict[str, int]:
    revisions = {}
    for n in range(count):
        won = await store.create(DURABLE, f"k{n}", b"v0")
        assert isinstance(won, Won)
        revisions[f"k{n}"] = won.revision
    return revisions


async def _group(
    count: int, *, op_timeout: float = 5.0
) -> tuple[MemoryStore, Slow, GroupCommit, dict[str, int]]:
    inner = MemoryStore(namespace="gc")
    await inner.__aenter__()
    slow = Slow(inner)
    return inner, slow, GroupCommit(slow, slow, timeout=op_timeout), await _keys(inner, count)  # type: ignore[arg-type]


async def test_a_lone_write_goes_at_once_on_its_own(autojump_clock: trio.testing.MockClock) -> None:
    _inner, slow, group, revs = await _group(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        began = trio.current_time()
        result = await group.update(DURABLE, "k0", b"v1", revs["k0"])
        assert isinstance(result, Won)
        assert trio.current_time() - began == pytest.approx(RTT)  # no waiting for company
        assert slow.updates == ["k0"]
        assert slow.groups == []
        nursery.cancel_scope.cancel()


async def test_writes_queued_behind_one_in_flight_go_out_as_one_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner, slow, group, revs = await _group(6)
    results: dict[str, WriteResult] = {}

    async def write(key: str) -> None:
        results[key] = await group.update(DURABLE, key, b"v1", revs[key])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        async with trio.open_nursery() as writers:
            for key in revs:
                writers.start_soon(write, key)
        # The first went alone, the other five together, at the same time: one round trip.
        assert trio.current_time() - began == pytest.approx(RTT)
        assert len(slow.updates) == 1
        assert [sorted(g) for g in slow.groups] == [sorted(set(revs) - set(slow.updates))]
        assert group.groups == 1
        assert group.grouped == 5
        for key, result in results.items():
            assert isinstance(result, Won), key
            entry = await inner.get(DURABLE, key)
            assert entry is not None
            assert entry.revision == result.revision
        nursery.cancel_scope.cancel()


async def test_each_member_keeps_its_own_outcome(autojump_clock: trio.testing.MockClock) -> None:
    inner, slow, group, revs = await _group(4)
    outcomes: dict[str, object] = {}
    too_big = b"x" * (inner.capabilities.max_value_size + 1)
    swaps = {
        "k0": (b"first", revs["k0"]),  # goes alone
        "k1": (b"v1", revs["k1"]),
        "k2": (b"stale", revs["k2"] - 1),
        "k3": (too_big, revs["k3"]),
    }

    async def write(key: str) -> None:
        value, expected = swaps[key]
        try:
            outcomes[key] = await group.update(DURABLE, key, value, expected)
        except StoreError as exc:
            outcomes[key] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            for key in swaps:
                writers.start_soon(write, key)
        assert len(slow.groups) == 1
        assert len(slow.groups[0]) == 3
        assert isinstance(outcomes["k0"], Won)
        assert isinstance(outcomes["k1"], Won)
        assert isinstance(outcomes["k2"], Conflict)
        assert isinstance(outcomes["k3"], ValueTooLarge)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("how", ["unavailable", "session lost", "timeout"])
async def test_a_group_of_unknown_outcome_tells_every_member(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    _inner, slow, group, revs = await _group(4, op_timeout=1.0)
    if how == "unavailable":
        slow.fail_groups = StoreUnavailable("the store went away")
    elif how == "session lost":
        slow.fail_groups = SessionLost("the store gave the session up")
    else:
        slow.hang = True
    raised: dict[str, BaseException] = {}

    async def write(key: str) -> None:
        try:
            await group.update(DURABLE, key, b"v1", revs[key])
        except StoreUnavailable as exc:
            raised[key] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            for key in revs:
                writers.start_soon(write, key)
        grouped = set(slow.groups[0])
        assert set(raised) == grouped
        assert len(grouped) == 3
        if how == "timeout":
            assert all("may have landed" in str(exc) for exc in raised.values())
        # Each member raises what its own write would have: a lost session stays one.
        expected = SessionLost if how == "session lost" else StoreUnavailable
        assert all(type(exc) is expected for exc in raised.values())
        # One exception object each: raised in several tasks, one would pile up tracebacks.
        assert len({id(exc) for exc in raised.values()}) == 3
        nursery.cancel_scope.cancel()


async def test_a_member_cancelled_while_queued_is_never_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner, slow, group, revs = await _group(3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            writers.start_soon(group.update, DURABLE, "k0", b"v1", revs["k0"])  # in flight alone
            await trio.testing.wait_all_tasks_blocked()
            with trio.CancelScope() as scope:
                scope.cancel()  # cancelled before it could be sent: it leaves the queue
                writers.start_soon(group.update, DURABLE, "k2", b"v1", revs["k2"])
                await group.update(DURABLE, "k1", b"v1", revs["k1"])
        assert all("k1" not in g for g in slow.groups)
        assert "k1" not in slow.updates
        entry = await inner.get(DURABLE, "k1")
        assert entry is not None
        assert entry.revision == revs["k1"]
        nursery.cancel_scope.cancel()


async def test_once_its_sender_stops_queued_writes_still_land_and_later_ones_go_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _inner, slow, group, revs = await _group(5)
    results: dict[str, WriteResult] = {}

    async def write(key: str) -> None:
        results[key] = await group.update(DURABLE, key, b"v1", revs[key])

    with trio.fail_after(1):  # a write left in the queue would wait for ever
        async with trio.open_nursery() as writers:
            for key in ("k0", "k1", "k2"):  # one goes alone, two queue
                writers.start_soon(write, key)
            await trio.testing.wait_all_tasks_blocked()
            async with trio.open_nursery() as sender:
                sender.start_soon(group.run)
                sender.cancel_scope.cancel()  # the coordinator stops before the sender ran
        assert len(slow.updates) == 1  # one went alone (tasks start in any order)
        assert len(slow.groups) == 1  # the two queued were sent on the way out
        assert sorted(slow.updates + slow.groups[0]) == ["k0", "k1", "k2"]
        async with trio.open_nursery() as writers:
            for key in ("k3", "k4"):  # with one in flight, the other goes alone too: no sender
                writers.start_soon(write, key)
    assert all(isinstance(results[k], Won) for k in revs)
    assert sorted(slow.updates[1:]) == ["k3", "k4"]


async def test_ephemeral_updates_are_never_grouped(autojump_clock: trio.testing.MockClock) -> None:
    inner, slow, group, revs = await _group(1)
    async with inner.session() as session:
        lease = await inner.create(EPHEMERAL, "lease", b"x", session=session)
        assert isinstance(lease, Won)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(group.run)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(
                group.update, DURABLE, "k0", b"v1", revs["k0"]
            )  # keeps one in flight
            await trio.testing.wait_all_tasks_blocked()
            renewed = await group.update(EPHEMERAL, "lease", b"y", lease.revision, session=session)
            assert isinstance(renewed, Won)
            assert slow.groups == []
            assert slow.updates == ["k0", "lease"]
            nursery.cancel_scope.cancel()


async def test_two_writes_of_one_key_never_share_a_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _inner, slow, group, revs = await _group(3)
    outcomes: list[object] = []

    async def write(key: str, value: bytes) -> None:
        outcomes.append(await group.update(DURABLE, key, value, revs[key]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(write, "k0", b"alone")
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            for key, value in (("k1", b"a"), ("k1", b"b"), ("k2", b"c")):
                writers.start_soon(write, key, value)
        assert all(len(set(g)) == len(g) for g in slow.groups)
        sent = slow.updates[1:] + [k for g in slow.groups for k in g]  # (a group of one
        assert sorted(sent) == ["k1", "k1", "k2"]  # goes by plain update)
        assert sorted(type(o).__name__ for o in outcomes) == ["Conflict", "Won", "Won", "Won"]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("broken", ["refused", "miscounted"])
async def test_a_store_whose_groups_fail_as_a_whole_gets_each_write_alone(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    _inner, slow, group, revs = await _group(6)
    real = slow.write_many

    async def write_many(
        writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        if broken == "refused":  # refused whole, nothing written (a txn limit, say)
            slow.groups.append([w.key for w in writes])
            raise StoreError("too many operations in txn request")
        return list(await real(writes, session=session))[:-1]  # one short: what landed?

    slow.write_many = write_many  # type: ignore[method-assign]
    outcomes: dict[str, object] = {}

    async def write(key: str) -> None:
        try:
            outcomes[key] = await group.update(DURABLE, key, b"v1", revs[key])
        except StoreUnavailable as exc:
            outcomes[key] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            for key in ("k0", "k1", "k2"):
                writers.start_soon(write, key)
        if broken == "refused":
            # Sent again one by one: every write landed, none was lost to the refusal.
            assert all(isinstance(o, Won) for o in outcomes.values())
            assert "sending each on its own" in caplog.text
        else:
            assert sum(isinstance(o, StoreUnavailable) for o in outcomes.values()) == 2
        groups_before = len(slow.groups)
        async with trio.open_nursery() as writers:
            for key in ("k3", "k4", "k5"):
                writers.start_soon(write, key)
        assert len(slow.groups) == groups_before  # never grouped again
        assert all(isinstance(outcomes[k], Won) for k in ("k3", "k4", "k5"))
        nursery.cancel_scope.cancel()


async def test_a_refused_group_is_not_sent_again_for_a_member_that_gave_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _inner, slow, group, revs = await _group(3)

    async def refuse(
        writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        slow.groups.append([w.key for w in writes])
        await trio.sleep(RTT)
        raise StoreError("too many operations in txn request")

    slow.write_many = refuse  # type: ignore[method-assign]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(group.update, DURABLE, "k0", b"v1", revs["k0"])  # goes alone
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            writers.start_soon(group.update, DURABLE, "k1", b"v1", revs["k1"])

            async def impatient() -> None:
                with trio.move_on_after(RTT / 2):  # gives up while its group is in flight
                    await group.update(DURABLE, "k2", b"v1", revs["k2"])

            writers.start_soon(impatient)
        assert [sorted(g) for g in slow.groups] == [["k1", "k2"]]
        assert sorted(slow.updates) == ["k0", "k1"]  # k2's write is not sent again
        nursery.cancel_scope.cancel()


async def test_creates_and_deletes_queued_behind_a_write_go_out_in_one_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A hand-over's lease deletes and a claim's lease creates are grouped like commits."""
    inner, slow, group, revs = await _group(2)
    async with inner.session() as session:
        old = await inner.create(EPHEMERAL, "old-lease", b"o", session=session)
        assert isinstance(old, Won)
        outcomes: dict[str, object] = {}

        async def create(key: str) -> None:
            outcomes[key] = await group.create(EPHEMERAL, key, b"mine", session=session)

        async def delete(key: str, expected: int | None) -> None:
            outcomes[key] = await group.delete(EPHEMERAL, key, expected)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(group.run)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(group.update, DURABLE, "k0", b"v1", revs["k0"])  # goes alone
            await trio.testing.wait_all_tasks_blocked()
            began = trio.current_time()
            async with trio.open_nursery() as writers:
                writers.start_soon(create, "lease-a")
                writers.start_soon(create, "lease-b")
                writers.start_soon(delete, "old-lease", old.revision)
                writers.start_soon(delete, "never", None)
            # Queued behind the commit in flight, and sent together: one round trip.
            assert trio.current_time() - began == pytest.approx(RTT)
            assert slow.alone == []
            assert [sorted(g) for g in slow.groups] == [
                ["lease-a", "lease-b", "never", "old-lease"]
            ]
            assert slow.sessions == [session]  # the group's ephemeral writes name it
            assert isinstance(outcomes["lease-a"], Won)
            assert isinstance(outcomes["lease-b"], Won)
            assert isinstance(outcomes["old-lease"], Won)
            assert isinstance(outcomes["never"], Conflict)
            assert await inner.get(EPHEMERAL, "old-lease") is None
            entry = await inner.get(EPHEMERAL, "lease-a")
            assert entry is not None
            assert entry.value == b"mine"
            nursery.cancel_scope.cancel()


async def test_a_lone_create_or_delete_goes_at_once(autojump_clock: trio.testing.MockClock) -> None:
    _inner, slow, group, _revs = await _group(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        created = await group.create(DURABLE, "fresh", b"v")
        assert isinstance(created, Won)
        assert isinstance(await group.delete(DURABLE, "fresh", created.revision), Won)
        assert slow.alone == ["create fresh", "delete fresh"]
        assert slow.groups == []
        nursery.cancel_scope.cancel()


async def test_a_group_names_one_session(autojump_clock: trio.testing.MockClock) -> None:
    """Ephemeral writes of two sessions (one replaced the other) go in separate groups."""
    inner, slow, group, revs = await _group(1)
    async with (
        inner.session() as first,
        inner.session() as second,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(group.update, DURABLE, "k0", b"v1", revs["k0"])  # goes alone
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as writers:
            writers.start_soon(partial_create(group, "a1", first))
            writers.start_soon(partial_create(group, "b1", second))
            writers.start_soon(partial_create(group, "a2", first))
            writers.start_soon(partial_create(group, "b2", second))
            writers.start_soon(group.create, DURABLE, "durable", b"v")
        # The durable write may join either group (tasks start in any order).
        by_session = {
            id(session): sorted(k for k in keys if k != "durable")
            for keys, session in zip(slow.groups, slow.sessions, strict=True)
        }
        assert by_session == {id(first): ["a1", "a2"], id(second): ["b1", "b2"]}
        assert sum(keys.count("durable") for keys in slow.groups) == 1
        nursery.cancel_scope.cancel()


def partial_create(group: GroupCommit, key: str, session: Session) -> Callable[[], Awaitable[None]]:
    async def create() -> None:
        assert isinstance(await group.create(EPHEMERAL, key, b"v", session=session), Won)

    return create


def test_grouped_writes_stand_for_their_single_calls() -> None:
    """The three kinds of grouped write default to the durable keyspace, as the store's calls."""
    assert Create("k", b"v").keyspace is DURABLE
    assert Swap("k", b"v", 3).keyspace is DURABLE
    assert Remove("k").keyspace is DURABLE
    assert Remove("k").expected is None


def test_only_stores_that_send_writes_together_are_grouped() -> None:
    memory = MemoryStore(namespace="gc")
    assert grouping(memory)
    assert not grouping(object())  # type: ignore[arg-type]
