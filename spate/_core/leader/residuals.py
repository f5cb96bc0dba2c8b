"""The leader seeds the residuals it finds named in progress records (docs/splitting.md).

A residual exists from the moment its parent's progress record names it (the owner's fenced
split, :mod:`spate._core.tenancy.splitting`); its own records do not exist yet. Only the leader
seeds records (the plan count and the verdict rely on it), so the leader creates them, as it does a
planned split's: the spec first, then the progress record, each create-only (a second finder,
or a successor finishing a predecessor's half-done seeding, writes nothing twice). The leader
finds a named residual whenever it reads the parent's record: while its request to split it
is outstanding, at the parent's tenancy end (a lease event), and in every listing.
"""

from __future__ import annotations

import logging

from spate._core.deadlines import Deadlines
from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.records import ProgressRecord, Residual, SpecRecord, encode
from spate._errors import StoreUnavailable
from spate._store import Entry, Keyspace, Won

__all__ = ["ResidualSeeds", "unseeded"]

logger = logging.getLogger("spate.leader")

DURABLE = Keyspace.DURABLE

RETRY_AFTER = 1.0
"""Seconds before a residual whose seeding failed is tried again."""


class ResidualSeeds:
    """The leader's seeding of residuals it found named and not yet in its view."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._seeding: set[str] = set()
        self._due: dict[str, tuple[str, Residual]] = {}
        self._retry = Deadlines()

    def found(self, record: ProgressRecord) -> None:
        """``record`` was folded: seed each residual it names that the view does not hold."""
        if not record.residuals:
            return
        splits = self.host.view.splits
        for entry in record.residuals:
            if entry.id not in splits and entry.id not in self._seeding:
                self._due[entry.id] = (record.id, entry)

    def sweep(self) -> None:
        """Find every residual the view's records name that it does not hold (O(splits)).

        Called once the leader's view holds the whole job. A record folded before this worker
        led told no leader of its residuals (its own split, made while it followed, say), and
        the takeover's listing skips the records the view already folded: without this sweep
        such a residual is never seeded, and the verdict waits for it for ever.
        """
        for state in self.host.view.splits.values():
            if state.progress.residuals:
                self.found(state.progress)

    def clear(self) -> None:
        """Leadership ended: a successor seeds what is left (it finds the same records)."""
        self._due.clear()
        self._retry = Deadlines()

    def step(self, now: float) -> None:
        """Start the seeding that is due."""
        list(self._retry.pop_due(now))  # (those due again are in _due, and start below)
        for rid, (parent, entry) in sorted(self._due.items()):
            if rid in self._retry or rid in self._seeding:
                continue
            del self._due[rid]
            if rid in self.host.view.splits:
                continue
            self._seeding.add(rid)
            self.host.start(self._seed(parent, entry))

    def next_deadline(self) -> float:
        """When a failed seeding is tried again."""
        return self._retry.next()

    def _seed(self, parent: str, entry: Residual) -> Flow[None]:
        host, view, keys = self.host, self.host.view, self.host.keys
        rid = entry.id
        try:
            state = view.splits.get(parent)
            spec = SpecRecord(
                id=rid,
                generation=view.plan.generation if view.plan is not None else 0,
                weight=entry.weight,
                descriptor=entry.descriptor,
                # A residual keeps its parent's locality preference (the data is the same).
                locality=state.spec.locality if state is not None and state.spec else "",
                parent=parent,
            )
            record = ProgressRecord(id=rid, written_at_ms=host.wall_ms())
            try:
                yield from self._create(keys.spec(rid), encode(spec), "seed-spec", rid)
                yield from self._create(keys.split(rid), encode(record), "seed-split", rid)
            except StoreUnavailable as exc:
                logger.debug("seeding residual %s failed (%s); retrying", rid, exc)
                self._due[rid] = (parent, entry)
                self._retry.set(rid, host.now() + RETRY_AFTER)
                return
            logger.info("split %s: seeded its residual %s", parent, rid)
        finally:
            self._seeding.discard(rid)

    def _create(self, key: str, data: bytes, operation: str, split: str) -> Flow[None]:
        """Create ``key`` (or find it created) and fold what it holds."""
        host = self.host
        result = yield Op("create", DURABLE, key, data, operation=operation, split=split)
        if isinstance(result, Won):
            host.fold(host.view.apply_put(DURABLE, Entry(key, data, result.revision)))
            return
        # Seeded before (by this leader's earlier try, or a predecessor's): read what is there.
        entry: Entry | None = yield Op("get", DURABLE, key)
        if entry is not None:
            host.fold(host.view.apply_put(DURABLE, entry))


def unseeded(host: Host) -> list[str]:
    """The residuals named by the view's records that the view does not hold (O(splits))."""
    splits = host.view.splits
    return [
        entry.id
        for state in splits.values()
        for entry in state.progress.residuals
        if entry.id not in splits
    ]
