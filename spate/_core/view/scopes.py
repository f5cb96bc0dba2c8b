"""Who reads what: the keys each role watches (docs/protocol.md, "Who reads what").

A follower watches three exact keys: the plan record (generation, finality, the published
verdict), its own assignment record, and the leader key. Everything else it learns by point
reads of the few keys that concern it: the records of a split it is assigned, when it is about to
claim it. So what a follower reads does not grow with the job or the fleet, and a plain commit of
another worker is delivered to it not at all.

Only the leader reads the job, and it reads *ownership*, not progress: it watches the whole
ephemeral keyspace (presence, leases, the leader key) and, of the durable one, the same two exact
keys as a follower. It lists the durable keyspace once when it wins the leader key (specs,
progress records, assignment records: the whole job), and later learns a progress record by a
point read when that split's ownership changes (:mod:`spate._core.leader.ownership`). So a plain
commit touches no key anyone watches. The leader decides no placement until its watches' snapshots
and that listing are folded (:attr:`Scopes.sees_job`).
"""

from __future__ import annotations

import attrs

from spate._core.records import Keys
from spate._store import Keyspace

__all__ = ["Scopes", "WatchScope"]


@attrs.frozen
class WatchScope:
    """One watch: an exact key, or a key prefix, in one keyspace."""

    keyspace: Keyspace
    key: str
    """The key (``exact``), or the prefix every watched key starts with."""
    exact: bool

    def covers(self, key: str) -> bool:
        """Whether this watch (and so its snapshot) speaks for ``key``."""
        return key == self.key if self.exact else key.startswith(self.key)


class Scopes:
    """The watches this worker wants now, and which of them have delivered their snapshot."""

    def __init__(self, keys: Keys, instance: str, *, durable_leases: bool = False) -> None:
        durable, ephemeral = Keyspace.DURABLE, Keyspace.EPHEMERAL
        self.follower: tuple[WatchScope, ...] = (
            WatchScope(ephemeral, keys.leader, exact=True),
            WatchScope(durable, keys.plan, exact=True),
            WatchScope(durable, keys.assign(instance), exact=True),
        )
        # Where leases are durable keys alive by session (stores with per-key TTLs), the
        # leader watches their prefix too: a claim writes one and an end of tenancy deletes
        # one, and an expiry is its owner's presence going (in the ephemeral keyspace).
        leases = (WatchScope(durable, keys.lease_prefix, exact=False),) if durable_leases else ()
        self.leader: tuple[WatchScope, ...] = (
            WatchScope(ephemeral, keys.prefix, exact=False),
            *self.follower[1:],
            *leases,
        )
        self.whole_job = False
        self.listed = False
        """Whether the leader's listing of the durable keyspace is in (see :attr:`sees_job`)."""
        self._pending: set[WatchScope] = set(self.follower)
        self._opened_at: dict[WatchScope, int] = {}

    @property
    def wanted(self) -> tuple[WatchScope, ...]:
        """The watches to keep open now."""
        return self.leader if self.whole_job else self.follower

    @property
    def ready(self) -> bool:
        """Whether every wanted watch has delivered its snapshot since it was last wanted."""
        return not self._pending

    @property
    def sees_job(self) -> bool:
        """Whether this worker's view holds the whole job (leading, snapshots and listing in)."""
        return self.whole_job and self.listed and not self._pending

    @property
    def wants_listing(self) -> bool:
        """Whether the leader's listing of the durable keyspace is due."""
        return self.whole_job and not self.listed

    def read_whole_job(self, whole: bool) -> bool:
        """Switch between the follower's and the leader's watches; whether anything changed."""
        if whole == self.whole_job:
            return False
        before = set(self.wanted)
        self.whole_job = whole
        self.listed = False
        # A watch wanted in both roles stays open: its snapshot is in (or still pending).
        self._pending = {s for s in self.wanted if s not in before or s in self._pending}
        return True

    def relist(self) -> None:
        """The durable keyspace changed behind the leader's back (a requeue): list it again."""
        self.listed = False

    def opening(self, scope: WatchScope, seq: int) -> None:
        """``scope``'s watch is about to open; the view's sequence number is ``seq``."""
        self._opened_at[scope] = seq

    def since(self, scope: WatchScope, default: int) -> int:
        """The view's sequence number when ``scope``'s watch opened (``default`` if unknown)."""
        return self._opened_at.get(scope, default)

    def snapshot_folded(self, scope: WatchScope) -> None:
        """``scope``'s snapshot is in the view."""
        self._pending.discard(scope)
