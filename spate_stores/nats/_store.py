"""The store contract on NATS JetStream KV (see ``docs/stores/nats.md``).

Revisions are bucket stream sequences: every write of any key takes the next one, so a key's
revisions strictly increase across updates, deletion and re-creation. Conditional writes use
``Nats-Expected-Last-Subject-Sequence``, checked atomically by the stream leader:

* create expects 0, or, when the key's last message is a tombstone (a delete or an expiry
  marker), that tombstone's sequence: read it, check it is a tombstone, retry;
* update and guarded delete expect the given revision;
* unguarded delete reads the key and deletes it guarded by what it read, so it wins only when
  the key existed.

A write that got no answer raised StoreUnavailable and is never retried here: it may have
landed.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing, asynccontextmanager

import attrs

from spate import StoreError
from spate.store import (
    Capabilities,
    Conflict,
    Entry,
    EphemeralSemantics,
    KeySession,
    Keyspace,
    Revision,
    Session,
    WatchEvent,
    Won,
    WriteResult,
    check_session,
    validate_key,
    validate_page_size,
    validate_prefix,
)
from spate_stores._namespace import read_only_refusal
from spate_stores.nats import _errors as errors
from spate_stores.nats._bucket import Bucket, ensure_bucket, find_bucket
from spate_stores.nats._connection import NatsConnection
from spate_stores.nats._errors import ApiError, WrongLastSequence
from spate_stores.nats._jetstream import JetStream, StoredMessage, expect_sequence
from spate_stores.nats._keys import bucket_name, encode_key
from spate_stores.nats._options import StoreOptions, check_ttl, parse_url
from spate_stores.nats._watch import KeyWatch

__all__ = ["HEADER_OVERHEAD", "NatsStore", "store_from_url"]

HEADER_OVERHEAD = 1024
"""Bytes of ``max_payload`` kept for the subject, reply and headers of a write."""
EXPIRY_SLACK = 1.5
"""Seconds after TTL by which an expired key is gone: JetStream checks ages on a timer
(measured: 0.1-0.4 s late, up to ~1.1 s for a tombstone aging out), plus delivery."""
_MAX_ATTEMPTS = 8


def _heartbeat_for(ttl: float) -> float:
    # Short enough that two missed heartbeats are noticed well within the window in which an
    # ephemeral watch can still resume exactly (3/4 of the TTL), never chattier than 4/s.
    return min(5.0, max(0.25, ttl / 8))


class NatsStore:
    """A spate store on NATS JetStream KV, over a Trio-native NATS client.

    Open it with :func:`spate_stores.open_store` (``nats://``, ``tls://``, ``nats+ws://``,
    ``nats+wss://``) or :meth:`from_url`, then use it as an async context manager: entering
    connects, creates (or verifies) the two buckets of the namespace, and learns what the
    server supports; leaving closes the connection and ends open watches.

    With ``read_only=True`` the store writes nothing at all: entering creates no bucket and
    checks no TTL (an existing bucket's is adopted; a missing one reads as empty), and every
    write or session is refused with StoreError. Operator tools that only look open it so.
    """

    def __init__(
        self, options: StoreOptions, *, heartbeat: float | None = None, read_only: bool = False
    ) -> None:
        check_ttl(options.ttl)
        self._options = options
        self._read_only = read_only
        self._fixed_heartbeat = heartbeat
        self._heartbeat = heartbeat if heartbeat is not None else _heartbeat_for(options.ttl)
        self._stack: AsyncExitStack | None = None
        self._conn: NatsConnection | None = None
        self._js: JetStream | None = None
        self._buckets: dict[Keyspace, Bucket] = {}
        self._closed = False
        self._capabilities = Capabilities(
            system="nats",
            ephemeral=EphemeralSemantics.PER_KEY,
            expiry_reaches_watchers=False,
            max_value_size=1024 * 1024 - HEADER_OVERHEAD,
            expiry_slack=EXPIRY_SLACK,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        ttl: float | None = None,
        heartbeat: float | None = None,
        read_only: bool = False,
    ) -> NatsStore:
        """A store for ``url`` (format in ``spate_stores.nats``), optionally overriding parts.

        ``namespace`` and ``ttl`` (seconds), when given, override the URL's, the same shape as
        every adapter's ``from_url``; ``heartbeat`` (seconds) is NATS's own tuning of how
        often the connection is checked; ``read_only``: see the class. Raises ConfigError for
        a malformed URL.
        """
        options = parse_url(url)
        if namespace is not None or ttl is not None:
            options = attrs.evolve(
                options,
                namespace=options.namespace if namespace is None else namespace,
                ttl=options.ttl if ttl is None else ttl,
                adopt_ttl=options.adopt_ttl and ttl is None,
            )
        return cls(options, heartbeat=heartbeat, read_only=read_only)

    def __repr__(self) -> str:
        return (
            f"NatsStore({self._options.connect.url!r}, namespace={self._options.namespace!r}, "
            f"ttl={self._options.ttl:g}{', read_only=True' if self._read_only else ''})"
        )

    @property
    def read_only(self) -> bool:
        """Whether this store was opened to read only (it then writes nothing at all)."""
        return self._read_only

    @property
    def capabilities(self) -> Capabilities:
        """Per-key expiry; expiry reaches watchers on nats-server 2.11+ only."""
        return self._capabilities

    @property
    def ephemeral_ttl(self) -> float:
        """TTL in seconds of the ephemeral keyspace (the ephemeral bucket's max_age)."""
        return self._options.ttl

    @property
    def recorded_ttl(self) -> float | None:
        """The namespace's TTL (its ephemeral bucket's max_age); None while it has no bucket."""
        ephemeral = self._buckets.get(Keyspace.EPHEMERAL)
        return ephemeral.max_age if ephemeral is not None else None

    @property
    def namespace(self) -> str:
        """The namespace this store reads and writes."""
        return self._options.namespace

    @property
    def connection(self) -> NatsConnection:
        """The underlying NATS connection (open stores only)."""
        if self._conn is None:
            raise StoreError(f"{self!r} is not open; use it as `async with store:`")
        return self._conn

    def bucket(self, keyspace: Keyspace) -> Bucket:
        """The KV bucket behind ``keyspace`` (open stores only)."""
        return self._bucket(keyspace)

    async def __aenter__(self) -> NatsStore:
        """Connect and prepare both buckets.

        Raises StoreUnavailable if the server is unreachable and StoreError if it refuses
        the credentials or the namespace's buckets do not fit (another TTL, say).
        """
        if self._stack is not None or self._closed:
            raise StoreError(f"{self!r} was already opened; make a new store")
        options = self._options
        async with AsyncExitStack() as stack:
            conn = await stack.enter_async_context(NatsConnection(options.connect))
            js = JetStream(conn)
            buckets: dict[Keyspace, Bucket] = {}
            for keyspace in Keyspace:
                name = bucket_name(options.namespace, keyspace)
                if self._read_only:
                    found = await find_bucket(js, name, keyspace)
                    if found is not None:
                        buckets[keyspace] = found
                    continue
                buckets[keyspace] = await ensure_bucket(
                    js,
                    name,
                    keyspace,
                    options.ttl,
                    options.namespace,
                    options.replicas,
                    adopt_ttl=options.adopt_ttl,
                )
            self._stack = stack.pop_all()
        ephemeral = buckets.get(Keyspace.EPHEMERAL)
        if ephemeral is not None and ephemeral.max_age and ephemeral.max_age != options.ttl:
            # Adopted from the namespace (a URL without ttl, or a read-only store).
            self._options = attrs.evolve(options, ttl=ephemeral.max_age)
            if self._fixed_heartbeat is None:
                self._heartbeat = _heartbeat_for(ephemeral.max_age)
        self._conn, self._js, self._buckets = conn, js, buckets
        self._capabilities = Capabilities(
            system="nats",
            ephemeral=EphemeralSemantics.PER_KEY,
            expiry_reaches_watchers=ephemeral is not None and ephemeral.expiry_markers,
            max_value_size=conn.max_payload - HEADER_OVERHEAD,
            expiry_slack=EXPIRY_SLACK,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the connection; open watches end with StoreUnavailable."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store (idempotent); later calls raise StoreError."""
        self._closed = True
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def release_namespace(self) -> bool:
        """Delete the namespace's two buckets if they hold no key (True if they were deleted).

        What ``spate delete`` calls after removing a namespace's last job: the buckets (and
        the TTL the ephemeral one was made with) go, and the next store opened on the
        namespace makes them anew. A namespace with any key keeps them.
        """
        for keyspace in Keyspace:
            self._writable_bucket(keyspace, "releasing the namespace")
            if await self.list(keyspace, ""):
                return False
        js = self._jetstream()
        for keyspace in Keyspace:
            try:
                await js.api(f"STREAM.DELETE.{self._buckets[keyspace].stream}")
            except ApiError as exc:
                raise exc.translate() from None
        self._buckets = {}  # this store can no longer write: its buckets are gone
        return True

    # -- helpers ---------------------------------------------------------------------------

    def _bucket(self, keyspace: Keyspace) -> Bucket:
        bucket = self._existing_bucket(keyspace)
        if bucket is None:
            raise StoreError(
                f"{self!r} was opened read-only and namespace {self.namespace!r} has no "
                f"{keyspace.value} bucket yet, so there is nothing to watch"
            )
        return bucket

    def _existing_bucket(self, keyspace: Keyspace) -> Bucket | None:
        """The keyspace's bucket; None only on a read-only store whose namespace lacks it."""
        if self._closed:
            raise StoreError(f"{self!r} is closed; open a new store to keep working.")
        if self._js is None:
            raise StoreError(f"{self!r} is not open; use it as `async with store:`")
        if not isinstance(keyspace, Keyspace):
            raise StoreError(f"unknown keyspace {keyspace!r}; use spate.store.Keyspace")
        return self._buckets.get(keyspace)

    def _writable_bucket(self, keyspace: Keyspace, doing: str) -> Bucket:
        bucket = self._existing_bucket(keyspace)
        if self._read_only:
            raise read_only_refusal(self, doing)
        if bucket is None:
            raise StoreError(
                f"{self!r} released namespace {self.namespace!r} (its buckets were deleted), "
                f"so {doing} is refused; open a new store to use the namespace again"
            )
        return bucket

    def _jetstream(self) -> JetStream:
        assert self._js is not None
        return self._js

    def _check_value(self, key: str, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise StoreError(f"value for key {key!r} must be bytes, not {type(value).__name__}")
        limit = self._capabilities.max_value_size
        if len(value) > limit:
            raise errors.value_too_large(key, len(value), limit)
        return bytes(value)

    async def _last(self, bucket: Bucket, key: str) -> StoredMessage | None:
        subject = bucket.subject_prefix + encode_key(key)
        return await self._jetstream().last_message(bucket.stream, subject, direct=bucket.direct)

    async def _write(self, bucket: Bucket, key: str, value: bytes, headers: bytes) -> int:
        try:
            return await self._jetstream().publish(
                bucket.subject_prefix + encode_key(key), value, headers
            )
        except ApiError as exc:
            raise exc.translate() from None

    # -- the contract ----------------------------------------------------------------------

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """The key's entry, or None if it does not exist (deleted and expired keys included)."""
        validate_key(key)
        bucket = self._existing_bucket(keyspace)
        if bucket is None:
            return None  # a read-only store of a namespace never written
        message = await self._last(bucket, key)
        if message is None or message.tombstone:
            return None
        return Entry(key, message.payload, message.sequence)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Every entry under ``prefix``, sorted by key, from one ordered consumer's snapshot."""
        validate_prefix(prefix)
        bucket = self._existing_bucket(keyspace)
        if bucket is None:
            return []  # a read-only store of a namespace never written
        watch = self._key_watch(bucket, keyspace, prefix)
        try:
            await watch.start()
            return await watch.snapshot()
        finally:
            await watch.aclose()

    @asynccontextmanager
    async def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        """Every entry under ``prefix``, ``page_size`` at a time, from one ordered consumer.

        The consumer is the one :meth:`list` uses, but each page is handed out as soon as it
        is full, so the client holds about a page (flow control stalls the server while the
        caller holds one). Pages come in revision order, each sorted by key; they are not one
        snapshot: a key rewritten after its page was handed out comes again, at its greater
        revision. The consumer is created on the first page and deleted when the block ends.
        """
        validate_prefix(prefix)
        validate_page_size(page_size)
        if self._existing_bucket(keyspace) is None:
            yield _no_pages()  # a read-only store of a namespace never written
            return
        # No resume window: a paged listing's consumer starts over when recreated (see
        # KeyWatch), so expired entries aging out of the stream meanwhile lose nothing.
        watch = self._key_watch(
            self._bucket(keyspace), keyspace, prefix, page_size=page_size, resume_window=False
        )

        async def pages() -> AsyncGenerator[builtins.list[Entry], None]:
            await watch.start()
            while (page := await watch.next_page()) is not None:
                yield page

        try:
            async with aclosing(pages()) as iterator:
                yield iterator
        finally:
            await watch.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[KeySession]:
        """A light session handle: entries keep their per-key TTL (the bucket's max_age)."""
        self._writable_bucket(Keyspace.EPHEMERAL, "opening a session")
        session = KeySession(self)
        try:
            yield session
        finally:
            session.end()

    def _check_session(self, keyspace: Keyspace, session: Session | None) -> None:
        if keyspace is Keyspace.EPHEMERAL:
            check_session(session, self)

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Create-if-absent, also over a deleted or expired key's tombstone."""
        validate_key(key)
        value = self._check_value(key, value)
        bucket = self._writable_bucket(keyspace, f"creating {key!r}")
        self._check_session(keyspace, session)
        expected = 0
        for _ in range(_MAX_ATTEMPTS):
            try:
                sequence = await self._write(bucket, key, value, expect_sequence(expected))
            except WrongLastSequence:
                current = await self._last(bucket, key)
                if current is not None and not current.tombstone:
                    return Conflict()
                # Absent (its tombstone aged out meanwhile) or a tombstone: expect exactly
                # that, so a concurrent create still makes this one lose.
                expected = 0 if current is None else current.sequence
                continue
            return Won(sequence)
        raise errors.create_kept_racing(key, _MAX_ATTEMPTS)

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """Compare-and-swap on the key's revision (restarts an ephemeral key's TTL)."""
        validate_key(key)
        value = self._check_value(key, value)
        bucket = self._writable_bucket(keyspace, f"updating {key!r}")
        self._check_session(keyspace, session)
        if not isinstance(expected, int) or expected < 1:
            return Conflict()
        try:
            sequence = await self._write(bucket, key, value, expect_sequence(expected))
        except WrongLastSequence:
            return Conflict()
        return Won(sequence)

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delete (leaving a tombstone), guarded by ``expected`` when given."""
        validate_key(key)
        bucket = self._writable_bucket(keyspace, f"deleting {key!r}")
        if expected is not None:
            return await self._delete_at(bucket, key, expected)
        for _ in range(_MAX_ATTEMPTS):
            current = await self._last(bucket, key)
            if current is None or current.tombstone:
                return Conflict()
            result = await self._delete_at(bucket, key, current.sequence)
            if isinstance(result, Won):
                return result
        raise errors.delete_kept_racing(key, _MAX_ATTEMPTS)

    async def _delete_at(self, bucket: Bucket, key: str, expected: Revision) -> WriteResult:
        if not isinstance(expected, int) or expected < 1:
            return Conflict()
        try:
            return Won(await self._write(bucket, key, b"", expect_sequence(expected, delete=True)))
        except WrongLastSequence:
            return Conflict()

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        """Snapshot, SnapshotDone, then live events in revision order (see the contract).

        With ``exact=True`` the consumer filters on the key's own subject, so the server
        sends only that key's messages (a prefix ending inside a token is filtered here,
        after the server sent every message under its last whole token).
        """
        if exact:
            validate_key(prefix)
        else:
            validate_prefix(prefix)
        return self._watch(self._bucket(keyspace), keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, bucket: Bucket, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        watch = self._key_watch(bucket, keyspace, prefix, exact=exact)
        await watch.start()
        try:
            yield watch
        finally:
            await watch.aclose()

    def _key_watch(
        self,
        bucket: Bucket,
        keyspace: Keyspace,
        prefix: str,
        *,
        exact: bool = False,
        page_size: int | None = None,
        resume_window: bool = True,
    ) -> KeyWatch:
        ttl = self._options.ttl
        return KeyWatch(
            self.connection,
            self._jetstream(),
            bucket,
            prefix,
            heartbeat=self._heartbeat,
            resume_window=(
                0.75 * ttl if resume_window and keyspace is Keyspace.EPHEMERAL else None
            ),
            timeout=self._options.connect.timeout,
            exact=exact,
            page_size=page_size,
        )


async def _no_pages() -> AsyncGenerator[builtins.list[Entry], None]:
    return
    yield  # pragma: no cover (makes this an async generator)


def store_from_url(url: str, *, read_only: bool = False) -> NatsStore:
    """The NATS store a URL describes (not yet connected); used by ``open_store``."""
    return NatsStore.from_url(url, read_only=read_only)
