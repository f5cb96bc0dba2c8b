"""A follower's point reads: how it learns the records of a split it is assigned.

A follower watches no progress record, spec or lease (docs/protocol.md, "Who reads what"). It reads
a split it is assigned when its assignment record names it (or says it came free), and the session a
lease names when it must prove that session gone before a takeover. Any worker reads a key again
(:func:`reread`) when a guarded write of its own found the key moved unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from spate._core.flows import Batch, Flow, Op
from spate._core.host import Host
from spate._core.records import LeaseRecord, decode
from spate._errors import StoreUnavailable
from spate._store import Entry, Keyspace

__all__ = ["read_session", "read_split", "reread"]

logger = logging.getLogger("spate.claims")

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL


def read_split(
    host: Host, split: str, owned: Mapping[str, object], retry_later: Callable[[str], None]
) -> Flow[None]:
    """Point reads of one split's records: its progress record, spec and lease, at once.

    A follower watches none of them: this is how it learns a split it is
    assigned, and how it learns again once it was told the split came free (then it is on
    the critical path of a hand-over, so the reads go side by side: one round trip, not
    three). The progress record is folded first: a lease or spec folded before it would
    wait in the view for it.
    """
    view = host.view
    key = host.keys.split(split)
    lease_keyspace, lease_key = view.lease_keyspace, view.lease_key(split)
    known = view.splits.get(split)
    with_spec = known is None or known.spec is None
    reads = [Op("get", DURABLE, key), Op("get", lease_keyspace, lease_key)]
    if with_spec:
        reads.append(Op("get", DURABLE, host.keys.spec(split)))
    try:
        # Side by side, in one round trip: every write these keys see is guarded by the
        # store, so no order between the reads is needed for safety. A progress record
        # read before its owner's release with a lease read after its drop reads as an
        # expiry, which the claim settles with one more durable read (the release race),
        # exactly as when the reads were made one after the other.
        entries: list[Entry | Exception | None] = yield Batch(reads)
        for entry in entries:
            if isinstance(entry, Exception):
                raise entry  # (a StoreUnavailable is retried below; anything else is fatal)
        progress, lease = _entry(entries[0]), _entry(entries[1])
        if progress is None:
            return  # not seeded yet: the next assignment write or the backstop looks again
        host.fold(view.apply_put(DURABLE, progress))
        state = view.splits.get(split)
        spec = _entry(entries[2]) if with_spec else None
        if spec is not None and state is not None and state.spec is None:
            host.fold(view.apply_put(DURABLE, spec))
        if lease is not None and view.session_leases:
            # A lease lives by its owner's session: read that too, so the view can tell.
            yield from read_session(host, decode(LeaseRecord, lease_key, lease.value))
    except StoreUnavailable as exc:
        logger.debug("split %s: reading its records failed (%s); retrying later", split, exc)
        retry_later(split)
        return
    if split in owned:
        return  # claimed meanwhile (not by this flow): the claim's own writes are newer
    if lease is None:
        host.fold(view.apply_delete(lease_keyspace, lease_key, None))
    else:
        host.fold(view.apply_put(lease_keyspace, lease))


def _entry(read: Entry | Exception | None) -> Entry | None:
    assert not isinstance(read, Exception)  # (raised above)
    return read


def read_session(host: Host, lease: LeaseRecord) -> Flow[bool]:
    """Read the session ``lease`` names (its owner's presence) into the view: alive or not.

    On a per-key store this is the proof a takeover needs: a session is gone when its
    presence record is absent or names another nonce, and a read says so of the store
    itself, never of a stale view. Raises StoreUnavailable when the store cannot say.
    """
    view = host.view
    if (lease.owner, lease.nonce) == (host.instance, host.nonce):
        return True
    key = host.keys.worker(lease.owner)
    entry: Entry | None = yield Op("get", EPHEMERAL, key)
    if entry is None:
        host.fold(view.apply_delete(EPHEMERAL, key, None))
    else:
        host.fold(view.apply_put(EPHEMERAL, entry))
    return view.session_live(lease)


def reread(host: Host, keyspace: Keyspace, key: str) -> Flow[None]:
    """Read ``key`` and fold what the store holds now.

    For a clean-up whose guarded delete lost: the key moved on without the view hearing
    of it (an event lost with a broken watch, a write whose reply was lost). Guarded by a
    revision the view no longer has right, the next beat's attempt would lose again, and
    on a session store this process's keepalive would keep the key for ever. A failed
    read changes nothing: the next beat tries again.
    """
    try:
        entry: Entry | None = yield Op("get", keyspace, key)
    except StoreUnavailable:
        return
    if entry is None:
        host.fold(host.view.apply_delete(keyspace, key, None))
    else:
        host.fold(host.view.apply_put(keyspace, entry))
