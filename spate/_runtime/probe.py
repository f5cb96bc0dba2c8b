"""The startup probe: refuse a store whose compare-and-swap is broken before trusting it.

Every guard in the protocol is a compare-and-swap on a revision, so a store that lets a
duplicate create win, or a stale update land, would silently allow two owners. The coordinator runs
:func:`probe_store` before it joins a job; the conformance suite runs it too.

It checks every path the coordinator writes by: the single calls (``create``, ``update``,
``delete``) and, on a store that sends writes together (:class:`~spate.store.BatchedWrites`),
``write_many``, which the group commit uses for commits, claims and hand-backs as soon as two
writes queue at once. Both in both keyspaces: a store whose single update refuses a stale revision
but whose batched one lets a stale swap land would pass a probe of single calls only, and then
let two owners commit.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Sequence

import trio

from spate._errors import FatalCoordinationError, StoreError, StoreUnavailable
from spate._quote import seconds
from spate._store import (
    Conflict,
    Create,
    Keyspace,
    Remove,
    Revision,
    Session,
    Store,
    Swap,
    Won,
    Write,
    WriteResult,
    batched,
    max_batch_of,
)

__all__ = ["probe_store"]

SINGLE = "single calls (create, update, delete)"
"""The path named in a refusal of the single calls."""

BATCHED = "batched writes (write_many)"
"""The path named in a refusal of ``write_many``."""


def _refuse(keyspace: Keyspace, what: str, path: str = SINGLE) -> FatalCoordinationError:
    return FatalCoordinationError(
        f"the store failed the startup CAS probe of its {path} in the {keyspace.value} "
        f"keyspace: {what}. Its compare-and-swap cannot fence owners, so spate refuses to use "
        "it; check the store adapter against the conformance suite (spate conformance --store URL)."
    )


Refuse = Callable[..., Exception]
"""Builds the exception for a failed check (``refuse(what, path=...)``)."""


async def probe_store(
    store: Store,
    *,
    key_prefix: str = "_probe",
    session: Session | None = None,
    scratch: str | None = None,
) -> None:
    """Check create-once, duplicate-create, stale-update and guarded-delete in both keyspaces.

    By single calls, and by ``write_many`` too when the store sends writes together (each
    write of a group must land or lose on its own, as its single call would). Writes and
    removes scratch keys named ``<key_prefix>.<scratch>`` (and ``<key_prefix>.<scratch>-b``
    for the batched checks), random unless ``scratch`` is given (a coordinator derives it
    from its process nonce, so a replayed run writes the same keys); the ephemeral ones go
    under ``session`` when given. The cost is bounded: 7 store calls per keyspace, 10 on a
    store that batches. Raises :class:`~spate.FatalCoordinationError` naming the first
    broken rule and the path it broke on; :class:`~spate.StoreUnavailable` passes through
    (the caller retries). Two checks prove nothing when they fail, and raise
    StoreUnavailable too: an ephemeral check after the probe was held up for a whole TTL (a
    paused process: the scratch key may simply have expired), and the read-back of the last
    write (a replica that lags may serve it).
    """
    batches = max_batch_of(store) > 1
    for keyspace in (Keyspace.DURABLE, Keyspace.EPHEMERAL):
        key = f"{key_prefix}.{secrets.token_hex(8) if scratch is None else scratch}"
        other = f"{key}-b"
        named: dict[str, Session] = {}
        if session is not None and keyspace is Keyspace.EPHEMERAL:
            named["session"] = session
        started = trio.current_time()

        def refuse(
            what: str, path: str = SINGLE, keyspace: Keyspace = keyspace, started: float = started
        ) -> Exception:
            held_up = trio.current_time() - started
            if keyspace is Keyspace.EPHEMERAL and held_up >= store.ephemeral_ttl:
                return StoreUnavailable(
                    f"the startup probe was held up for {seconds(held_up)}, at least the "
                    f"{seconds(store.ephemeral_ttl)} TTL, so its ephemeral scratch key may have "
                    f"expired before the check that failed ({what}); probing again"
                )
            return _refuse(keyspace, what, path)

        first = await store.create(keyspace, key, b"probe-1", **named)
        if not isinstance(first, Won):
            raise _refuse(keyspace, f"creating a fresh key {key!r} did not win")
        left = [key]
        try:
            if not isinstance(await store.create(keyspace, key, b"probe-2", **named), Conflict):
                raise refuse("a second create of the same key won")
            second = await store.update(keyspace, key, b"probe-3", first.revision, **named)
            if not isinstance(second, Won) or second.revision <= first.revision:
                raise refuse("an update at the current revision did not win with a larger revision")
            stale = await store.update(keyspace, key, b"probe-4", first.revision, **named)
            if not isinstance(stale, Conflict):
                raise refuse("an update at a stale revision won")
            if not isinstance(await store.delete(keyspace, key, first.revision), Conflict):
                raise refuse("a delete guarded by a stale revision won")
            entry = await store.get(keyspace, key)
            if entry is None or entry.value != b"probe-3" or entry.revision != second.revision:
                # Not a verdict on the compare-and-swap: a read may be served by a replica that
                # lags (a NATS cluster's direct gets), and the protocol decides on CAS outcomes,
                # never on a read. Inconclusive, so tried again; a store whose reads stay wrong
                # is refused when the startup runs out of attempts.
                raise StoreUnavailable(
                    f"the startup probe's read of {key!r} in the {keyspace.value} keyspace did "
                    "not return its last won write (a replica that lags, or a store that loses "
                    "writes); probing again"
                )
            last = (key, second.revision)
            if batches:
                left.append(other)
                # The batched checks delete ``key`` (by a guarded Remove) and leave ``other``
                # at the revision returned, for the single guarded delete below.
                last = (
                    other,
                    await _probe_batched(
                        store,
                        keyspace,
                        key,
                        other,
                        first.revision,
                        second.revision,
                        session,
                        refuse,
                    ),
                )
                left.remove(key)
            if not isinstance(await store.delete(keyspace, *last), Won):
                raise refuse("a delete guarded by the current revision did not win")
            left.clear()
        finally:
            # Best effort: leave no scratch key behind even when refusing the store.
            for name in left:
                with contextlib.suppress(Exception):
                    await store.delete(keyspace, name)


async def _probe_batched(
    store: Store,
    keyspace: Keyspace,
    key: str,
    other: str,
    stale: Revision,
    current: Revision,
    session: Session | None,
    refuse: Refuse,
) -> Revision:
    """The checks of ``write_many``: three groups of two writes, one to win and one to lose.

    ``key`` exists at revision ``current`` (``stale`` is an earlier one); ``other`` does not
    exist yet. Each group pairs a write that must win with one that must lose, since the
    group commit sends writes of different splits together and each must land or lose on its
    own revision. Returns the revision ``other`` is left at; ``key`` is left deleted.
    """
    grouped = batched(store)
    named = session if keyspace is Keyspace.EPHEMERAL else None

    async def send(writes: Sequence[Write], what: str) -> Sequence[WriteResult]:
        try:
            results = await grouped.write_many(writes, session=named)
        except StoreError as exc:
            raise refuse(f"{what} was refused whole ({exc})", BATCHED) from exc
        if len(results) != len(writes):
            raise refuse(f"{what} got {len(results)} results for {len(writes)} writes", BATCHED)
        for result in results:
            if isinstance(result, StoreError):
                raise refuse(f"{what} refused one of its valid writes ({result})", BATCHED)
        return [result for result in results if not isinstance(result, StoreError)]

    fresh, again = await send(
        [Create(other, b"probe-5", keyspace), Create(key, b"probe-6", keyspace)],
        "a group of two creates",
    )
    if not isinstance(fresh, Won):
        raise refuse(f"a create of a fresh key {other!r} in a group did not win", BATCHED)
    if not isinstance(again, Conflict):
        raise refuse("a create of an existing key in a group won", BATCHED)
    swapped, stale_swap = await send(
        [
            Swap(other, b"probe-7", fresh.revision, keyspace),
            Swap(key, b"probe-8", stale, keyspace),
        ],
        "a group of two swaps",
    )
    if not isinstance(swapped, Won) or swapped.revision <= fresh.revision:
        raise refuse(
            "a swap at the current revision in a group did not win with a larger revision",
            BATCHED,
        )
    if not isinstance(stale_swap, Conflict):
        raise refuse("a swap at a stale revision in a group won", BATCHED)
    stale_remove, removed = await send(
        [Remove(other, fresh.revision, keyspace), Remove(key, current, keyspace)],
        "a group of two guarded removes",
    )
    if not isinstance(stale_remove, Conflict):
        raise refuse("a remove guarded by a stale revision in a group won", BATCHED)
    if not isinstance(removed, Won):
        raise refuse("a remove guarded by the current revision in a group did not win", BATCHED)
    return swapped.revision
