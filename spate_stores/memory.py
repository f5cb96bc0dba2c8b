"""An exact, in-process store on the Trio clock.

:class:`MemoryStore` implements the store contract (:mod:`spate.store`) with per-key ephemeral
semantics measured on ``trio.current_time()``, so ``trio.testing.MockClock`` drives expiry.
It is what the demo and the fleet simulator run on, so it is exact (every revision and
every event as the contract says) and cheap (no background task: expiry is applied lazily by
whichever operation or watcher next looks at a keyspace, at the exact deadline).

Many :class:`MemoryStore` clients can share one :class:`MemoryServer`, the way several
processes share a real server; clients on different namespaces never see each other. Stores
opened from ``memory://`` URLs (:func:`store_from_url`) share one process-wide server while any
of them is open, so every worker of an in-process fleet that opens the same URL sees the same
data; when the last one closes, that data is gone.
Fault injection wraps a store (see :mod:`spate_testing.faults`) rather than living here.
"""

from __future__ import annotations

import builtins
import heapq
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import attrs
import trio

from spate import ConfigError, StoreError, StoreUnavailable, ValueTooLarge
from spate._quote import shorten
from spate.store import (
    Capabilities,
    Conflict,
    Create,
    Delete,
    Entry,
    EphemeralSemantics,
    KeySession,
    Keyspace,
    Put,
    Remove,
    Revision,
    Session,
    SnapshotDone,
    WatchEvent,
    Won,
    Write,
    WriteResult,
    check_session,
    check_writes,
    validate_key,
    validate_page_size,
    validate_prefix,
)
from spate_stores._namespace import read_only_refusal, ttl_mismatch
from spate_stores._redact import redact_url

_N = TypeVar("_N", int, float)

__all__ = [
    "DEFAULT_EPHEMERAL_TTL",
    "DEFAULT_MAX_VALUE_SIZE",
    "MemoryServer",
    "MemoryStore",
    "store_from_url",
]

DEFAULT_EPHEMERAL_TTL = 30.0
"""Default TTL of the ephemeral keyspace: the default lease duration."""
DEFAULT_MAX_VALUE_SIZE = 1024 * 1024
"""Default value size limit, matching etcd's default request limit."""

MAX_BATCH = 64
"""The most writes one ``write_many`` call carries (a group commit's size)."""


@attrs.define(eq=False)  # compared and hashed by identity: a member of its key's watchers
class _Watcher:
    prefix: str
    exact: bool
    send: trio.MemorySendChannel[WatchEvent]


@attrs.define
class _Watchers:
    """The watchers of one keyspace, indexed so a write costs only the watchers it reaches.

    A fleet holds thousands of exact watches (each follower's plan, assignment and leader
    keys) and a handful of distinct prefixes, so a write looks its key up among the exact
    watchers once, and its prefixes up once per distinct length of a watched prefix, instead
    of testing every watcher.
    """

    # Insertion-ordered dicts used as sets: a watch closes in O(1) however many share a key.
    exact: dict[str, dict[_Watcher, None]] = attrs.field(factory=dict)
    prefixes: dict[str, dict[_Watcher, None]] = attrs.field(factory=dict)
    # How many distinct watched prefixes have each length, and those lengths ascending.
    length_counts: dict[int, int] = attrs.field(factory=dict)
    lengths: tuple[int, ...] = ()

    def add(self, watcher: _Watcher) -> None:
        index = self.exact if watcher.exact else self.prefixes
        group = index.get(watcher.prefix)
        if group is None:
            group = index[watcher.prefix] = {}
            if not watcher.exact:
                self._count_length(len(watcher.prefix), +1)
        group[watcher] = None

    def remove(self, watcher: _Watcher) -> None:
        index = self.exact if watcher.exact else self.prefixes
        group = index[watcher.prefix]
        del group[watcher]
        if not group:
            del index[watcher.prefix]
            if not watcher.exact:
                self._count_length(len(watcher.prefix), -1)

    def _count_length(self, length: int, change: int) -> None:
        count = self.length_counts.get(length, 0) + change
        if count:
            self.length_counts[length] = count
        else:
            del self.length_counts[length]
        self.lengths = tuple(sorted(self.length_counts))

    def publish(self, key: str, event: WatchEvent) -> None:
        # Unbounded channels: a writer never waits for a slow watcher.
        group = self.exact.get(key)
        if group is not None:
            for watcher in group:
                watcher.send.send_nowait(event)
        prefixes = self.prefixes
        if not prefixes:
            return
        size = len(key)
        for length in self.lengths:
            if length > size:
                break
            group = prefixes.get(key[:length])
            if group is not None:
                for watcher in group:
                    watcher.send.send_nowait(event)


@attrs.define
class _Table:
    """One keyspace of one namespace: entries, their deadlines, and watchers."""

    ttl: float | None
    entries: dict[str, Entry] = attrs.field(factory=dict)
    deadlines: dict[str, float] = attrs.field(factory=dict)
    # (deadline, key) pairs; stale pairs (key rewritten or deleted since) are skipped on pop.
    heap: list[tuple[float, str]] = attrs.field(factory=list)
    revision: Revision = 0
    watchers: _Watchers = attrs.field(factory=_Watchers)

    def next_deadline(self) -> float:
        while self.heap:
            deadline, key = self.heap[0]
            if self.deadlines.get(key) == deadline:
                return deadline
            heapq.heappop(self.heap)
        return math.inf

    def expire(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            deadline, key = heapq.heappop(self.heap)
            if self.deadlines.get(key) == deadline:
                self._remove(key)

    def put(self, key: str, value: bytes, now: float) -> Revision:
        self.revision += 1
        entry = Entry(key, value, self.revision)
        self.entries[key] = entry
        if self.ttl is not None:
            deadline = now + self.ttl
            self.deadlines[key] = deadline
            heapq.heappush(self.heap, (deadline, key))
        self.watchers.publish(key, Put(entry))
        return self.revision

    def _remove(self, key: str) -> Revision:
        del self.entries[key]
        self.deadlines.pop(key, None)
        self.revision += 1
        self.watchers.publish(key, Delete(key, self.revision))
        return self.revision

    def remove(self, key: str) -> Revision:
        return self._remove(key)


class MemoryServer:
    """The shared state behind any number of :class:`MemoryStore` clients in one process."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, Keyspace], _Table] = {}
        self._ttls: dict[str, float] = {}

    def _bind(self, namespace: str, ttl: float) -> None:
        known = self._ttls.setdefault(namespace, ttl)
        if known != ttl:
            raise ttl_mismatch("memory", namespace, known, ttl)

    def _ttl_of(self, namespace: str) -> float | None:
        """The namespace's TTL if a client has bound it (what a read-only client adopts)."""
        return self._ttls.get(namespace)

    def _table(self, namespace: str, keyspace: Keyspace) -> _Table:
        table = self._tables.get((namespace, keyspace))
        if table is None:
            if namespace not in self._ttls:
                # Only a read-only client gets here: a namespace nobody bound, so nothing
                # was ever written to it. An empty table, not kept: reading creates nothing.
                return _Table(None)
            ttl = self._ttls[namespace] if keyspace is Keyspace.EPHEMERAL else None
            table = self._tables[(namespace, keyspace)] = _Table(ttl)
        return table


class _ProcessServer:
    """The server every ``memory://`` URL of this process shares while any client is open."""

    def __init__(self) -> None:
        self._server: MemoryServer | None = None
        self._clients = 0

    def acquire(self) -> MemoryServer:
        if self._server is None:
            self._server = MemoryServer()
        self._clients += 1
        return self._server

    def release(self) -> None:
        self._clients -= 1
        if self._clients == 0:
            # Nobody can observe the data any more; dropping it lets the next user of a
            # namespace pick another TTL instead of tripping over a forgotten one.
            self._server = None


_PROCESS_SERVER = _ProcessServer()


class MemoryStore:
    """The in-memory store: exact CAS, per-key TTL on the Trio clock, gap-free watches.

    ``MemoryStore()`` makes a private server; pass ``server=`` to share one between
    clients (each client a "process"), and ``namespace=`` to isolate tenants on it.
    :meth:`process_shared` (what ``memory://`` URLs open) joins the process-wide server.

    Raises :class:`~spate.ConfigError` for a non-positive or infinite TTL or a size
    limit under one byte, and :class:`~spate.StoreError` when ``namespace`` is already
    bound to another TTL on ``server``.

    With ``read_only=True`` the client writes nothing at all: it binds no TTL (it adopts the
    namespace's, if bound), and every write or session is refused with StoreError.
    """

    def __init__(
        self,
        *,
        namespace: str = "",
        ephemeral_ttl: float = DEFAULT_EPHEMERAL_TTL,
        max_value_size: int = DEFAULT_MAX_VALUE_SIZE,
        server: MemoryServer | None = None,
        read_only: bool = False,
    ) -> None:
        if not (ephemeral_ttl > 0 and math.isfinite(ephemeral_ttl)):
            raise ConfigError(
                f"ephemeral_ttl must be a positive number of seconds, not {ephemeral_ttl!r}"
            )
        if max_value_size < 1:
            raise ConfigError(f"max_value_size must be at least 1 byte, not {max_value_size!r}")
        self._server: MemoryServer | None = server if server is not None else MemoryServer()
        self._read_only = read_only
        self._ttl = float(ephemeral_ttl)
        if read_only:
            self._ttl = self._server._ttl_of(namespace) or self._ttl
        else:
            self._server._bind(namespace, ephemeral_ttl)
        self._shares_process_server = False
        self._adopt_ttl = False  # a memory:// URL without ttl: take the namespace's (as etcd)
        self._namespace = namespace
        self._capabilities = Capabilities(
            system="memory",
            ephemeral=EphemeralSemantics.PER_KEY,
            expiry_reaches_watchers=True,
            max_value_size=max_value_size,
            expiry_slack=0.0,
        )
        self._closed = False
        self._watch_channels: set[trio.MemorySendChannel[WatchEvent]] = set()

    def __repr__(self) -> str:
        mode = ", read_only=True" if self._read_only else ""
        return f"MemoryStore(namespace={self._namespace!r}, ephemeral_ttl={self._ttl}{mode})"

    @property
    def read_only(self) -> bool:
        """Whether this client was opened to read only (it then writes nothing at all)."""
        return self._read_only

    @classmethod
    def process_shared(
        cls,
        *,
        namespace: str = "",
        ephemeral_ttl: float = DEFAULT_EPHEMERAL_TTL,
        max_value_size: int = DEFAULT_MAX_VALUE_SIZE,
        read_only: bool = False,
    ) -> MemoryStore:
        """A client of the process-wide server that every ``memory://`` URL shares.

        The server is joined when the store is entered and left when it closes; it lives
        while any such client is open. Entering raises StoreError if the namespace is in use
        by an open client with another TTL.
        """
        store = cls(
            namespace=namespace,
            ephemeral_ttl=ephemeral_ttl,
            max_value_size=max_value_size,
            read_only=read_only,
        )
        # Validated against a private server; the shared one is joined in __aenter__, since a
        # store that is never entered must not keep the process-wide data alive.
        store._server = None
        store._shares_process_server = True
        return store

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        ttl: float | None = None,
        read_only: bool = False,
    ) -> MemoryStore:
        """A client of the process-wide server for a ``memory://`` URL (see :func:`store_from_url`).

        ``namespace`` and ``ttl`` (seconds), when given, override the URL's; the same shape
        as every adapter's ``from_url``. ``read_only``: see the class. Raises ConfigError for
        a malformed URL.
        """
        store = store_from_url(url, read_only=read_only)
        if namespace is None and ttl is None:
            return store
        return cls.process_shared(
            namespace=store.namespace if namespace is None else namespace,
            ephemeral_ttl=store.ephemeral_ttl if ttl is None else ttl,
            max_value_size=store.capabilities.max_value_size,
            read_only=read_only,
        )

    @property
    def server(self) -> MemoryServer:
        """The shared state this client talks to (pass it to another client to share it)."""
        return self._connected_server()

    def _connected_server(self) -> MemoryServer:
        if self._server is None:
            raise StoreError(
                f"{self!r} shares the process-wide memory server and is not open; "
                "use it inside `async with store:`."
            )
        return self._server

    @property
    def namespace(self) -> str:
        """The namespace this client reads and writes."""
        return self._namespace

    @property
    def capabilities(self) -> Capabilities:
        """Per-key expiry, delivered to watchers exactly at the deadline."""
        return self._capabilities

    @property
    def max_batch(self) -> int:
        """The most writes one :meth:`write_many` carries."""
        return MAX_BATCH

    @property
    def ephemeral_ttl(self) -> float:
        """TTL in seconds of the ephemeral keyspace."""
        return self._ttl

    async def __aenter__(self) -> MemoryStore:
        """Join the process-wide server if this store shares it; returns the store."""
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise StoreError(f"{self!r} is closed; open a new store to keep working.")
        if self._shares_process_server and self._server is None:
            server = _PROCESS_SERVER.acquire()
            try:
                if self._read_only or self._adopt_ttl:
                    self._ttl = server._ttl_of(self._namespace) or self._ttl
                if not self._read_only:
                    server._bind(self._namespace, self._ttl)
            except StoreError:
                _PROCESS_SERVER.release()
                raise
            self._server = server
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the client: its open watches end with StoreUnavailable."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client; further calls raise StoreError, open watches raise StoreUnavailable.

        Closes even when cancelled (then raises Cancelled), like every Trio resource.
        """
        if not self._closed:
            self._closed = True
            for send in list(self._watch_channels):
                send.close()
            self._watch_channels.clear()
            if self._shares_process_server and self._server is not None:
                _PROCESS_SERVER.release()
        await trio.lowlevel.checkpoint()

    # -- the contract -------------------------------------------------------------------

    async def _enter(self, keyspace: Keyspace) -> _Table:
        # A checkpoint before touching state: the call can be cancelled before it applies
        # (never after), and other tasks get to run as they would around real I/O.
        await trio.lowlevel.checkpoint()
        return self._table(keyspace)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed; open a new store to keep working.")

    def _table(self, keyspace: Keyspace) -> _Table:
        self._check_open()
        if not isinstance(keyspace, Keyspace):
            raise StoreError(f"unknown keyspace {keyspace!r}; use spate.store.Keyspace")
        table = self._connected_server()._table(self._namespace, keyspace)
        table.expire(trio.current_time())
        return table

    def _check_value(self, key: str, value: bytes) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise StoreError(f"value for key {key!r} must be bytes, not {type(value).__name__}")
        if len(value) > self._capabilities.max_value_size:
            raise ValueTooLarge(key, len(value), self._capabilities.max_value_size)

    def _check_writable(self, doing: str) -> None:
        if self._read_only:
            raise read_only_refusal(self, doing)

    def _check_session(self, keyspace: Keyspace, session: Session | None) -> None:
        if keyspace is Keyspace.EPHEMERAL:
            check_session(session, self)

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """Return the live entry for ``key`` or None."""
        validate_key(key)
        table = await self._enter(keyspace)
        return table.entries.get(key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Every live entry under ``prefix``, sorted by key, from one instant."""
        validate_prefix(prefix)
        table = await self._enter(keyspace)
        return sorted(
            (e for k, e in table.entries.items() if k.startswith(prefix)), key=lambda e: e.key
        )

    @asynccontextmanager
    async def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        """Every live entry under ``prefix`` in key order, from one instant, page by page."""
        validate_prefix(prefix)
        validate_page_size(page_size)
        table = await self._enter(keyspace)
        # One snapshot, taken at once: the entries are immutable and already in memory, so
        # the listing copies references only, and its pages make one consistent snapshot.
        snapshot = sorted(
            (e for k, e in table.entries.items() if k.startswith(prefix)), key=lambda e: e.key
        )

        async def pages() -> AsyncGenerator[builtins.list[Entry], None]:
            for start in range(0, len(snapshot), page_size):
                # Each page is a call: a store closed or cut off meanwhile breaks the listing.
                await self._enter(keyspace)
                yield snapshot[start : start + page_size]

        iterator = pages()
        try:
            yield iterator
        finally:
            await iterator.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[KeySession]:
        """A light session handle: entries keep their per-key TTL; writes after its end fail."""
        self._check_writable("opening a session")
        await self._enter(Keyspace.EPHEMERAL)
        session = KeySession(self)
        try:
            yield session
        finally:
            session.end()

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Create-if-absent."""
        validate_key(key)
        self._check_writable(f"creating {key!r}")
        self._check_value(key, value)
        self._check_session(keyspace, session)
        table = await self._enter(keyspace)
        if key in table.entries:
            return Conflict()
        return Won(table.put(key, bytes(value), trio.current_time()))

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """Compare-and-swap on the key's revision."""
        validate_key(key)
        self._check_writable(f"updating {key!r}")
        self._check_value(key, value)
        self._check_session(keyspace, session)
        table = await self._enter(keyspace)
        current = table.entries.get(key)
        if current is None or current.revision != expected:
            return Conflict()
        return Won(table.put(key, bytes(value), trio.current_time()))

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Writes applied together, each on its own (see :class:`~spate.store.BatchedWrites`)."""
        check_writes(writes)
        self._check_writable(f"writing {len(writes)} keys")
        if any(write.keyspace is Keyspace.EPHEMERAL for write in writes):
            check_session(session, self)  # a refused session refuses the whole call
        await trio.lowlevel.checkpoint()
        self._check_open()  # a closed store refuses the call, not each write
        results: list[WriteResult | StoreError] = []
        for write in writes:
            try:
                results.append(self._apply(write))
            except StoreError as exc:
                results.append(exc)
        return results

    def _apply(self, write: Write) -> WriteResult:
        """One write of a group, with no checkpoint: as its own create/update/delete."""
        validate_key(write.key)
        if isinstance(write, Remove):
            table = self._table(write.keyspace)
            current = table.entries.get(write.key)
            if current is None or (
                write.expected is not None and current.revision != write.expected
            ):
                return Conflict()
            return Won(table.remove(write.key))
        self._check_value(write.key, write.value)
        table = self._table(write.keyspace)
        current = table.entries.get(write.key)
        if isinstance(write, Create):
            if current is not None:
                return Conflict()
        elif current is None or current.revision != write.expected:
            return Conflict()
        return Won(table.put(write.key, bytes(write.value), trio.current_time()))

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delete, guarded by ``expected`` when given."""
        validate_key(key)
        self._check_writable(f"deleting {key!r}")
        table = await self._enter(keyspace)
        current = table.entries.get(key)
        if current is None or (expected is not None and current.revision != expected):
            return Conflict()
        return Won(table.remove(key))

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        """Snapshot, SnapshotDone, then live events in revision order (see the contract).

        With ``exact=True`` the watch follows the key ``prefix`` alone.
        """
        if exact:
            validate_key(prefix)
        else:
            validate_prefix(prefix)
        return self._watch(keyspace, prefix, exact=exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        table = await self._enter(keyspace)
        send, receive = trio.open_memory_channel[WatchEvent](math.inf)
        # Snapshot and registration happen with no checkpoint between them, so no write can
        # fall into a gap between the snapshot and the live events. The snapshot is handed
        # out from a list of its own (a channel send and receive per entry cost more than
        # everything else about a large snapshot), each entry wrapped in its event only as
        # it is handed out (a list of a few hundred thousand events built at once cost the
        # watcher full garbage collections, and kept them all alive until the last).
        entries = table.entries
        if exact:
            found = entries.get(prefix)
            snapshot = [] if found is None else [found]
        else:
            snapshot = [entries[k] for k in sorted(entries) if k.startswith(prefix)]
        watcher = _Watcher(prefix, exact, send)
        table.watchers.add(watcher)
        self._watch_channels.add(send)
        try:
            yield _WatchIterator(self, table, receive, snapshot)
        finally:
            table.watchers.remove(watcher)
            self._watch_channels.discard(send)
            send.close()
            receive.close()


YIELD_EVERY = 64
"""Queued watch events handed over back to back before the watcher yields to other tasks."""


class _WatchIterator:
    """Yields queued events; while idle, wakes at the next expiry deadline and applies it.

    A watcher is what makes expiry happen on time when nobody writes, so no background task
    is needed and MockClock drives expiry exactly.
    """

    def __init__(
        self,
        store: MemoryStore,
        table: _Table,
        receive: trio.MemoryReceiveChannel[WatchEvent],
        snapshot: list[Entry],
    ) -> None:
        self._store = store
        self._table = table
        self._receive = receive
        self._snapshot: list[Entry] | None = snapshot  # None once SnapshotDone is handed out
        self._next = 0
        self._unyielded = 0

    def __aiter__(self) -> _WatchIterator:
        return self

    async def _yield_now_and_then(self) -> None:
        # An event already queued is handed over at once; the other tasks get their turn
        # every YIELD_EVERY of them. A scheduling pass per event cost more than everything
        # else a watcher does with a large snapshot.
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def __anext__(self) -> WatchEvent:
        try:
            # Check for cancellation before taking an event and never after, so a cancelled
            # call loses nothing.
            await trio.lowlevel.checkpoint_if_cancelled()
            while True:
                snapshot = self._snapshot
                if snapshot is not None:
                    if self._store._closed:
                        raise trio.ClosedResourceError
                    event: WatchEvent
                    if self._next < len(snapshot):
                        event = Put(snapshot[self._next])
                        self._next += 1
                    else:
                        event = SnapshotDone()
                        self._snapshot = None  # handed out: let it go
                    await self._yield_now_and_then()
                    return event
                try:
                    event = self._receive.receive_nowait()
                except trio.WouldBlock:
                    pass
                else:
                    await self._yield_now_and_then()
                    return event
                self._unyielded = 0  # waiting for an event is a yield
                deadline = self._table.next_deadline()
                if deadline == math.inf:
                    # Nothing here expires (the durable keyspace): no timeout to arm.
                    return await self._receive.receive()
                with trio.move_on_at(deadline):
                    return await self._receive.receive()
                self._table.expire(trio.current_time())
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StoreUnavailable(
                f"{self._store!r} was closed while a watch was open; re-open the store and "
                "watch again."
            ) from None


def store_from_url(url: str, *, read_only: bool = False) -> MemoryStore:
    """The store a ``memory://`` URL names, sharing this process's memory server.

    ``memory://[namespace][?namespace=...&ttl=SECONDS&max_value_size=BYTES]``: the query's
    namespace wins over the one in the URL's host and path. Without ``ttl``, a namespace an
    open client already uses keeps its TTL (adopted); a new one gets the default.
    ``read_only=True`` opens a client that writes nothing (see :class:`MemoryStore`). Raises
    :class:`~spate.ConfigError` for unknown or malformed parameters.
    """
    parts = urlsplit(url)
    shown = shorten(redact_url(url))  # a message quotes the URL without secrets, briefly
    try:
        raw = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ConfigError(f"malformed query string in {shown!r}") from None
    query = {k: v[-1] for k, v in raw.items()}
    unknown = set(query) - {"namespace", "ttl", "max_value_size"}
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {[shorten(name) for name in sorted(unknown)]} in {shown!r}; "
            "memory:// takes namespace, ttl and max_value_size"
        )
    namespace = query.get("namespace") or (parts.netloc + parts.path).strip("/")
    ttl = _number(query, "ttl", DEFAULT_EPHEMERAL_TTL, float, "a number of seconds")
    max_value_size = _number(
        query, "max_value_size", DEFAULT_MAX_VALUE_SIZE, int, "a whole number of bytes"
    )
    try:
        store = MemoryStore.process_shared(
            namespace=namespace,
            ephemeral_ttl=ttl,
            max_value_size=max_value_size,
            read_only=read_only,
        )
    except ConfigError as exc:
        raise ConfigError(f"in {shown!r}: {exc}") from None
    store._adopt_ttl = "ttl" not in query
    return store


def _number(
    query: dict[str, str], name: str, default: _N, kind: Callable[[str], _N], what: str
) -> _N:
    """Query parameter ``name`` read by ``kind``; a ConfigError naming it when it is not."""
    if name not in query:
        return default
    try:
        return kind(query[name])
    except ValueError:
        raise ConfigError(f"{name} must be {what}, got {shorten(query[name])!r}") from None
