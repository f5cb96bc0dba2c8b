"""The view's revision bookkeeping: the revision each key was folded at, and deletions.

Every fold of a key records the revision it was folded at and :attr:`Revisions.seq`, a counter
that grows with every change: so an entry at or below a folded revision is stale (the echo of
one's own write is recognised this way, before anything is decoded), and a listing that
started at ``seq`` speaks only for the keys learned before it. A deletion leaves a tombstone,
so a listing in flight, or an older put still on its way, cannot bring the key back; a
listing that started after the tombstone retires it.

Plain tuples of ints throughout (the garbage collector stops tracking them: two a split, and a
full collection walks every tracked object), and each keyspace's map reached without hashing
the enum on the hot paths (a new leader folds two records a split).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from spate._store import Keyspace

__all__ = ["Known", "Revisions"]

Known: TypeAlias = tuple[int, int]
"""The revision a key was folded at, and :attr:`Revisions.seq` when it was."""


class Revisions:
    """Per keyspace: key -> (revision, seq) folded, and key -> (revision, seq) deleted."""

    def __init__(self) -> None:
        self.seq = 0
        """Grows with every change; a listing records it when it starts."""
        self.known: dict[Keyspace, dict[str, Known]] = {k: {} for k in Keyspace}
        self.tombs: dict[Keyspace, dict[str, Known]] = {k: {} for k in Keyspace}
        # The same maps, reached without hashing the enum (a join folds two records a split).
        self.known_durable = self.known[Keyspace.DURABLE]
        self.known_ephemeral = self.known[Keyspace.EPHEMERAL]
        self.tombs_durable = self.tombs[Keyspace.DURABLE]
        self.tombs_ephemeral = self.tombs[Keyspace.EPHEMERAL]

    def stale(self, keyspace: Keyspace, key: str, revision: int) -> bool:
        """Whether an entry of ``key`` at ``revision`` is folded already, or older, or deleted."""
        durable = keyspace is Keyspace.DURABLE
        known = (self.known_durable if durable else self.known_ephemeral).get(key)
        if known is not None and revision <= known[0]:
            return True
        tombs = self.tombs_durable if durable else self.tombs_ephemeral
        if not tombs:
            return False
        tomb = tombs.get(key)
        return tomb is not None and revision <= tomb[0]

    def remember(self, keyspace: Keyspace, key: str, revision: int) -> None:
        """``key`` was folded at ``revision``."""
        self.seq += 1
        durable = keyspace is Keyspace.DURABLE
        (self.known_durable if durable else self.known_ephemeral)[key] = (revision, self.seq)
        tombs = self.tombs_durable if durable else self.tombs_ephemeral
        if tombs:
            tombs.pop(key, None)

    def remember_durable(self, key: str, revision: int) -> None:
        """:meth:`remember` in the durable keyspace (twice a split when a leader takes over)."""
        self.seq = seq = self.seq + 1
        self.known_durable[key] = (revision, seq)
        if self.tombs_durable:
            self.tombs_durable.pop(key, None)

    def remember_durable_run(self, keys: list[str], revisions: list[int]) -> None:
        """:meth:`remember_durable` of each of ``keys`` at its revision, in order.

        For a run of keys never folded and never deleted (a new leader's listing): one call
        for the run, each key's sequence number what one call each would have given it.
        """
        seq, count = self.seq, len(keys)
        numbers = range(seq + 1, seq + 1 + count)
        self.known_durable.update(zip(keys, zip(revisions, numbers, strict=True), strict=True))
        self.seq = seq + count

    def forget(self, keyspace: Keyspace, key: str, revision: int) -> None:
        """``key`` was deleted at ``revision`` (or proven absent): a tombstone replaces it."""
        self.known[keyspace].pop(key, None)
        self.tomb(keyspace, key, revision)

    def tomb(self, keyspace: Keyspace, key: str, revision: int) -> None:
        """Remember a deletion of ``key`` at ``revision`` (keeping the newest)."""
        self.seq += 1
        tomb = self.tombs[keyspace].get(key)
        if tomb is None or tomb[0] < revision:
            self.tombs[keyspace][key] = (revision, self.seq)

    def prune_tombs(
        self,
        keyspace: Keyspace,
        *,
        since: int,
        covers: Callable[[str], bool] | None,
        prefix: str | None,
    ) -> None:
        """Retire the tombstones a listing that started at ``since`` speaks for."""
        # A tombstone older than this listing has done its job: the listing already reflects
        # that deletion, so no older put can arrive from it.
        tombs = self.tombs[keyspace]
        for key in [
            k
            for k, t in tombs.items()
            if t[1] <= since
            and (prefix is None or k.startswith(prefix))
            and (covers is None or covers(k))
        ]:
            del tombs[key]
