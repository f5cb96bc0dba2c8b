"""The leader's quarantine of a split that ran out of attempts.

- **At ``max_attempts`` the split is quarantined by the leader**, whatever its lane budget (or
  a fleet of full workers could never reach the Stalled verdict), and only by the leader: it
  reads every tenancy's end, and a follower's quarantine of a split nobody leases would change
  no key the leader watches. (The claims decide *that* a split is out of attempts, from the
  same candidates they claim from: :func:`spate._core.protocol.claim_candidates`.)
- **The quarantine is a fence**: it bumps the epoch, so the dead owner's zombie cannot write.
- **No blame for a split that moved**: a late commit of the dead tenancy that advanced the
  watermark charges nothing, and nothing is quarantined.
- **A stale durable lease key** its dead session left behind is removed with the split.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host
from spate._core.protocol import Candidate, ClaimKind, attempts_after
from spate._core.records import Status, bounded_reason, encode
from spate._store import Keyspace, Won

__all__ = ["quarantine_flow"]

logger = logging.getLogger("spate.claims")

DURABLE = Keyspace.DURABLE


def quarantine_flow(
    host: Host,
    candidate: Candidate,
    write: Callable[[Op, str], Flow[Won | None]],
    drop_lease: Callable[[str, int, int], Flow[None]],
) -> Flow[None]:
    """Quarantine ``candidate``'s split by a fenced CAS of its progress record.

    ``write`` performs the write, holding the split back on a store error or a refusal (the
    claims' own rule); ``drop_lease`` removes a stale lease key left behind.
    """
    split = candidate.split
    key = host.keys.split(split)
    yield Hold(DURABLE, key)
    state = host.view.splits.get(split)
    if state is None or state.progress.status is not Status.RUNNABLE:
        return
    attempts = attempts_after(candidate.kind, state.progress.attempts, state.progress.advanced)
    if attempts == state.progress.attempts:
        return  # a late commit of the dead tenancy moved the split forward: no blame
    stale_lease = state.lease_rev if candidate.kind is ClaimKind.RECLAIM else 0
    stale_epoch = state.lease.epoch if state.lease is not None else state.progress.epoch
    if state.stale_lease is not None:
        # A durable lease key its dead session left behind: removed with the split.
        stale_lease, stale_epoch = state.stale_lease_rev, state.stale_lease.epoch
    record = attrs.evolve(
        state.progress,
        epoch=state.progress.epoch + 1,  # the fence: the dead owner's zombie cannot write
        status=Status.QUARANTINED,
        owner=None,
        owner_nonce="",
        attempts=attempts,
        written_at_ms=host.wall_ms(),
        reason=bounded_reason(_lost_owner_reason(candidate.kind, attempts, state.progress.reason)),
    )
    op = Op(
        "update", DURABLE, key, encode(record), expected=state.progress_rev,
        operation="quarantine", split=split, epoch=record.epoch,
    )  # fmt: skip
    # Refused: someone else moved it; the watch brings the news (or the reconcile listing,
    # if the watch missed it).
    result = yield from write(op, "quarantine write")
    if result is None:
        return
    logger.warning("split %s quarantined after %d attempts", split, record.attempts)
    host.fold(host.view.put_progress(split, record, result.revision))
    if stale_lease:
        yield from drop_lease(split, stale_lease, stale_epoch)


def _lost_owner_reason(kind: ClaimKind, attempts: int, earlier: str) -> str:
    """Why the leader quarantines a split nobody failed: its owner went away once too often."""
    how = "it restarted under the same id" if kind is ClaimKind.RECLAIM else "its lease expired"
    reason = f"attempt {attempts}: its owner went away without moving it forward ({how})"
    return f"{reason}; before that: {earlier}" if earlier else reason
