"""The metrics hooks: every outcome the coordinator counts, as one small interface.

The coordinator calls a :class:`MetricsHooks` for each outcome it decides (a write won or
lost, a split acquired or lost and why, a revocation requested or settled, ...). The default
does nothing. An exporter (OpenTelemetry instruments, Prometheus, a test recorder) subclasses
it and overrides what it needs; no protocol rule changes when one is plugged in.

Revocation outcomes keep an invariant a dashboard can check: every ``requested`` ends in
exactly one ``drained``, ``forced`` or ``cancelled``, so
``requested - drained - forced - cancelled`` is the number of revocations in flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

if TYPE_CHECKING:
    from spate._core.placement.report import PlacementReport

__all__ = [
    "AcquireReason",
    "BalanceReport",
    "Gauges",
    "LossReason",
    "MetricsHooks",
    "ReplanOutcome",
    "RevocationOutcome",
    "WriteOutcome",
]

WriteOutcome: TypeAlias = Literal["won", "lost", "error"]
"""How a guarded store write ended: applied, lost its condition, or failed (maybe landed)."""
AcquireReason: TypeAlias = Literal["create", "reassigned", "reclaimed", "expired"]
"""Why a claim won: never owned, cleanly handed back, own restarted lease, expired owner."""
LossReason: TypeAlias = Literal["fenced", "starved", "revoked"]
"""Why a tenancy ended involuntarily."""
RevocationOutcome: TypeAlias = Literal["requested", "drained", "forced", "cancelled"]
"""A revocation's lifecycle: requested, then exactly one of the other three."""
ReplanOutcome: TypeAlias = Literal["ok", "noop", "error"]
"""How one planner run ended (noop: nothing new and nothing changed)."""


@attrs.frozen
class Gauges:
    """The coordinator's current levels, reported after every step."""

    owned: int
    """Splits this worker holds."""
    completed: int
    """Completed splits in this worker's view of the job."""
    quarantined: int
    """Quarantined splits in this worker's view of the job (alert when > 0)."""
    draining: int
    """Drains in progress on this worker (including those of cancelled revocations)."""
    live_workers: int
    """Workers with a live presence key, this one included."""
    leader: bool
    """Whether this worker leads."""
    idle: bool
    """Whether this worker holds nothing."""


SPLIT_LOADS_REPORTED = 20
"""The heaviest splits a balance report names (bounded cardinality: one series each)."""


@attrs.frozen
class BalanceReport:
    """One balance round of the leader's (``docs/balancing.md``)."""

    round: int
    reason: str
    """Why it did what it did: ``moved``, ``within band``, ``no move worth its price``,
    ``idle``, ``unmeasured``."""
    moves: tuple[tuple[str, str, str, float], ...]
    """Each move as (split, source, target, load)."""
    moved_load: float
    job_load: float
    imbalance_before: float
    """The hottest worker's load over its mean, before the moves (1.0 is even)."""
    imbalance_after: float
    worker_loads: tuple[tuple[str, float], ...]
    """Each live worker's load after the moves (units a second)."""
    split_loads: tuple[tuple[str, float], ...]
    """The heaviest :data:`SPLIT_LOADS_REPORTED` trusted splits' loads."""


class MetricsHooks:
    """Every outcome the coordinator counts. Override the methods you export; all default to no-op.

    Methods are called on the coordinator's task and must not block or raise.
    """

    def write(self, operation: str, outcome: WriteOutcome, duration: float) -> None:
        """A guarded store write ended (``operation`` as in its span: ``commit``, ``claim``...)."""

    def acquired(self, reason: AcquireReason) -> None:
        """A claim's progress-record CAS won: this worker gained a split."""

    def lost(self, reason: LossReason) -> None:
        """A held split was lost involuntarily."""

    def released(self, count: int) -> None:
        """``count`` voluntary hand-backs landed."""

    def failed(self) -> None:
        """The worker reported a split as failed (counted before the write lands)."""

    def quarantined(self) -> None:
        """This worker's view saw a split become quarantined (every worker counts it)."""

    def revocation(self, outcome: RevocationOutcome) -> None:
        """A revocation was requested or settled."""

    def drain_duration(self, seconds: float) -> None:
        """A revocation drained cooperatively after ``seconds`` (request to release)."""

    def assignment_latency(self, seconds: float) -> None:
        """A split named in this worker's assignment was acquired ``seconds`` after it was named."""

    def reconcile_duration(self, seconds: float) -> None:
        """One reconcile listing took ``seconds``."""

    def planned(self, count: int) -> None:
        """This worker, leading, created ``count`` progress records."""

    def replan(self, outcome: ReplanOutcome, seconds: float) -> None:
        """One planner run (while leading) ended after ``seconds``."""

    def gauges(self, levels: Gauges) -> None:
        """The current levels, reported after every step that may have changed them."""

    def retry_waiting(self, count: int) -> None:
        """``run_worker``: ``count`` held splits wait out their failure backoff now."""

    def balance(self, report: BalanceReport | None) -> None:
        """The leader ran a balance round (``None``: this worker stopped leading)."""

    def placement(self, report: PlacementReport | None) -> None:
        """The leader computed a placement (per failure domain, and its blast radius).

        Only the leader reports one; ``None`` when this worker stops leading (its last report
        is no longer current).
        """
