"""The coordinator's configuration: one frozen, self-validating value.

Every field has a default that suits a production fleet; tests shorten the timings. An invalid
value raises :class:`~spate.ConfigError` at construction, naming the field, the value
and the rule. Rules that depend on the store (the lease equals the store's ephemeral TTL) are
checked by :meth:`Config.resolve` when a coordinator opens.
"""

from __future__ import annotations

import functools
import math

import attrs

from spate._core.balance.model import BalanceConfig
from spate._errors import ConfigError
from spate._quote import number, seconds

__all__ = ["Config"]

DEFAULT_OP_TIMEOUT = 10.0
"""Ceiling of the derived per-operation timeout, in seconds."""


_BALANCE = BalanceConfig()
"""The balance knobs' defaults: :class:`BalanceConfig` is their one home (and their one
validation); ``Config``'s balance fields take their defaults from it."""

BALANCE_KNOBS = (
    "balance_interval",
    "load_half_life",
    "load_band",
    "max_moved_load",
    "isolation_tier",
)
"""The fields ``Config`` shares with :class:`BalanceConfig`, by the same names."""


def _number(value: object, name: str, what: str = "a finite number of seconds") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"Config.{name} must be {what}, not {value!r}")
    return float(value)


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Config.{name} must be an int, not {value!r}")
    return value


@attrs.frozen(kw_only=True)
class Config:
    """How a coordinator behaves. All durations are seconds.

    Attributes:
        lease_duration: How long a silent worker keeps its splits. ``None`` (the default)
            means the store's ephemeral TTL, which is where the lease is enforced; a value
            that differs from the store's TTL is refused (open the store with
            ``?ttl=<lease_duration>`` instead). Leases are renewed every third of it.
        op_timeout: Bound on one store round trip. ``None`` means ``min(10, lease / 3)``;
            a set value must be at most half the lease.
        max_in_flight: Splits this worker holds at once (its lane budget, advertised to
            the leader). At least 1.
        max_attempts: Non-graceful ends (expiry takeovers, reclaims, explicit failures) after
            which a split is quarantined. At least 1.
        failure_backoff: Seconds ``run_worker`` waits, holding the split, before running a
            handler that raised again: each failure consumes an attempt (quarantined at
            ``max_attempts``), then the wait doubles per failure up to
            ``failure_backoff_max``, with up to a quarter added at random (so a fleet's
            splits do not retry in step), and starts again at this after a run that moves
            the watermark without failing. 1 s by default: a sink down for 5 s quarantines
            nothing at the defaults (waits of at least 1, 2 and 4 s before the fourth
            attempt). 0 fails a split at once and hands it back (another worker may take
            it). Zero or more.
        failure_backoff_max: The longest wait between a failing handler's attempts: 60 s by
            default. At least ``failure_backoff``.
        replan_interval: How often the leader calls the planner again while the plan is
            open. Positive.
        reconcile_interval: How often a full listing backs up the watches (catching any
            missed event). Positive. A follower's backstop re-reads its own few keys; the
            leader's lists the job in pages of ``list_page_size``.
        list_page_size: Entries per page of the leader's backstop listing (at least 1): the
            leader folds each page and lets it go, so a listing of a job of any size holds
            about one page of records in flight. 1,000 by default.
        startup_max_attempts: Tries of each startup step (probe, join, announce) against an
            unavailable store before giving up. At least 1.
        rebalance_delay: How long the splits of a departed worker are withheld from others,
            so a restarting worker reclaims its own. Zero reassigns at once.
        drain_deadline: How long a revoked split may take to drain before it is taken away
            (its uncommitted tail then replays). At least ``op_timeout``.
        membership_debounce: Quiet period the leader waits after a membership change before
            it rebalances (several workers joining at once cause one rebalance; unowned splits
            are still handed out at once). It is also a new job's *join window*: the first
            assignment waits until membership has been quiet this long (each arrival extends
            it, up to three windows after leadership began), so a fleet started together
            places each split once instead of moving most of them off the first worker to
            see the plan. The default, 2 s, covers workers started within a second or two of
            each other and costs a new job exactly its length once (``bench/makespan.py``: a
            fleet started together runs 60 s splits in 62 s with no move; 3 s: 63 s, the
            target's edge). Zero rebalances at once and places a new job at once.
        split_requests: Whether the leader asks running splits to split when lanes sit idle
            and no runnable split is unassigned (``SplitHandle.split_requested``). True by
            default; a handler that never splits costs next to nothing by it (the leader backs
            off from a split whose handler ignored one, and once a few requests went ignored
            with no split seen it only probes, one request every five minutes). False on the
            leader: it never asks. False on any worker: carried on its presence record, it
            says its handlers never split, and no leader asks a split it holds (a handler may
            still split unasked).
        split_request_delay: How long lanes must sit idle before the leader asks (a debounce:
            a lane freed for a moment while the next split is being handed out is not idle).
            Zero or more; 1 s by default.
        isolation_tier: The tier of the workers' localities whose domains the leader spreads
            the job across (0, the default, is the coarsest: ``zone-a`` of
            ``zone-a/rack-3/host-7``). Zero or more. Only matters when workers have a locality.
        measure_load: Whether a split's load is measured for it: its handler's busy time on
            the event loop (the handler task and the tasks it starts), for CPU-bound handlers
            that do not call ``SplitHandle.report_load``. False by default.
        capacity: The load this worker takes relative to a worker of capacity 1.0 (the
            default): a worker of 2.0 is given twice the load. Positive.
        balance_interval: Seconds between the leader's load-balance rounds, which move running
            splits by measured load (reported or measured, see ``docs/balancing.md``). 0
            turns load balancing off. 60 s by default: KCL 3 and Dicer balance about once a
            minute. A job whose splits report no load is never balanced by load.
        load_band: How far a worker's load per unit of capacity may stray from the job's mean
            before the leader moves splits: 0.10 (±10%, KCL 3's and Dicer's tolerance). In
            (0, 1].
        load_half_life: Half-life, in seconds, of a split's smoothed load: 60 s by default (a
            load that moved on is half forgotten by the next round). A split's load counts
            once it was measured for ``max(60 s, load_half_life)``. Positive.
        max_moved_load: The share of the job's load one balance round may move: 0.10
            (Slicer's churn budget is about 9% a round). In (0, 1].
        claim_deadline: How long a live worker may leave the splits the leader assigned it
            unclaimed before the leader places them elsewhere (a presence record kept alive
            for a worker that never claims: a ghost, or a process wedged before its first
            claim). ``None`` (the default) means twice the lease, or the lease plus
            ``drain_deadline`` when that is longer (a worker whose lanes are full of splits
            still draining claims only once they drain). The worker is given work again
            later, and is placed like any other worker once it claims. Positive.
        planner_thread: Where a synchronous planner runs. ``None`` (the default) decides by
            the clock: in a worker thread (so a slow plan never stalls renewals), except under
            a ``trio.testing.MockClock``, where it runs inline on the event loop, because the
            virtual clock runs ahead of a thread and a plan could come back after its
            leader's lease expired. ``True`` always uses a thread, ``False`` always runs inline.
    """

    lease_duration: float | None = None
    op_timeout: float | None = None
    max_in_flight: int = 8
    max_attempts: int = 4
    replan_interval: float = 60.0
    reconcile_interval: float = 30.0
    startup_max_attempts: int = 8
    rebalance_delay: float = 20.0
    drain_deadline: float = 10.0
    membership_debounce: float = 2.0
    planner_thread: bool | None = None
    isolation_tier: int = _BALANCE.isolation_tier
    split_requests: bool = True
    split_request_delay: float = 1.0
    list_page_size: int = 1000
    measure_load: bool = False
    capacity: float = 1.0
    balance_interval: float = _BALANCE.balance_interval
    load_band: float = _BALANCE.load_band
    load_half_life: float = _BALANCE.load_half_life
    max_moved_load: float = _BALANCE.max_moved_load
    claim_deadline: float | None = None
    # A handler's failures (run_worker): the wait between attempts, holding the split.
    failure_backoff: float = 1.0
    failure_backoff_max: float = 60.0

    def __attrs_post_init__(self) -> None:
        for name in ("lease_duration", "op_timeout"):
            value = getattr(self, name)
            if value is not None and _number(value, name) <= 0:
                raise ConfigError(f"Config.{name} must be positive, not {value!r}")
        for name in ("replan_interval", "reconcile_interval", "drain_deadline"):
            if _number(getattr(self, name), name) <= 0:
                raise ConfigError(f"Config.{name} must be positive, not {getattr(self, name)!r}")
        for name in ("rebalance_delay", "membership_debounce", "split_request_delay"):
            if _number(getattr(self, name), name) < 0:
                raise ConfigError(
                    f"Config.{name} must be zero or positive, not {getattr(self, name)!r}"
                )
        for name in ("max_in_flight", "max_attempts", "startup_max_attempts", "list_page_size"):
            if _count(getattr(self, name), name) < 1:
                raise ConfigError(f"Config.{name} must be at least 1, not {getattr(self, name)!r}")
        if not isinstance(self.split_requests, bool):
            raise ConfigError(
                f"Config.split_requests must be True or False, not {self.split_requests!r}"
            )
        self._check_balance()
        if self.claim_deadline is not None and _number(self.claim_deadline, "claim_deadline") <= 0:
            raise ConfigError(
                f"Config.claim_deadline must be a positive number of seconds (or None: twice "
                f"the lease), not {self.claim_deadline!r}"
            )
        self._check_failure_backoff()
        if self.planner_thread is not None and not isinstance(self.planner_thread, bool):
            raise ConfigError(
                f"Config.planner_thread must be True, False or None (decide by the clock), not "
                f"{self.planner_thread!r}"
            )
        if self.lease_duration is not None:
            self._check_timings(self.lease_duration)

    def _check_failure_backoff(self) -> None:
        first = _number(self.failure_backoff, "failure_backoff")
        if first < 0:
            raise ConfigError(
                f"Config.failure_backoff must be zero or positive seconds (0 fails a split at "
                f"once and hands it back), not {self.failure_backoff!r}"
            )
        if _number(self.failure_backoff_max, "failure_backoff_max") < first:
            raise ConfigError(
                f"Config.failure_backoff_max ({seconds(self.failure_backoff_max)}) must be at "
                f"least Config.failure_backoff ({seconds(self.failure_backoff)}): it caps the "
                "doubling wait "
                "between a failing handler's attempts."
            )

    def _check_balance(self) -> None:
        if not isinstance(self.measure_load, bool):
            raise ConfigError(
                f"Config.measure_load must be True or False, not {self.measure_load!r}"
            )
        if _number(self.capacity, "capacity", "a finite number") <= 0:
            raise ConfigError(
                f"Config.capacity must be a positive number (1.0 is a default worker, 2.0 takes "
                f"twice its load), not {self.capacity!r}"
            )
        try:
            self._balance  # noqa: B018 (built once here, so a bad knob fails at construction)
        except ConfigError as error:
            # BalanceConfig validates the knobs it shares, naming each by its field: the
            # user's spelling is Config's
            raise ConfigError(f"Config.{error}") from None

    @functools.cached_property
    def _balance(self) -> BalanceConfig:
        """The balance knobs, as the leader's rounds read them (built and checked once)."""
        return BalanceConfig(**{name: getattr(self, name) for name in BALANCE_KNOBS})

    def _check_timings(self, lease: float) -> None:
        timeout = (
            self.op_timeout if self.op_timeout is not None else min(DEFAULT_OP_TIMEOUT, lease / 3)
        )
        if timeout > lease / 2:
            raise ConfigError(
                f"Config.op_timeout ({seconds(timeout)}) must be at most half the lease "
                f"({seconds(lease)}): "
                "a worker must be able to retry a renewal before its lease runs out. Lower "
                "op_timeout or lengthen the lease."
            )
        if self.drain_deadline < timeout:
            raise ConfigError(
                f"Config.drain_deadline ({seconds(self.drain_deadline)}) must be at least "
                f"op_timeout ({seconds(timeout)}): a drain needs time for at least one commit."
            )

    def resolve(self, ephemeral_ttl: float) -> Config:
        """Return this config with ``lease_duration`` and ``op_timeout`` filled in for a store.

        Raises :class:`~spate.ConfigError` when ``lease_duration`` is set and differs
        from the store's ephemeral TTL (the store is what expires leases).
        """
        ttl = float(ephemeral_ttl)
        if self.lease_duration is not None and not math.isclose(
            self.lease_duration, ttl, rel_tol=1e-9, abs_tol=1e-9
        ):
            raise ConfigError(
                f"Config.lease_duration is {seconds(self.lease_duration)} but the store's "
                f"ephemeral TTL is {seconds(ttl)}; the store enforces the lease, so they must "
                f"agree. Open the store with ?ttl={number(self.lease_duration)} (or leave "
                "lease_duration unset to use the store's TTL)."
            )
        self._check_timings(ttl)
        timeout = (
            self.op_timeout if self.op_timeout is not None else min(DEFAULT_OP_TIMEOUT, ttl / 3)
        )
        return attrs.evolve(self, lease_duration=ttl, op_timeout=timeout)
