"""Removing a job from a store (the implementation behind :func:`spate.ops.delete_job`).

A job is its keys: every key starting with ``"<job>."`` in both keyspaces (see
:mod:`spate._core.records`). Deleting it lists them and deletes each one guarded by the
revision it was listed at, so a key some writer moved meanwhile is not deleted blind: the
listing is taken again and the new revision deleted, a few rounds at most.

A live worker of the job (its presence key ``<job>.worker.<instance>`` is in the store) makes
the delete refuse, unless forced: the worker would go on writing, and a live leader would
even start the job afresh. Forced, the worker is cut off: its presence, leases and progress
records go, so its next write is refused and it stops with an error (its handlers' work in
flight is lost; nothing is committed twice).

A namespace's recorded TTL goes with its last job. :func:`reset_ttl` clears it on its own,
for a namespace that holds no job but keeps a TTL (one recorded before its first job failed
to start, or one an older spate recorded that the store cannot grant); it refuses while any
key is left, since the TTL is what that key's lease was taken with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from spate._core.records import KeyKind, Keys, LeaderRecord, UnreadableRecord, decode
from spate._errors import StoreError
from spate._ops import JobNotFound, list_jobs
from spate._plan import validate_job
from spate._quote import seconds
from spate._store import Entry, Keyspace, Remove, Store, Won, batched, max_batch_of

__all__ = ["DeleteRefused", "DeleteReport", "ResetRefused", "delete_job", "reset_ttl"]

_ROUNDS = 5
"""Listings taken at most: each deletes what the previous one found moved meanwhile."""


class DeleteRefused(StoreError):
    """A job was not deleted because workers of it are live (nothing was removed).

    ``workers`` names them.
    """

    def __init__(self, job: str, workers: Sequence[str], ttl: float) -> None:
        self.job = job
        self.workers = tuple(workers)
        super().__init__(
            f"job {job} has {len(self.workers)} live worker(s): {', '.join(self.workers)}; "
            "nothing was removed. Stop them first (a stopped worker's presence key goes at once "
            f"on etcd, within the TTL of {seconds(ttl)} on NATS), or delete with --force "
            "(force=True), which cuts them off: their next write is refused and they stop with "
            "an error, losing the work in flight."
        )


@attrs.frozen
class DeleteReport:
    """What :func:`delete_job` removed."""

    job: str
    removed: dict[str, int]
    """Keys removed, by kind: ``plan``, ``spec``, ``split`` (progress records and leases),
    ``lease``, ``assign``, ``leader``, ``worker``, ``_probe``, and ``other`` for keys under
    the job's prefix that spate does not write."""
    cut_off: tuple[str, ...] = ()
    """The live workers a forced delete cut off (empty when none was live)."""
    released: bool = False
    """The job was the namespace's last: the namespace's TTL was released with it (etcd: its
    TTL record; NATS: its two buckets), so the next store opened on it may set any TTL."""

    @property
    def total(self) -> int:
        """How many keys were removed."""
        return sum(self.removed.values())

    def describe(self) -> str:
        """One line for an operator: the counts per kind, and whom a forced delete cut off."""
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.removed.items()) if n)
        text = f"deleted job {self.job}: {self.total} key(s) ({counts or 'none'})"
        if self.cut_off:
            text += f"; cut off the live worker(s) {', '.join(self.cut_off)}"
        if self.released:
            text += "; the namespace is now empty, and its TTL was released"
        return text


class ResetRefused(StoreError):
    """A namespace's TTL was not reset because keys are left in it (nothing was changed).

    ``jobs`` names the jobs there (it may be empty when the keys belong to no job).
    """

    def __init__(self, jobs: Sequence[str]) -> None:
        self.jobs = tuple(jobs)
        held = f"jobs {', '.join(self.jobs)}" if self.jobs else "keys that belong to no spate job"
        super().__init__(
            f"the namespace still holds {held}, so its TTL was left as it is (their leases use "
            "it). Remove each job with `spate delete --store URL --job NAME` (deleting the last "
            "one clears the TTL too)."
        )


@runtime_checkable
class ReleasesNamespace(Protocol):
    """A store that can forget an empty namespace's TTL (etcd, NATS; optional)."""

    @property
    def recorded_ttl(self) -> float | None:
        """The TTL the namespace recorded when the store opened (None: none)."""
        ...

    async def release_namespace(self) -> bool:
        """Forget the namespace's TTL if it holds no key; whether it was forgotten."""
        ...


async def delete_job(store: Store, job: str, *, force: bool = False) -> DeleteReport:
    """Remove every key of ``job`` in both keyspaces; other jobs in the store are untouched.

    Refuses with :class:`DeleteRefused` (removing nothing) while a worker of the job is live,
    unless ``force``: then the live workers are cut off (their next write is refused, and
    they stop with an error). When the job was the last in the store's namespace, the
    namespace's TTL is released too (on stores that record one: etcd, NATS), so the namespace
    may next be opened with any TTL. Raises :class:`~spate.ops.JobNotFound` when the store
    holds no key of the job, and :class:`~spate.StoreError` when keys kept being rewritten under the
    delete (a worker still running). Returns what was removed.
    """
    validate_job(job)
    keys = Keys(job)
    listed = await _list(store, keys)
    if not listed:
        raise JobNotFound(job, await list_jobs(store))
    live = _live_workers(keys, listed)
    if live and not force:
        raise DeleteRefused(job, live, store.ephemeral_ttl)
    removed: dict[str, int] = {}
    for _ in range(_ROUNDS):
        for keyspace in (Keyspace.EPHEMERAL, Keyspace.DURABLE):
            # Liveness first: a worker whose presence and leases are gone stops claiming.
            entries = [entry for space, entry in listed if space is keyspace]
            for entry, won in zip(entries, await _delete(store, keyspace, entries), strict=True):
                if won:
                    kind = keys.classify(entry.key)
                    name = kind[0].value if kind is not None else "other"
                    removed[name] = removed.get(name, 0) + 1
        listed = await _list(store, keys)
        if not listed:
            # The namespace's last job gone: its TTL goes too, so the namespace may be used
            # with another (what the TTL-mismatch message offers as a way out).
            released = isinstance(store, ReleasesNamespace) and await store.release_namespace()
            return DeleteReport(job, removed, tuple(live), released)
    raise StoreError(
        f"job {job}'s keys kept being rewritten while they were deleted ({len(listed)} left "
        f"after {_ROUNDS} rounds; removed so far: {sum(removed.values())}): a worker of it is "
        "still running. Stop it and delete again."
    )


async def _list(store: Store, keys: Keys) -> list[tuple[Keyspace, Entry]]:
    return [
        (keyspace, entry)
        for keyspace in (Keyspace.EPHEMERAL, Keyspace.DURABLE)
        for entry in await store.list(keyspace, keys.prefix)
    ]


def _live_workers(keys: Keys, listed: list[tuple[Keyspace, Entry]]) -> list[str]:
    """The instances with a presence key (or the leader key) in the store: live workers."""
    live: set[str] = set()
    for keyspace, entry in listed:
        if keyspace is not Keyspace.EPHEMERAL:
            continue
        kind = keys.classify(entry.key)
        if kind is not None and kind[0] is KeyKind.WORKER:
            live.add(kind[1])
        elif kind == (KeyKind.LEADER, ""):
            try:
                live.add(decode(LeaderRecord, entry.key, entry.value).owner)
            except UnreadableRecord:
                live.add("(the leader: its record is unreadable)")
    return sorted(live)


async def _delete(store: Store, keyspace: Keyspace, entries: list[Entry]) -> list[bool]:
    """Delete each entry at its listed revision; whether each delete won."""
    size = max_batch_of(store)
    if size <= 1:
        return [isinstance(await store.delete(keyspace, e.key, e.revision), Won) for e in entries]
    out: list[bool] = []
    for start in range(0, len(entries), size):
        chunk = entries[start : start + size]
        results = await batched(store).write_many(
            [Remove(e.key, e.revision, keyspace) for e in chunk]
        )
        out += [isinstance(result, Won) for result in results]
    return out


async def reset_ttl(store: Store) -> bool:
    """Forget the namespace's recorded ephemeral TTL, so the next store opened on it sets its own.

    For a namespace that holds no job but keeps a TTL: one recorded by a worker that then
    failed to start, or one the store cannot grant (etcd: its TTL record; NATS: its two
    buckets). Returns whether a TTL was recorded (False: there was none to clear). Raises
    :class:`ResetRefused` (changing nothing) while any key is left in the namespace, and
    :class:`~spate.StoreError` for a store that records no TTL (``memory://`` holds a
    namespace's TTL only while a store of it is open).
    """
    if not isinstance(store, ReleasesNamespace):
        raise StoreError(
            f"{store!r} records no namespace TTL (a memory:// namespace keeps its TTL only "
            "while a store of it is open), so there is nothing to reset"
        )
    for keyspace in Keyspace:
        async with store.list_pages(keyspace, "", page_size=1) as pages:
            async for _ in pages:
                raise ResetRefused(await list_jobs(store))
    return await store.release_namespace()
