"""The store contract: everything the coordination protocol needs from a store, and nothing more.

This module is the specification store adapter authors implement. An adapter is any object
that satisfies :class:`Store` (a structural protocol: no base class is required). The
conformance suite in :mod:`spate_testing.conformance` holds an adapter to every sentence below.

Keys and values
    Keys are ``str`` made of ``[A-Za-z0-9._-]`` (see :func:`validate_key`); values are
    ``bytes`` of any content, up to :attr:`Capabilities.max_value_size`. A store-level
    namespace (chosen when the store is opened) isolates tenants: two stores opened on
    different namespaces never see each other's keys, and an adapter may use ``/``
    internally to separate its namespace from the key.

Keyspaces
    :attr:`Keyspace.DURABLE` keeps entries until they are deleted. :attr:`Keyspace.EPHEMERAL`
    bounds them by one TTL for the whole keyspace (:attr:`Store.ephemeral_ttl`, the job's
    lease duration), with the semantics the store declares in
    :attr:`Capabilities.ephemeral`. The two keyspaces are independent: the same key may exist
    in both with unrelated values and revisions.

Revisions
    Every entry carries a :data:`Revision`, an ``int > 0`` that strictly increases each time
    that key is written (a recreated key gets a larger revision than its previous life).
    Revisions compare within one keyspace of one store; they are the only guard the protocol
    uses, so compare-and-swap must be exact.

Sessions
    A coordinator opens one :class:`Session` on the store for its whole lifetime
    (:meth:`Store.session`, an async context manager) and names it in every ephemeral
    ``create`` and ``update``. When the session ends — its block is left, cancelled or
    raises, its process dies, or a partition outlasts the TTL — every ephemeral entry last
    written under it is gone within the TTL plus :attr:`Capabilities.expiry_slack`, *whether
    or not the store client stays open*: an application commonly keeps one client for its
    whole life and starts, stops and restarts workers inside it. Two sessions on one client
    are independent: ending one leaves the other's entries alone. A write naming an ended
    session is refused with :class:`~spate.StoreError` and not applied; a write naming
    a session the store has lost raises :class:`~spate.store.SessionLost` and is not applied.
    A write that names no session belongs to the client's own default session, which lives as
    long as the client (for tools and tests; the protocol always names its session).

Errors
    :class:`~spate.StoreUnavailable` for transient trouble (a write that raised it may
    or may not have landed) and :class:`~spate.StoreError` for permanent trouble (bad
    credentials, misconfiguration, :class:`~spate.ValueTooLarge`). Never a bare
    transport exception.
"""

from __future__ import annotations

import builtins
import enum
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import ClassVar, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from spate._errors import StoreError
from spate._quote import quote

__all__ = [
    "MAX_KEY_LENGTH",
    "BatchedWrites",
    "Capabilities",
    "Conflict",
    "Create",
    "Delete",
    "Entry",
    "EphemeralSemantics",
    "KeySession",
    "Keyspace",
    "Put",
    "Remove",
    "Revision",
    "Session",
    "SnapshotDone",
    "Store",
    "Swap",
    "WatchEvent",
    "Won",
    "Write",
    "WriteResult",
    "batched",
    "check_session",
    "check_writes",
    "max_batch_of",
    "validate_key",
    "validate_page_size",
    "validate_prefix",
]

Revision: TypeAlias = int
"""A per-key write counter: an ``int > 0`` that strictly increases on every write of a key."""

_KEY_RE = re.compile(r"[A-Za-z0-9._-]+")
MAX_KEY_LENGTH = 512
"""Longest key the protocol ever writes; adapters may accept longer ones."""


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid store key, else raise :class:`~spate.StoreError`.

    Valid keys are 1 to 512 characters of ``[A-Za-z0-9._-]`` (list/watch prefixes may also
    be empty).
    """
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key) or len(key) > MAX_KEY_LENGTH:
        raise StoreError(
            f"invalid store key {quote(key)}: keys are 1-{MAX_KEY_LENGTH} characters of "
            "[A-Za-z0-9._-]. Use split ids and job names that follow the documented rules."
        )
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty or a valid key, else raise StoreError."""
    if prefix == "":
        return prefix
    return validate_key(prefix)


def validate_page_size(page_size: int) -> int:
    """Return ``page_size`` if it is a whole number of at least 1, else raise StoreError."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise StoreError(
            f"page_size must be a whole number of entries, at least 1 (got {page_size!r})"
        )
    return page_size


class Keyspace(enum.Enum):
    """The two keyspaces of a store."""

    DURABLE = "durable"
    """Entries live until deleted."""
    EPHEMERAL = "ephemeral"
    """Entries are bounded by the store's TTL (see :class:`EphemeralSemantics`)."""

    # Members are singletons compared by identity: hashing by identity too keeps the
    # (keyspace, key) pairs the coordinator looks up on every write cheap (Enum's own hash is
    # a Python-level call).
    __hash__ = object.__hash__


class EphemeralSemantics(enum.Enum):
    """How an ephemeral entry's lifetime is bounded; each store declares one."""

    PER_KEY = "per-key"
    """An entry lives until at least TTL after its last successful create or update, then
    disappears (soon: within a small slack the store documents). Memory and NATS. A session
    is a light handle; the protocol renews each of its keys at a third of the TTL."""
    SESSION = "session"
    """An entry lives while the :class:`Session` that last wrote it is kept alive, and
    disappears within TTL plus slack after that session ends (closed, cancelled, its process
    dead, or cut off for longer than the TTL), even if the store client stays open. etcd:
    one lease per session. The protocol renews nothing per key: the session's keepalive
    keeps them all, and its starvation self-fence reads :attr:`Session.last_confirmed`."""


@attrs.frozen
class Capabilities:
    """What a store promises; the conformance suite holds it to exactly this."""

    system: str
    """Short name of the store system for telemetry (``"memory"``, ``"etcd"``, ``"nats"``)."""
    ephemeral: EphemeralSemantics
    """How ephemeral entries expire."""
    expiry_reaches_watchers: bool
    """Whether an expired ephemeral entry produces a :class:`Delete` on watches. When False the
    coordinator's periodic reconcile listing is what notices expiries."""
    max_value_size: int
    """Largest value in bytes the store accepts; larger values raise ValueTooLarge."""
    expiry_slack: float = 1.0
    """Seconds after its deadline within which an expired entry is gone (and, when
    ``expiry_reaches_watchers``, its Delete delivered)."""


@attrs.frozen
class Entry:
    """One stored key with its value and the revision of its last write."""

    key: str
    value: bytes
    revision: Revision


@attrs.frozen
class Won:
    """A conditional write applied; ``revision`` is the revision it produced.

    For a delete, ``revision`` is the store's revision of the deletion (it is only
    informative: the key no longer exists).
    """

    revision: Revision


@attrs.frozen
class Conflict:
    """A conditional write was not applied because its condition did not hold."""


WriteResult: TypeAlias = Won | Conflict
"""The outcome of a conditional write."""


@attrs.frozen
class Put:
    """A watch event: ``entry`` was created or updated (or exists, during the snapshot)."""

    entry: Entry


@attrs.frozen
class Delete:
    """A watch event: ``key`` was deleted or expired at ``revision``."""

    key: str
    revision: Revision


@attrs.frozen
class SnapshotDone:
    """A watch event: every entry that existed when the watch began has been delivered."""


WatchEvent: TypeAlias = Put | Delete | SnapshotDone
"""What a watch yields."""


@runtime_checkable
class Session(Protocol):
    """One coordinator's hold on the ephemeral keyspace, from :meth:`Store.session` to its end.

    Name it in every ephemeral ``create``/``update`` the coordinator makes. On a per-key store
    it is a light handle; on a session store it is what keeps those entries alive.
    """

    @property
    def lost(self) -> bool:
        """Whether the store gave this session up while it was open (its entries are gone).

        Writes naming a lost session raise :class:`~spate.store.SessionLost`. A per-key
        store's session is never lost: its entries expire one by one instead.
        """
        ...

    @property
    def last_confirmed(self) -> float | None:
        """Trio time at which the store last confirmed this session alive, if it keeps time.

        On a session store every entry of the session lives until at least this time plus
        the TTL: the protocol self-fences its splits once it is a whole TTL ago. None on
        per-key stores (each entry's own last write is what counts there).
        """
        ...


class KeySession:
    """The session of a per-key store: a light handle that only knows whether it has ended.

    Per-key stores (memory, NATS) return one from :meth:`Store.session` and call
    :meth:`check` on every ephemeral write that names it.
    """

    def __init__(self, owner: object) -> None:
        self._owner = owner
        self._ended = False

    @property
    def lost(self) -> bool:
        """Always False: a per-key store never gives a session up."""
        return False

    @property
    def last_confirmed(self) -> float | None:
        """None: per-key entries are timed by their own writes."""
        return None

    @property
    def ended(self) -> bool:
        """Whether the session's block has been left."""
        return self._ended

    def end(self) -> None:
        """Mark the session ended; later writes naming it are refused."""
        self._ended = True

    def check(self, owner: object) -> None:
        """Raise StoreError unless this is an open session of ``owner``."""
        if self._owner is not owner:
            raise StoreError(
                f"the session passed to {owner!r} was opened on another store client "
                f"({self._owner!r}); open sessions on the client that writes"
            )
        if self._ended:
            raise StoreError(
                "this store session has ended (its async with block was left), so its "
                "ephemeral writes are refused; open a new session"
            )


def check_session(session: object, owner: object) -> KeySession | None:
    """Validate the ``session`` argument of a per-key store's ephemeral write."""
    if session is None:
        return None
    if not isinstance(session, KeySession):
        raise StoreError(
            f"{owner!r} cannot use the session {session!r}: pass a session this store opened "
            "(store.session())"
        )
    session.check(owner)
    return session


@runtime_checkable
class Store(Protocol):
    """The store contract. Adapters implement it; the protocol uses nothing else.

    A store is an async context manager that owns its connections: enter it before use and
    leave it to close them. One store object may be shared by many coordinators in one
    process (that is how fleets run in-process on the memory store), so every method must be
    safe to call from many Trio tasks at once.
    """

    @property
    def capabilities(self) -> Capabilities:
        """What this store promises (ephemeral semantics, watch expiry, value size limit)."""
        ...

    @property
    def ephemeral_ttl(self) -> float:
        """The TTL in seconds of the ephemeral keyspace (the job's lease duration)."""
        ...

    async def __aenter__(self) -> Store:
        """Open the store's connections; returns the store itself."""
        ...

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the store's connections (ending every session still open on it)."""
        ...

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """Return the entry for ``key``, or None if it does not exist (or has expired)."""
        ...

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Return every entry whose key starts with ``prefix``, sorted by key.

        The result is one consistent snapshot: it reflects every write that completed before
        the call began and no partial state of any later write.
        """
        ...

    def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AbstractAsyncContextManager[AsyncIterator[builtins.list[Entry]]]:
        """List every entry under ``prefix`` in pages of at most ``page_size`` entries.

        For listings too large to hold at once (a leader's backstop over a whole job): the
        caller folds each page and lets it go, so neither side holds more than about a page
        of entries at a time. Inside the block the iterator yields pages, then stops:

        - each page is sorted by key and non-empty, and every page but the last holds exactly
          ``page_size`` entries (so a short page is the last one);
        - every key that exists from the moment the block is entered until the last page is
          taken appears in some page, with a revision it held meanwhile;
        - a key written during the listing may appear again in a later page, each time at a
          greater revision; a key created or deleted during it may or may not appear;
        - pages need not come in key order, nor make one snapshot together (a store that can
          give one, as etcd does at one revision, should).

        A listing that breaks raises :class:`~spate.StoreUnavailable` from the iterator (the
        caller starts a new one). ``page_size`` below 1 is refused with
        :class:`~spate.StoreError`. Leaving the block early frees whatever the listing holds
        on the store (a cursor, a consumer).
        """
        ...

    def session(self) -> AbstractAsyncContextManager[Session]:
        """Open a session for one coordinator's lifetime (see *Sessions* above).

        Leaving the block ends it: on a session store its entries go at once (or within the
        TTL when the store cannot be reached), and its keepalives stop. May raise
        :class:`~spate.StoreUnavailable` when the store cannot start one.
        """
        ...

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Create ``key`` if it does not exist: Won(revision) exactly once, else Conflict.

        In the ephemeral keyspace the entry belongs to ``session`` (ignored for durable keys).
        """
        ...

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """Compare-and-swap: write ``value`` only if ``key`` exists at revision ``expected``.

        Returns Won(new revision, strictly greater than ``expected``) or Conflict (the key moved
        on, or does not exist). In the ephemeral keyspace a won update restarts the entry's
        TTL (per-key) and moves it onto ``session`` (it then lives and dies with it).
        """
        ...

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delete ``key``; when ``expected`` is given, only if it is at that revision.

        Guarded: Won if the key existed at ``expected`` and is now gone, else Conflict.
        Unguarded: Won if the key existed, Conflict if it did not.
        """
        ...

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        """Watch every key starting with ``prefix`` (or, with ``exact=True``, that one key).

        The iterator yields a :class:`Put` for every entry that exists when the watch starts,
        then one :class:`SnapshotDone`, then live :class:`Put` / :class:`Delete` events in
        revision order, with no gap between the snapshot and the live events. Expiries are
        delivered as Delete when ``capabilities.expiry_reaches_watchers``. A watch that
        breaks raises :class:`~spate.StoreUnavailable`; the caller opens a new one.

        With ``exact=True``, ``prefix`` is a whole key (refused with
        :class:`~spate.StoreError` unless :func:`validate_key` accepts it, so the empty
        prefix is refused too) and the watch covers that key alone, with every guarantee
        above: its snapshot is the key's entry if it exists (zero or one Put), then
        SnapshotDone, then the key's own Puts and Deletes. A key that merely starts with it
        (``assign.w1`` and ``assign.w10``) is never delivered, and a store should not even
        send it over the wire. Use it to follow a few known keys: a prefix watch of one key
        costs every write under that prefix (and on NATS, every write under the prefix's
        last whole token), where an exact watch costs only that key's writes.
        """
        ...


@attrs.frozen
class Create:
    """A write of a group: create ``key`` if it does not exist (as :meth:`Store.create`)."""

    kind: ClassVar[Literal["create"]] = "create"
    """The single call this write stands for."""
    key: str
    value: bytes
    keyspace: Keyspace = Keyspace.DURABLE


@attrs.frozen
class Swap:
    """A write of a group: ``value`` for ``key`` if at ``expected`` (as :meth:`Store.update`)."""

    kind: ClassVar[Literal["update"]] = "update"
    """The single call this write stands for."""
    key: str
    value: bytes
    expected: Revision
    keyspace: Keyspace = Keyspace.DURABLE


@attrs.frozen
class Remove:
    """A write of a group: delete ``key``, at ``expected`` if given (as :meth:`Store.delete`)."""

    kind: ClassVar[Literal["delete"]] = "delete"
    """The single call this write stands for."""
    key: str
    expected: Revision | None = None
    keyspace: Keyspace = Keyspace.DURABLE


Write: TypeAlias = Create | Swap | Remove
"""One conditional write of a :meth:`BatchedWrites.write_many` call."""


@runtime_checkable
class BatchedWrites(Protocol):
    """A store that can carry several conditional writes in one round trip (optional).

    When the store offers it, the coordinator's runtime groups the writes that queue up while
    one is in flight (commits, claims and their leases, hand-backs and their lease deletes)
    into one call: a *group commit*. The store's own cost per request (a round trip, a
    consensus entry, an HTTP exchange) is then paid once per group instead of once per
    write. Stores without it get every write on its own, as before.
    """

    @property
    def max_batch(self) -> int:
        """The most writes one :meth:`write_many` call may carry."""
        ...

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Independent conditional writes, sent together.

        Each write lands or loses on its own, exactly as its own :meth:`Store.create`,
        :meth:`Store.update` or :meth:`Store.delete` would (an ephemeral create or swap
        naming ``session``): result ``i`` is write ``i``'s Won, Conflict, or the
        :class:`~spate.StoreError` that refused it alone (an invalid key, a value too
        large), which leaves the other writes unaffected. A call naming one key of one
        keyspace twice is refused whole (:class:`~spate.StoreError`, nothing written),
        and so is a call whose ``session`` is refused (ended, another client's:
        :class:`~spate.StoreError`; lost: :class:`~spate.store.SessionLost`).
        Raises :class:`~spate.StoreUnavailable` when the outcome is unknown: any of
        the writes may have landed.
        """
        ...


def max_batch_of(store: object) -> int:
    """How many writes ``store`` sends together: its ``max_batch``, else 1.

    What a wrapper of a store reports as its own ``max_batch`` (1: nothing is grouped).
    """
    return store.max_batch if isinstance(store, BatchedWrites) else 1


def batched(store: object) -> BatchedWrites:
    """``store`` as a :class:`BatchedWrites`; StoreError if it cannot send writes together.

    What a wrapper's ``write_many`` calls on the store it wraps.
    """
    if not isinstance(store, BatchedWrites):
        raise StoreError(f"{store!r} cannot send writes together (no write_many)")
    return store


def check_writes(writes: Sequence[object]) -> None:
    """Refuse a :meth:`BatchedWrites.write_many` call whole (StoreError), before anything is sent.

    Refused: an element that is not a :data:`Write`, and a key named twice in one keyspace
    (which of two writes of one key should land would depend on their order; etcd refuses
    such a txn itself).
    """
    seen: set[tuple[Keyspace, str]] = set()
    twice: set[str] = set()
    for write in writes:
        if not isinstance(write, Create | Swap | Remove):
            raise StoreError(
                f"write_many takes spate.store.Create, Swap or Remove writes, not {write!r}; "
                "nothing was written"
            )
        named = (write.keyspace, write.key)
        if named in seen:
            twice.add(write.key)
        seen.add(named)
    if twice:
        raise StoreError(
            f"write_many names the key(s) {sorted(twice)} more than once; nothing was written"
        )
