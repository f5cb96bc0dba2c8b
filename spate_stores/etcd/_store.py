"""EtcdStore: the store contract on etcd v3 through its JSON gateway."""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from typing import Any

import attrs
import trio

from spate import StoreError, StoreUnavailable
from spate.store import (
    Capabilities,
    Conflict,
    Create,
    Entry,
    EphemeralSemantics,
    Keyspace,
    Remove,
    Revision,
    Session,
    WatchEvent,
    Won,
    Write,
    WriteResult,
    check_writes,
    validate_key,
    validate_page_size,
    validate_prefix,
)
from spate_stores._namespace import read_only_refusal
from spate_stores._service_nursery import open_service_nursery
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._config import (
    DEFAULT_EPHEMERAL_TTL,
    MAX_TTL,
    MIN_TTL,
    TXN_OVERHEAD,
    EtcdConfig,
    KeyLayout,
)
from spate_stores.etcd._gateway import Gateway, ReplyError
from spate_stores.etcd._session import EtcdLeaseSession
from spate_stores.etcd._watch import WatchIterator, open_watch_stream
from spate_stores.etcd._wire import (
    ErrorKind,
    Kv,
    delete_range,
    deleted_count,
    each_succeeded,
    etcd_lease_grant,
    etcd_lease_id,
    etcd_lease_revoke,
    etcd_lease_ttl,
    header_revision,
    parse_kvs,
    prefix_end,
    range_request,
    txn_create,
    txn_delete,
    txn_delete_existing,
    txn_each,
    txn_put_if,
    txn_succeeded,
)

__all__ = ["EXPIRY_SLACK", "EtcdStore"]

log = logging.getLogger("spate.stores.etcd")

EXPIRY_SLACK = 1.0
"""Seconds past the TTL within which a dead session's keys are gone and their Delete sent.

etcd checks for expired etcd leases every 500 ms and deletes their keys in one raft proposal.
"""
_PAGE = 500
MAX_BATCH = 64
"""The most writes one ``write_many`` txn carries (etcd's ``--max-txn-ops``, 128 by
default, bounds the nested txns of one txn)."""
_LIST_ATTEMPTS = 3

_TxnBuilder = Callable[[int], dict[str, Any]]


class _Compacted(Exception):
    """A listing's pinned revision was compacted away between two of its pages."""

    def __init__(self, revision: int) -> None:
        super().__init__(revision)
        self.revision = revision


class EtcdStore:
    """The store contract on etcd v3 through its HTTP/JSON gateway.

    Open it with ``spate_stores.open_store("etcd://host:2379/my-job?ttl=10")`` or
    ``EtcdStore(EtcdConfig(...))`` / :meth:`from_url`, then enter it (``async with``). It
    owns one pooled httpx client for unary calls, a background task keeping its session
    etcd lease alive, and one stream per open watch.

    Ephemeral keys have *session* semantics: each :meth:`session` is one etcd lease, kept
    alive over its own WebSocket; a key lives while the session that last wrote it lives and
    is gone within the TTL after it stops (at once when it ends: the etcd lease is revoked),
    even while this client stays open. Writes that name no session use the client's default
    etcd lease, which lives as long as the client. Revisions are etcd mod_revisions.

    With ``read_only=True`` the store writes nothing at all: entering records no TTL and
    grants no etcd lease (the namespace's TTL is adopted if it has one, whatever the URL says),
    and every write or session is refused with StoreError. Operator tools that only look
    open it so.
    """

    def __init__(self, config: EtcdConfig, *, read_only: bool = False) -> None:
        self._config = config
        self._read_only = read_only
        self._layout = KeyLayout(config.namespace)
        self._gateway = Gateway(config)
        self._ttl = int(config.ephemeral_ttl or DEFAULT_EPHEMERAL_TTL)
        self._session: EtcdLeaseSession | None = None
        # A recorded TTL etcd cannot grant (written by an older spate): the store still opens
        # so that `spate reset-ttl` can clear it, but refuses every etcd lease with this.
        self._ungrantable: StoreError | None = None
        self._recorded: float | None = None
        self._capabilities = Capabilities(
            system="etcd",
            ephemeral=EphemeralSemantics.SESSION,
            expiry_reaches_watchers=True,
            max_value_size=self._layout.max_value_size(config.max_request_bytes),
            expiry_slack=EXPIRY_SLACK,
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        ttl: float | None = None,
        read_only: bool = False,
    ) -> EtcdStore:
        """A store for an ``etcd://`` / ``etcd+https://`` URL (see docs/stores/etcd.md).

        ``namespace`` and ``ttl`` (seconds), when given, override the URL's; the same shape
        as every adapter's ``from_url``. ``read_only``: see the class. Raises ConfigError for
        a malformed URL.
        """
        config = EtcdConfig.from_url(url)
        if namespace is not None:
            config = attrs.evolve(config, namespace=namespace)
        if ttl is not None:
            config = attrs.evolve(config, ephemeral_ttl=ttl)
        return cls(config, read_only=read_only)

    def __repr__(self) -> str:
        user = f", user={self._config.username!r}" if self._config.username else ""
        mode = ", read_only=True" if self._read_only else ""
        return (
            f"EtcdStore(endpoint={self._config.endpoint!r}, "
            f"namespace={self._config.namespace!r}{user}{mode})"
        )

    @property
    def read_only(self) -> bool:
        """Whether this store was opened to read only (it then writes nothing at all)."""
        return self._read_only

    @property
    def config(self) -> EtcdConfig:
        """The connection settings (the password is hidden from its repr)."""
        return self._config

    @property
    def capabilities(self) -> Capabilities:
        """Session semantics, expiry reaches watchers, the value limit of the request size."""
        return self._capabilities

    @property
    def ephemeral_ttl(self) -> float:
        """The namespace's ephemeral TTL (adopted from the namespace when the URL gave none)."""
        return float(self._ttl)

    @property
    def recorded_ttl(self) -> float | None:
        """The TTL the namespace recorded when this store opened (None: it recorded none)."""
        return self._recorded

    @property
    def lease_id(self) -> int | None:
        """The client's default etcd lease's id (writes naming no session; None before one)."""
        return self._session.etcd_lease_id if self._session else None

    @property
    def lease_losses(self) -> int:
        """How many etcd leases this client's session lost while open (each replaced)."""
        return self._session.losses if self._session else 0

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> EtcdStore:
        """Connect, sign in, check the namespace's TTL, start the etcd lease keepalive."""
        if self._stack is not None or self._closed:
            raise StoreError(f"{self!r} was already opened; make a new store object")
        stack = contextlib.AsyncExitStack()
        try:
            await self._gateway.open()
            stack.push_async_callback(self._gateway.aclose)
            if self._read_only:
                await self._adopt_ttl()
                self._stack = stack
                return self
            await self._bind_ttl()
            self._session = EtcdLeaseSession(self._gateway, self._ttl, replace_lost=True)
            stack.push_async_callback(self._session.close)
            # The keepalive and watch pumps serve the store until it closes, not only until
            # the code around it is cancelled: a graceful leave still needs its watches.
            self._nursery = await stack.enter_async_context(open_service_nursery())
            self._nursery.start_soon(self._session.run)
        except BaseException:
            with trio.CancelScope(shield=True):
                await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the keepalive, revoke the session etcd lease (its keys go now), close."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store: ends the session and every open watch. Idempotent."""
        self._closed = True
        stack, self._stack = self._stack, None
        if stack is None:
            return
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        # Exit the stack as if no exception were in flight: the caller's own exception
        # must propagate as it is, not wrapped in an ExceptionGroup by the nursery. (No
        # shield here: the nursery must be exited directly from the scope it was opened
        # in; the revoke and the client close shield themselves.)
        await stack.aclose()
        self._nursery = None

    async def _adopt_ttl(self) -> None:
        """Read the namespace's TTL, if it has one, without checking or recording any."""
        current = await self._get_raw(self._layout.ttl_key, doing="reading the namespace's TTL")
        if current is not None:
            try:
                self._ttl = int(current.value.decode())
                self._recorded = float(self._ttl)
            except ValueError:
                pass  # a reader needs no TTL; a writer's open says what is wrong with it

    async def _bind_ttl(self) -> None:
        key = self._layout.ttl_key
        wanted = self._config.ephemeral_ttl
        for _ in range(3):
            current = await self._get_raw(key, doing="reading the namespace's TTL")
            if current is not None:
                try:
                    recorded = int(current.value.decode())
                except ValueError:
                    raise errors.ttl_record_unreadable(
                        self._config.namespace, current.value, key.decode()
                    ) from None
                if not MIN_TTL <= recorded <= MAX_TTL:
                    self._ungrantable = errors.ttl_record_ungrantable(
                        self._config.namespace, recorded, MIN_TTL, MAX_TTL
                    )
                    if wanted is not None:
                        raise self._ungrantable
                if wanted is not None and recorded != int(wanted):
                    raise errors.ttl_mismatch(self._config.namespace, recorded, int(wanted))
                self._ttl = recorded
                self._recorded = float(recorded)
                return
            ttl = int(wanted or DEFAULT_EPHEMERAL_TTL)
            await self._check_grantable(ttl)
            reply = await self._gateway.call(
                "/v3/kv/txn",
                txn_create(key, str(ttl).encode()),
                doing="recording the namespace's TTL",
            )
            if txn_succeeded(reply):
                self._ttl = ttl
                self._recorded = float(ttl)
                return
        raise errors.ttl_record_unstable(self._config.namespace)

    async def _check_grantable(self, ttl: int) -> None:
        """Grant (and revoke) one etcd lease of ``ttl`` before a new namespace records it.

        etcd rounds a TTL below its minimum up without a word, and that minimum grows with the
        server's election timeout (1.5 election timeouts, whole seconds: 2 s by default, 8 s
        with --election-timeout=5000): a namespace recorded with a TTL the server will not
        grant as asked could open but never write an ephemeral key. Raises ConfigError,
        writing nothing.
        """
        doing = "checking that etcd grants the namespace's TTL"
        reply = await self._gateway.call("/v3/lease/grant", etcd_lease_grant(ttl), doing=doing)
        etcd_lease, granted = etcd_lease_id(reply), etcd_lease_ttl(reply)
        if etcd_lease:
            with trio.CancelScope(shield=True), trio.move_on_after(self._config.timeout):
                try:
                    await self._gateway.call(
                        "/v3/lease/revoke", etcd_lease_revoke(etcd_lease), doing=doing
                    )
                except (StoreError, StoreUnavailable, ReplyError):
                    pass  # it holds no key and nothing keeps it alive: it expires on its own
        if granted != ttl:
            raise errors.ttl_not_granted(
                self._gateway.endpoint, ttl, granted, self._config.namespace
            )

    async def release_namespace(self) -> bool:
        """Forget the namespace's TTL if it holds no key (True if it was forgotten).

        What ``spate delete`` calls after removing a namespace's last job, so the next store
        opened on it sets the TTL anew. A namespace with any key keeps its TTL.
        """
        self._check_open(Keyspace.DURABLE)
        self._check_writable("releasing the namespace")
        for keyspace in Keyspace:
            async with aclosing(self._range_pages(keyspace, "", 1)) as pages:
                async for page, _ in pages:
                    if page:
                        return False
        record = await self._get_raw(self._layout.ttl_key, doing="reading the namespace's TTL")
        if record is None:
            return False
        doing = "forgetting the namespace's TTL"
        reply = await self._call_txn(txn_delete(self._layout.ttl_key, record.mod_revision), doing)
        return txn_succeeded(reply)

    # -- helpers -----------------------------------------------------------------------

    def _check_writable(self, doing: str) -> None:
        if self._read_only:
            raise read_only_refusal(self, doing)

    def _check_open(self, keyspace: Keyspace) -> None:
        if self._stack is None:
            state = "closed" if self._closed else "not open yet (use async with)"
            raise StoreError(f"{self!r} is {state}")
        if not isinstance(keyspace, Keyspace):
            raise StoreError(f"unknown keyspace {keyspace!r}; use spate.store.Keyspace")

    def _value(self, key: str, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise StoreError(f"value for key {key!r} must be bytes, not {type(value).__name__}")
        data = bytes(value)
        if len(data) > self._capabilities.max_value_size:
            raise errors.value_too_large(key, len(data), self._capabilities.max_value_size)
        return data

    async def _get_raw(self, key: bytes, *, doing: str) -> Kv | None:
        reply = await self._gateway.call("/v3/kv/range", range_request(key), doing=doing)
        kvs, _ = parse_kvs(reply)
        return kvs[0] if kvs else None

    async def _range_all(self, keyspace: Keyspace, prefix: str) -> tuple[list[Entry], int]:
        """Every entry under ``prefix`` and the revision they were read at (for list, watch)."""
        for _ in range(_LIST_ATTEMPTS):
            entries: list[Entry] = []
            revision = 0
            try:
                async with aclosing(self._range_pages(keyspace, prefix, _PAGE)) as pages:
                    async for page, read_at in pages:
                        entries += page
                        revision = read_at
            except _Compacted:
                # The pinned revision was compacted between pages; nothing was handed out
                # yet, so list again from now.
                continue
            return entries, revision
        raise errors.compacted_during_listing(self._config.endpoint)

    async def _range_pages(
        self, keyspace: Keyspace, prefix: str, limit: int
    ) -> AsyncGenerator[tuple[list[Entry], int], None]:
        """``prefix`` in key order, one range request of ``limit`` keys per page.

        Yields each page with the revision it was read at: the first page's, since every
        later page is pinned to it, so the pages together are one consistent snapshot. The
        first page may be empty (nothing under the prefix); no later one is, because a page
        follows only when etcd said ``more``. Raises _Compacted when the pinned revision is
        compacted away between pages (the first page, unpinned, never is).
        """
        start = self._layout.key(keyspace, prefix)
        end = prefix_end(start)
        revision = 0
        key = start
        while True:
            try:
                reply = await self._gateway.call(
                    "/v3/kv/range",
                    range_request(key, range_end=end, limit=limit, revision=revision),
                    doing="listing",
                )
            except ReplyError as exc:
                if exc.error.kind is ErrorKind.COMPACTED:
                    raise _Compacted(revision) from None
                raise self._unexpected(exc, "listing") from None
            revision = revision or header_revision(reply)
            kvs, more = parse_kvs(reply)
            yield (
                [
                    Entry(self._layout.store_key(keyspace, kv.key), kv.value, kv.mod_revision)
                    for kv in kvs
                ],
                revision,
            )
            if not (more and kvs):
                return
            key = kvs[-1].key + b"\x00"

    async def _range_one(self, key: str, raw: bytes) -> tuple[list[Entry], int]:
        """The entry of one key (0 or 1) and the revision it was read at."""
        doing = f"reading {key!r} to watch it"
        try:
            reply = await self._gateway.call("/v3/kv/range", range_request(raw), doing=doing)
        except ReplyError as exc:  # unpinned, so never compacted; nothing else passes through
            raise self._unexpected(exc, doing) from None
        kvs, _ = parse_kvs(reply)
        # A range with no range_end matches its key exactly; the check is defensive.
        entries = [Entry(key, kv.value, kv.mod_revision) for kv in kvs if kv.key == raw]
        return entries, header_revision(reply)

    def _unexpected(self, exc: ReplyError, doing: str) -> StoreError:
        return errors.refused(self._config.endpoint, doing, exc.error.message)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[EtcdLeaseSession]:
        """One etcd lease for one coordinator: granted now, kept alive, revoked at the end.

        Its keepalive runs on its own WebSocket and stops the moment the block ends; the
        etcd lease is then revoked (within the client's timeout; failing that it expires
        within the TTL). Raises StoreUnavailable when etcd cannot grant an etcd lease.
        """
        self._check_open(Keyspace.EPHEMERAL)
        self._check_writable("opening a session")
        if self._ungrantable is not None:
            raise self._ungrantable
        assert self._nursery is not None
        session = EtcdLeaseSession(self._gateway, self._ttl)
        keepalive = trio.CancelScope()

        async def keep_alive() -> None:
            with keepalive:
                await session.run()

        try:
            await session.start()
            self._nursery.start_soon(keep_alive)
            yield session
        finally:
            keepalive.cancel()
            await session.close()

    def _etcd_lease_session(self, session: Session | None) -> EtcdLeaseSession:
        if self._ungrantable is not None:
            raise self._ungrantable
        if session is None:
            assert self._session is not None
            return self._session
        if not isinstance(session, EtcdLeaseSession) or session.gateway is not self._gateway:
            raise StoreError(
                f"{self!r} cannot use the session {session!r}: pass a session this client "
                "opened (store.session())"
            )
        return session

    async def _put_txn(
        self, etcd_session: EtcdLeaseSession | None, build: _TxnBuilder, doing: str
    ) -> dict[str, Any]:
        """Send the txn ``build`` makes for the session's etcd lease (no session: durable, 0)."""
        if etcd_session is None:
            return await self._call_txn(build(0), doing)
        for attempt in range(2):
            etcd_lease = await etcd_session.etcd_lease()
            try:
                return await self._call_txn(build(etcd_lease), doing)
            except ReplyError as exc:
                if exc.error.kind is not ErrorKind.ETCD_LEASE_NOT_FOUND or attempt == 1:
                    raise self._unexpected(exc, doing) from None
                # Refused for its etcd lease, so not applied: safe to retry on a new one
                # (the default session grants one; a coordinator's raises SessionLost).
                etcd_session.invalidate(etcd_lease, "etcd refused a write naming it")
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _txn_write(
        self, keyspace: Keyspace, build: _TxnBuilder, doing: str, session: Session | None
    ) -> WriteResult:
        etcd_session = None if keyspace is Keyspace.DURABLE else self._etcd_lease_session(session)
        reply = await self._put_txn(etcd_session, build, doing)
        if txn_succeeded(reply):
            return Won(header_revision(reply))
        return Conflict()

    async def _call_txn(self, body: dict[str, Any], doing: str) -> dict[str, Any]:
        return await self._gateway.call("/v3/kv/txn", body, doing=doing)

    # -- the contract ------------------------------------------------------------------

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """The entry for ``key`` (a linearizable read), or None."""
        validate_key(key)
        self._check_open(keyspace)
        kv = await self._get_raw(self._layout.key(keyspace, key), doing=f"reading {key!r}")
        return Entry(key, kv.value, kv.mod_revision) if kv else None

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Every entry under ``prefix``, sorted by key, from one revision."""
        validate_prefix(prefix)
        self._check_open(keyspace)
        entries, _ = await self._range_all(keyspace, prefix)
        return entries

    @asynccontextmanager
    async def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        """Every entry under ``prefix`` in key order, ``page_size`` per range request.

        Every page is read at the first page's revision, so the pages together are one
        snapshot. etcd holds nothing for a listing between requests (no cursor), so leaving
        early frees nothing on the server. When that revision is compacted before the last
        page, the iterator raises StoreUnavailable: pages already handed out cannot be taken
        back, so the caller lists again.
        """
        validate_prefix(prefix)
        validate_page_size(page_size)
        self._check_open(keyspace)
        async with aclosing(self._pages_of(keyspace, prefix, page_size)) as pages:
            yield pages

    async def _pages_of(
        self, keyspace: Keyspace, prefix: str, page_size: int
    ) -> AsyncGenerator[builtins.list[Entry], None]:
        handed_out = 0
        try:
            async with aclosing(self._range_pages(keyspace, prefix, page_size)) as pages:
                async for page, _ in pages:
                    # Only the first page can be empty (nothing under the prefix): no page then.
                    # A full page with etcd's `more` unset is the last: the iterator just stops.
                    if page:
                        handed_out += 1
                        yield page
        except _Compacted as exc:
            raise errors.compacted_during_paged_listing(
                self._config.endpoint, exc.revision, handed_out
            ) from None

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Create-if-absent (a txn comparing create_revision with 0)."""
        validate_key(key)
        data = self._value(key, value)
        self._check_open(keyspace)
        self._check_writable(f"creating {key!r}")
        raw = self._layout.key(keyspace, key)
        return await self._txn_write(
            keyspace,
            lambda etcd_lease: txn_create(raw, data, etcd_lease=etcd_lease),
            f"creating {key!r}",
            session,
        )

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """Compare-and-swap on the key's mod_revision."""
        validate_key(key)
        data = self._value(key, value)
        self._check_open(keyspace)
        self._check_writable(f"updating {key!r}")
        if not isinstance(expected, int) or expected <= 0:
            # No key is at such a revision (and etcd's MOD == 0 would match a missing key).
            return Conflict()
        raw = self._layout.key(keyspace, key)
        return await self._txn_write(
            keyspace,
            lambda etcd_lease: txn_put_if(raw, data, expected, etcd_lease=etcd_lease),
            f"updating {key!r}",
            session,
        )

    @property
    def max_batch(self) -> int:
        """The most writes one :meth:`write_many` txn carries."""
        return MAX_BATCH

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Conditional writes in one txn of nested txns, each landing or losing on its own.

        They land at one revision; the ephemeral ones on ``session``'s etcd lease. More than
        ``max_batch`` writes, or writes whose values together exceed the server's request
        limit, go in several txns, sent at once.
        """
        self._check_open(Keyspace.DURABLE)
        self._check_writable(f"writing {len(writes)} keys")
        check_writes(writes)
        etcd_session = (
            self._etcd_lease_session(session)
            if any(write.keyspace is Keyspace.EPHEMERAL for write in writes)
            else None
        )
        results: list[WriteResult | StoreError] = [Conflict()] * len(writes)
        chunks: list[list[tuple[int, _TxnBuilder]]] = []
        room = 0
        for i, write in enumerate(writes):
            try:
                prepared = self._prepare(write)
            except StoreError as exc:
                results[i] = exc
                continue
            if prepared is None:
                continue  # it can only lose
            build, cost = prepared
            if not chunks or cost > room or len(chunks[-1]) == MAX_BATCH:
                chunks.append([])
                room = self._config.max_request_bytes
            chunks[-1].append((i, build))
            room -= cost

        async def send(chunk: list[tuple[int, _TxnBuilder]]) -> None:
            doing = f"writing {len(chunk)} keys together"
            reply = await self._put_txn(
                etcd_session,
                lambda etcd_lease: txn_each([build(etcd_lease) for _, build in chunk]),
                doing,
            )
            held = each_succeeded(reply, len(chunk))
            if held is None:
                raise StoreError(
                    f"etcd answered a txn of {len(chunk)} nested txns with {reply!r}, not one "
                    "result each; is this etcd 3.3 or later?"
                )
            revision = header_revision(reply)
            for (i, _), won in zip(chunk, held, strict=True):
                results[i] = Won(revision) if won else Conflict()

        if len(chunks) == 1:
            await send(chunks[0])
        elif chunks:
            async with trio.open_nursery() as nursery:
                for chunk in chunks:
                    nursery.start_soon(send, chunk)
        return results

    def _prepare(self, write: Write) -> tuple[_TxnBuilder, int] | None:
        """One write of a group as a nested txn (given the etcd lease) and its size, or None.

        None: it can only lose (a revision <= 0). StoreError: refused on its own.
        """
        validate_key(write.key)
        self._check_open(write.keyspace)
        raw = self._layout.key(write.keyspace, write.key)
        ephemeral = write.keyspace is Keyspace.EPHEMERAL
        if isinstance(write, Remove):
            if write.expected is None:
                return (lambda etcd_lease: txn_delete_existing(raw)), 2 * len(raw) + TXN_OVERHEAD
            if not isinstance(write.expected, int) or write.expected <= 0:
                return None
            expected = write.expected
            return (lambda etcd_lease: txn_delete(raw, expected)), 2 * len(raw) + TXN_OVERHEAD
        data = self._value(write.key, write.value)
        cost = len(data) + 2 * len(raw) + TXN_OVERHEAD
        if isinstance(write, Create):
            return (
                lambda etcd_lease: txn_create(raw, data, etcd_lease=etcd_lease if ephemeral else 0)
            ), cost
        if not isinstance(write.expected, int) or write.expected <= 0:
            return None
        revision = write.expected
        return (
            lambda etcd_lease: txn_put_if(
                raw, data, revision, etcd_lease=etcd_lease if ephemeral else 0
            )
        ), cost

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delete ``key``, guarded by its mod_revision when ``expected`` is given."""
        validate_key(key)
        self._check_open(keyspace)
        self._check_writable(f"deleting {key!r}")
        raw = self._layout.key(keyspace, key)
        doing = f"deleting {key!r}"
        if expected is None:
            reply = await self._gateway.call("/v3/kv/deleterange", delete_range(raw), doing=doing)
            return Won(header_revision(reply)) if deleted_count(reply) else Conflict()
        if not isinstance(expected, int) or expected <= 0:
            return Conflict()
        reply = await self._call_txn(txn_delete(raw, expected), doing)
        return Won(header_revision(reply)) if txn_succeeded(reply) else Conflict()

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        """List ``prefix`` at revision R, then stream events from R + 1 (see the contract).

        With ``exact=True`` both the read and the watch name the one key (no ``range_end``),
        so etcd sends nothing about any other key.
        """
        if exact:
            validate_key(prefix)
        else:
            validate_prefix(prefix)
        return self._watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[WatchIterator]:
        self._check_open(keyspace)
        assert self._nursery is not None
        start = self._layout.key(keyspace, prefix)
        if exact:
            snapshot, revision = await self._range_one(prefix, start)
            end = None
        else:
            snapshot, revision = await self._range_all(keyspace, prefix)
            end = prefix_end(start)
        async with open_watch_stream(
            self._gateway, self._nursery, start, end, revision + 1
        ) as source:
            yield WatchIterator(snapshot, revision, source, self._layout, keyspace, self._gateway)
