"""Flows: the protocol's multi-step procedures, written as generators of store requests.

A claim is a lease write, then a record CAS, then perhaps a read and a retry; a commit is a CAS
and perhaps a read. A flow is a generator that *yields* the store operation it needs
(:class:`Op`) and is *resumed* with the result. It never performs I/O itself and never
awaits: the runtime (:mod:`spate._runtime.driver`) performs each request and resumes the flow,
so every decision a flow makes runs synchronously against the machine's current state, while
the store round trips of different flows overlap.

Two writes to one key must not overlap (the second would be built on a revision the first
is about to change). A flow therefore yields :class:`Hold` for a key before reading the state
its write depends on: it is resumed only when no other flow's write to that key is in flight,
and keeps the key until it moves on to another key or ends. Writes to different keys never
wait for each other, so commits on different splits pipeline and renewals never queue behind
commits.

A flow that needs several independent procedures at once (a departing worker handing back
every split it holds) yields :class:`Fork`: the sub-flows start together, their writes to
different keys are in flight together, and the parent resumes once all of them have ended.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal, TypeAlias, TypeVar, overload

import attrs

from spate._store import Entry, Keyspace

__all__ = ["Batch", "Flow", "Fork", "Hold", "Op", "OpsOf", "Page", "Request"]

T = TypeVar("T")


@attrs.frozen
class Op:
    """One store call. Writes (create/update/delete) are fenced writes (one span each)."""

    method: Literal["get", "list", "list-page", "create", "update", "delete"]
    """The store method this calls (``list-page``: the next page of a paged listing)."""
    keyspace: Keyspace
    key: str
    value: bytes = b""
    expected: int | None = None
    operation: str = ""
    """The span name of a write: ``spate.<operation>``."""
    split: str | None = None
    epoch: int | None = None
    cursor: object = None
    """``list-page``: where the listing stands (the last :class:`Page`'s; None: a new one)."""
    page_size: int = 0
    """``list-page``: entries per page (see :meth:`spate.store.Store.list_pages`)."""

    @property
    def is_write(self) -> bool:
        """Whether this call writes (and so needs its key to itself)."""
        return self.method in ("create", "update", "delete")


@attrs.frozen
class Page:
    """The result of a ``list-page`` :class:`Op`: one page of a paged listing.

    ``cursor`` is None on the last page; otherwise the next ``list-page`` passes it on. It is
    opaque: each runtime keeps its listings its own way.
    """

    entries: list[Entry]
    cursor: object = None


@attrs.frozen
class Hold:
    """Wait until no other flow is writing ``key``, then keep it until the next key or the end."""

    keyspace: Keyspace
    key: str


@attrs.frozen
class Batch:
    """Several operations run concurrently; resumed with a list of results or errors.

    Only creates of keys no other flow writes (freshly planned spec and progress records),
    or reads (a follower's point reads of one split's records, side by side).

    ``landed(i, result)`` is called with each op's result (a write result, or the store
    error) as it arrives, before the flow resumes: a plan seeds one record per split, and
    folding each as it lands lets the watch recognise the record's echo by its revision
    and drop it undecoded. It runs wherever the result arrives (an I/O task, not the loop),
    so it may only fold into the view: no flows, no events, no exceptions.
    """

    ops: Sequence[Op]
    """The ops, in order (an :class:`OpsOf` builds each only when the runtime takes it)."""
    landed: Callable[[int, Any], None] | None = None


class OpsOf(Sequence[Op]):
    """``count`` ops, op ``i`` built by ``build(i)`` when asked for.

    A plan's batch has one op per split: built on demand, only the ops in flight exist at
    once (a hundred thousand op objects held for a whole batch cost memory, and time in
    every garbage collection while they lived).
    """

    def __init__(self, count: int, build: Callable[[int], Op]) -> None:
        self._count = count
        self._build = build

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Op: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Op]: ...

    def __getitem__(self, index: int | slice) -> Op | Sequence[Op]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"op {index} of a batch of {self._count}")
        return self._build(index % self._count)


Flow: TypeAlias = Generator["Request", Any, T]
"""A protocol procedure: yields requests, receives results, returns its outcome."""


@attrs.frozen
class Fork:
    """Run several flows side by side; resumed with their outcomes, in order, once all end.

    A sub-flow's exception is part of its outcome (the parent decides what is fatal). The
    parent gives up any key it holds first: a sub-flow may need that very key.
    """

    flows: tuple[Flow[Any], ...]


Request: TypeAlias = Op | Hold | Batch | Fork
