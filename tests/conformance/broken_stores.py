"""Deliberately broken stores: MemoryStore wrapped so that exactly one rule of the contract fails.

Each wrapper stands for a bug a real adapter could have. ``test_suite_catches_broken_stores``
runs the conformance suite against each and checks that the suite notices.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager
from typing import Any, ClassVar

import attrs
import trio

from spate.store import (
    Capabilities,
    Conflict,
    Delete,
    Entry,
    Keyspace,
    Put,
    Revision,
    SnapshotDone,
    Store,
    WatchEvent,
    Won,
    WriteResult,
    validate_key,
    validate_page_size,
    validate_prefix,
)
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.conformance import StoreFactory

TTL = 15.0
MAX_VALUE_SIZE = 4096


@attrs.define
class Shared:
    """State one test's clients of a broken store share (as they share the server)."""

    deleted: set[tuple[Keyspace, str]] = attrs.field(factory=set)
    versions: dict[tuple[Keyspace, str], dict[Revision, int]] = attrs.field(factory=dict)


class Wrapper:
    """Delegates everything to a MemoryStore; subclasses break one rule."""

    inner_ttl_factor: ClassVar[float] = 1.0
    ignores_namespace: ClassVar[bool] = False

    def __init__(self, inner: MemoryStore, shared: Shared) -> None:
        self.inner = inner
        self.shared = shared

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def ephemeral_ttl(self) -> float:
        return TTL

    async def __aenter__(self) -> Wrapper:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    def session(self) -> Any:
        return self.inner.session()

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return await self.inner.list(keyspace, prefix)

    def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AbstractAsyncContextManager[AsyncIterator[builtins.list[Entry]]]:
        return self._list_pages(keyspace, prefix, page_size)

    @asynccontextmanager
    async def _list_pages(
        self, keyspace: Keyspace, prefix: str, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        async with (
            self.inner.list_pages(keyspace, prefix, page_size=page_size) as pages,
            aclosing(self.pages(pages, page_size)) as transformed,
        ):
            yield transformed

    async def pages(
        self, pages: AsyncIterator[builtins.list[Entry]], page_size: int
    ) -> AsyncGenerator[builtins.list[Entry], None]:
        async for page in pages:
            yield page

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        return await self.inner.create(keyspace, key, value, **named)

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        return await self.inner.update(keyspace, key, value, expected, **named)

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        return await self.inner.delete(keyspace, key, expected)

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        return self._watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool = False
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        async with (
            self.inner.watch(keyspace, prefix, exact=exact) as events,
            aclosing(self.events(keyspace, events)) as transformed,
        ):
            yield transformed

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        async for event in events:
            yield event


class DuplicateCreateWins(Wrapper):
    """Create overwrites an existing key (a plain put instead of create-if-absent)."""

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        result = await self.inner.create(keyspace, key, value, **named)
        current = await self.inner.get(keyspace, key)
        if isinstance(result, Conflict) and current is not None:
            return await self.inner.update(keyspace, key, value, current.revision)
        return result


class StaleUpdateWins(Wrapper):
    """Update ignores the expected revision (no compare in the CAS)."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        current = await self.inner.get(keyspace, key)
        if current is None:
            return Conflict()
        return await self.inner.update(keyspace, key, value, current.revision)


class UpdateOfMissingKeyWins(Wrapper):
    """Update of an absent key creates it (an upsert)."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        if await self.inner.get(keyspace, key) is None:
            return await self.inner.create(keyspace, key, value, **named)
        return await self.inner.update(keyspace, key, value, expected, **named)


class GuardedDeleteIgnoresRevision(Wrapper):
    """Delete drops its guard."""

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        return await self.inner.delete(keyspace, key, None)


class RevisionNeverIncreases(Wrapper):
    """Every entry reports revision 1, and a CAS at 1 always matches."""

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        entry = await self.inner.get(keyspace, key)
        return None if entry is None else attrs.evolve(entry, revision=1)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return [attrs.evolve(e, revision=1) for e in await self.inner.list(keyspace, prefix)]

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        return _flatten(await self.inner.create(keyspace, key, value, **named))

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        current = await self.inner.get(keyspace, key)
        if current is None or expected != 1:
            return Conflict()
        return _flatten(await self.inner.update(keyspace, key, value, current.revision))

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        current = await self.inner.get(keyspace, key)
        if current is None or expected not in (None, 1):
            return Conflict()
        return _flatten(await self.inner.delete(keyspace, key, current.revision))

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        async for event in events:
            if isinstance(event, Put):
                yield Put(attrs.evolve(event.entry, revision=1))
            elif isinstance(event, Delete):
                yield Delete(event.key, 1)
            else:
                yield event


def _flatten(result: WriteResult) -> WriteResult:
    return Won(1) if isinstance(result, Won) else result


class RevisionResetsOnRecreate(Wrapper):
    """Revisions count writes since the key was created (etcd's ``version``, not its revision)."""

    def _version(self, keyspace: Keyspace, entry: Entry) -> Entry:
        versions = self.shared.versions.get((keyspace, entry.key), {})
        return attrs.evolve(entry, revision=versions.get(entry.revision, entry.revision))

    def _real(self, keyspace: Keyspace, key: str, version: int) -> Revision:
        for real, known in self.shared.versions.get((keyspace, key), {}).items():
            if known == version:
                return real
        return -1

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        entry = await self.inner.get(keyspace, key)
        return None if entry is None else self._version(keyspace, entry)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return [self._version(keyspace, e) for e in await self.inner.list(keyspace, prefix)]

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        result = await self.inner.create(keyspace, key, value, **named)
        if isinstance(result, Won):
            self.shared.versions[(keyspace, key)] = {result.revision: 1}
            return Won(1)
        return result

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        real = self._real(keyspace, key, expected)
        result = await self.inner.update(keyspace, key, value, real)
        if isinstance(result, Won):
            self.shared.versions[(keyspace, key)][result.revision] = expected + 1
            return Won(expected + 1)
        return result

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        real = None if expected is None else self._real(keyspace, key, expected)
        return await self.inner.delete(keyspace, key, real)

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        async for event in events:
            yield Put(self._version(keyspace, event.entry)) if isinstance(event, Put) else event


class ListIgnoresPrefix(Wrapper):
    """List returns the whole keyspace."""

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        validate_prefix(prefix)
        return await self.inner.list(keyspace, "")


class ListUnsorted(Wrapper):
    """List returns entries in reverse key order."""

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return list(reversed(await self.inner.list(keyspace, prefix)))


class PagesDropLastOfFullPage(Wrapper):
    """Each full page loses its last entry (an off-by-one in a cursor's next start key)."""

    async def pages(
        self, pages: AsyncIterator[builtins.list[Entry]], page_size: int
    ) -> AsyncGenerator[builtins.list[Entry], None]:
        async for page in pages:
            trimmed = page[:-1] if len(page) == page_size else page
            if trimmed:
                yield trimmed


class PagesIgnorePageSize(Wrapper):
    """A paged listing checks page_size, then hands out everything as one page."""

    @asynccontextmanager
    async def _list_pages(
        self, keyspace: Keyspace, prefix: str, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        validate_page_size(page_size)
        async with super()._list_pages(keyspace, prefix, 1_000_000_000) as pages:
            yield pages


class PagesUnsorted(Wrapper):
    """Each page comes in reverse key order (a store that sorts the listing, not the page)."""

    async def pages(
        self, pages: AsyncIterator[builtins.list[Entry]], page_size: int
    ) -> AsyncGenerator[builtins.list[Entry], None]:
        async for page in pages:
            yield list(reversed(page))


class PagesEndWithAnEmptyPage(Wrapper):
    """A listing ends with an empty page (a store that stops only when a request finds none)."""

    async def pages(
        self, pages: AsyncIterator[builtins.list[Entry]], page_size: int
    ) -> AsyncGenerator[builtins.list[Entry], None]:
        async for page in pages:
            yield page
        yield []


class WatchOmitsSnapshotDone(Wrapper):
    """A watch never says its snapshot is complete."""

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        async for event in events:
            if not isinstance(event, SnapshotDone):
                yield event


class WatchReordersEvents(Wrapper):
    """Live events arrive with each pair swapped."""

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        live = False
        held: WatchEvent | None = None
        async for event in events:
            if not live:
                live = isinstance(event, SnapshotDone)
                yield event
            elif held is None:
                held = event
            else:
                yield event
                yield held
                held = None


class WatchHasGap(Wrapper):
    """A watch takes its snapshot, yields to other tasks, and only then subscribes."""

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool = False
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        async with self.inner.watch(keyspace, prefix, exact=exact) as first:
            snapshot: list[WatchEvent] = []
            async for event in first:
                snapshot.append(event)
                if isinstance(event, SnapshotDone):
                    break
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        async with self.inner.watch(keyspace, prefix, exact=exact) as live:
            async for event in live:
                if isinstance(event, SnapshotDone):
                    break

            async def combined() -> AsyncGenerator[WatchEvent, None]:
                for event in snapshot:
                    yield event
                async for event in live:
                    yield event

            async with aclosing(combined()) as events:
                yield events


class ExactWatchIsAPrefixWatch(Wrapper):
    """An exact watch validates its key but watches it as a prefix (``assign.w1`` gets ``w10``)."""

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        if exact:
            validate_key(prefix)
        return self._watch(keyspace, prefix, exact=False)


class ExactWatchTakesAnyPrefix(Wrapper):
    """An exact watch checks its key as a prefix would, so the empty key watches everything."""

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        validate_prefix(prefix)
        return self._watch(keyspace, prefix, exact=exact and prefix != "")


class SilentExpiryDeclaredLoud(Wrapper):
    """Declares that expiry reaches watchers but drops expiry Deletes."""

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        self.shared.deleted.add((keyspace, key))
        return await self.inner.delete(keyspace, key, expected)

    async def events(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent]
    ) -> AsyncGenerator[WatchEvent, None]:
        async for event in events:
            if isinstance(event, Delete) and (keyspace, event.key) not in self.shared.deleted:
                continue
            yield event


class ExpiryNeverHappens(Wrapper):
    """Ephemeral entries never expire."""

    inner_ttl_factor = math.inf


class ExpiryHappensEarly(Wrapper):
    """Ephemeral entries expire at half the declared TTL."""

    inner_ttl_factor = 0.5


def _blind_put(inner: MemoryStore, keyspace: Keyspace, key: str, value: bytes) -> Won:
    """An unconditional write, reaching into MemoryStore (it offers none on purpose)."""
    inner._check_value(key, value)
    table = inner.server._table(inner.namespace, keyspace)
    return Won(table.put(key, bytes(value), trio.current_time()))


class CreateNotAtomic(Wrapper):
    """Create checks for the key, yields, then puts (check-then-act)."""

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        if await self.inner.get(keyspace, key) is not None:
            return Conflict()
        await trio.lowlevel.checkpoint()
        return _blind_put(self.inner, keyspace, key, value)


class UpdateNotAtomic(Wrapper):
    """Update compares the revision, yields, then puts (check-then-act)."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        current = await self.inner.get(keyspace, key)
        if current is None or current.revision != expected:
            return Conflict()
        await trio.lowlevel.checkpoint()
        return _blind_put(self.inner, keyspace, key, value)


class ValuesMangled(Wrapper):
    """Values pass through a UTF-8 text round trip (a JSON adapter that forgot base64)."""

    @staticmethod
    def _mangle(value: bytes) -> bytes:
        return bytes(value).decode("utf-8", errors="replace").encode()

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        return await self.inner.create(keyspace, key, self._mangle(value))

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        return await self.inner.update(keyspace, key, self._mangle(value), expected)


class OversizeValueLands(Wrapper):
    """Writes the value first and checks its size afterwards."""

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        if len(value) > MAX_VALUE_SIZE:
            await self.inner.create(keyspace, key, value[:MAX_VALUE_SIZE])
        return await self.inner.create(keyspace, key, value, **named)


class KeyspacesShared(Wrapper):
    """Both keyspaces are one table."""

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        return await self.inner.get(Keyspace.EPHEMERAL, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return await self.inner.list(Keyspace.EPHEMERAL, prefix)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        return await self.inner.create(Keyspace.EPHEMERAL, key, value)

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        return await self.inner.update(Keyspace.EPHEMERAL, key, value, expected)

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        return await self.inner.delete(Keyspace.EPHEMERAL, key, expected)

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        return self._watch(Keyspace.EPHEMERAL, prefix, exact)


class SessionOutlivesCoordinator(Wrapper):
    """Entries written under a session live as long as the store client, not the session.

    The bug spate's etcd adapter once had: every ephemeral key hung on the client's one lease,
    so a coordinator that stopped inside a long-lived application left its leader key and
    leases alive until the process exited. Modelled here by a client that keeps renewing what
    its sessions wrote, whether or not they ended.
    """

    async def __aenter__(self) -> SessionOutlivesCoordinator:
        await super().__aenter__()
        self._kept: dict[str, tuple[bytes, Revision]] = {}
        self._stack = AsyncExitStack()
        self._nursery = await self._stack.enter_async_context(trio.open_nursery())
        self._nursery.start_soon(self._keep_alive)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._nursery.cancel_scope.cancel()
        await self._stack.aclose()
        await super().__aexit__(*exc_info)

    async def _keep_alive(self) -> None:
        while True:
            await trio.sleep(TTL / 3)
            for key, (value, revision) in list(self._kept.items()):
                result = await self.inner.update(Keyspace.EPHEMERAL, key, value, revision)
                if isinstance(result, Won):
                    self._kept[key] = (value, result.revision)
                else:
                    del self._kept[key]

    def _keep(
        self, keyspace: Keyspace, key: str, value: bytes, result: WriteResult, named: Any
    ) -> None:
        if keyspace is Keyspace.EPHEMERAL and named.get("session") and isinstance(result, Won):
            self._kept[key] = (value, result.revision)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        result = await self.inner.create(keyspace, key, value, **named)
        self._keep(keyspace, key, value, result, named)
        return result

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        result = await self.inner.update(keyspace, key, value, expected, **named)
        self._keep(keyspace, key, value, result, named)
        return result


class NamespacesShared(Wrapper):
    """Every client uses one namespace, whatever it was opened with."""

    ignores_namespace = True


BROKEN: dict[str, type[Wrapper]] = {
    "none": Wrapper,
    "duplicate-create-wins": DuplicateCreateWins,
    "stale-update-wins": StaleUpdateWins,
    "update-of-missing-key-wins": UpdateOfMissingKeyWins,
    "guarded-delete-ignores-revision": GuardedDeleteIgnoresRevision,
    "revision-never-increases": RevisionNeverIncreases,
    "revision-resets-on-recreate": RevisionResetsOnRecreate,
    "list-ignores-prefix": ListIgnoresPrefix,
    "list-unsorted": ListUnsorted,
    "pages-drop-last-of-full-page": PagesDropLastOfFullPage,
    "pages-ignore-page-size": PagesIgnorePageSize,
    "pages-unsorted": PagesUnsorted,
    "pages-end-with-an-empty-page": PagesEndWithAnEmptyPage,
    "watch-omits-snapshot-done": WatchOmitsSnapshotDone,
    "watch-reorders-events": WatchReordersEvents,
    "watch-has-gap": WatchHasGap,
    "exact-watch-is-a-prefix-watch": ExactWatchIsAPrefixWatch,
    "exact-watch-takes-any-prefix": ExactWatchTakesAnyPrefix,
    "silent-expiry-declared-loud": SilentExpiryDeclaredLoud,
    "expiry-never-happens": ExpiryNeverHappens,
    "expiry-happens-early": ExpiryHappensEarly,
    "create-not-atomic": CreateNotAtomic,
    "update-not-atomic": UpdateNotAtomic,
    "values-mangled": ValuesMangled,
    "oversize-value-lands": OversizeValueLands,
    "keyspaces-shared": KeyspacesShared,
    "namespaces-shared": NamespacesShared,
    "session-outlives-coordinator": SessionOutlivesCoordinator,
}
"""Every wrapper by name; ``none`` breaks nothing (the control)."""


def broken_factory(name: str) -> StoreFactory:
    """A store factory for one test: clients of the broken store ``name`` on one server."""
    cls = BROKEN[name]
    server = MemoryServer()
    shared = Shared()

    @asynccontextmanager
    async def client(namespace: str) -> AsyncIterator[Store]:
        inner = MemoryStore(
            namespace="" if cls.ignores_namespace else namespace,
            ephemeral_ttl=1e9 if math.isinf(cls.inner_ttl_factor) else TTL * cls.inner_ttl_factor,
            max_value_size=MAX_VALUE_SIZE,
            server=server,
        )
        async with cls(inner, shared) as store:
            yield store

    factory: Callable[[str], AbstractAsyncContextManager[Store]] = client
    return factory
