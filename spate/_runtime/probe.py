"""The startup probe: refuse a store whose compare-and-swap is broken before trusting it.

Every fence in the protocol is a revision CAS, so a store that lets a duplicate create win,
or a stale update land, would silently allow two owners. The coordinator runs
:func:`probe_store` before it joins a job; the conformance suite runs it too.
"""

from __future__ import annotations

import contextlib
import secrets

import trio

from spate._echo import seconds
from spate._errors import FatalCoordinationError, StoreUnavailable
from spate._store import Conflict, Keyspace, Session, Store, Won

__all__ = ["probe_store"]


def _refuse(keyspace: Keyspace, what: str) -> FatalCoordinationError:
    return FatalCoordinationError(
        f"the store failed the startup CAS probe in the {keyspace.value} keyspace: {what}. "
        "Its compare-and-swap cannot fence owners, so spate refuses to use it; check the "
        "store adapter against the conformance suite (spate conformance --store URL)."
    )


async def probe_store(
    store: Store,
    *,
    key_prefix: str = "_probe",
    session: Session | None = None,
    scratch: str | None = None,
) -> None:
    """Check create-once, duplicate-create, stale-update and guarded-delete in both keyspaces.

    Writes and removes one scratch key per keyspace named ``<key_prefix>.<scratch>``, random
    unless ``scratch`` is given (a coordinator derives it from its process nonce, so a
    replayed run writes the same keys); the ephemeral one goes under ``session`` when given. Raises
    :class:`~spate.FatalCoordinationError` naming the first broken rule;
    :class:`~spate.StoreUnavailable` passes through (the caller retries). Two checks
    prove nothing when they fail, and raise StoreUnavailable too: an ephemeral check after the
    probe was held up for a whole TTL (a paused process: the scratch key may simply have
    expired), and the read-back of the last write (a replica that lags may serve it).
    """
    for keyspace in (Keyspace.DURABLE, Keyspace.EPHEMERAL):
        key = f"{key_prefix}.{secrets.token_hex(8) if scratch is None else scratch}"
        named: dict[str, Session] = {}
        if session is not None and keyspace is Keyspace.EPHEMERAL:
            named["session"] = session
        started = trio.current_time()

        def refuse(what: str, keyspace: Keyspace = keyspace, started: float = started) -> Exception:
            held_up = trio.current_time() - started
            if keyspace is Keyspace.EPHEMERAL and held_up >= store.ephemeral_ttl:
                return StoreUnavailable(
                    f"the startup probe was held up for {seconds(held_up)}, at least the "
                    f"{seconds(store.ephemeral_ttl)} TTL, so its ephemeral scratch key may have "
                    f"expired before the check that failed ({what}); probing again"
                )
            return _refuse(keyspace, what)

        first = await store.create(keyspace, key, b"probe-1", **named)
        if not isinstance(first, Won):
            raise _refuse(keyspace, f"creating a fresh key {key!r} did not win")
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
                # Not a verdict on the fences: a read may be served by a replica that lags (a
                # NATS cluster's direct gets), and the protocol decides on CAS outcomes, never
                # on a read. Inconclusive, so tried again; a store whose reads stay wrong is
                # refused when the startup runs out of attempts.
                raise StoreUnavailable(
                    f"the startup probe's read of {key!r} in the {keyspace.value} keyspace did "
                    "not return its last won write (a replica that lags, or a store that loses "
                    "writes); probing again"
                )
            if not isinstance(await store.delete(keyspace, key, second.revision), Won):
                raise refuse("a delete guarded by the current revision did not win")
        finally:
            # Best effort: leave no scratch key behind even when refusing the store.
            with contextlib.suppress(Exception):
                await store.delete(keyspace, key)
