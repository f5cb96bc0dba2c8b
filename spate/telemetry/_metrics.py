"""The coordinator's metrics hooks on the OpenTelemetry metrics API.

:class:`Instruments` creates spate's instruments once on one meter;
:meth:`Instruments.hooks` gives each coordinator its own :class:`OTelMetrics` (a
:class:`~spate.MetricsHooks`), whose series carry ``spate.job`` and
``spate.instance`` so the workers of an in-process fleet stay apart.

Levels (splits owned, live workers, leader...) are observable instruments: the coordinator
reports them after every step, which can be thousands of times a second, so a report only
stores the latest :class:`~spate.Gauges` and the SDK reads it when it collects.
Levels whose sum across the fleet means something (splits owned, draining, leaders, idle
workers) are up-down counters; the ones every worker reports for the whole job (completed,
quarantined, live workers) are gauges, since adding them up would multiply them.

With no SDK configured the API's instruments are no-ops, so a counter bump costs a method
call; once an SDK meter provider is installed globally they start recording.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal, NamedTuple

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from spate._metrics import (
    AcquireReason,
    BalanceReport,
    Gauges,
    LossReason,
    MetricsHooks,
    ReplanOutcome,
    RevocationOutcome,
    WriteOutcome,
)
from spate._version import __version__

if TYPE_CHECKING:
    from spate._core.placement.report import DomainShare, PlacementReport

__all__ = ["SECONDS_BUCKETS", "Instruments", "OTelMetrics", "instruments"]

_tracer = trace.get_tracer("spate")

SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Histogram boundaries (seconds) for every spate duration: store round trips to drains."""

_Attrs = dict[str, str]

InstrumentKind = Literal["counter", "histogram", "up_down_counter", "gauge"]
"""A counter or a histogram (recorded as outcomes happen), or an up-down counter or a gauge
(observable: read when the SDK collects)."""


class _Row(NamedTuple):
    name: str
    kind: InstrumentKind
    unit: str
    description: str


_C, _S = "spate.coordination.", "spate.placement."

# Every instrument spate creates, in the order it creates them. A counter's or histogram's
# attribute on Instruments is its name after "spate.coordination." with dots as underscores
# (spate.coordination.write.duration is ``write_duration``); an observable one's reader in
# ``Instruments._readers`` is keyed the same way (after "spate.", for the placement gauges).
# Histograms are in seconds, with SECONDS_BUCKETS as their boundaries.
_INSTRUMENTS: tuple[_Row, ...] = (
    _Row(_C + "writes", "counter", "{write}", "Guarded store writes, by operation and outcome."),
    _Row(_C + "write.duration", "histogram", "s",
         "Duration of guarded store writes, by operation and outcome."),
    _Row(_C + "acquisitions", "counter", "{split}", "Splits gained (claim CAS won), by reason."),
    _Row(_C + "losses", "counter", "{split}", "Splits lost involuntarily, by reason."),
    _Row(_C + "releases", "counter", "{split}", "Voluntary hand-backs that landed."),
    _Row(_C + "failures", "counter", "{split}", "Splits reported failed by a handler."),
    _Row(_C + "quarantines", "counter", "{split}",
         "Splits seen becoming quarantined (every worker counts)."),
    _Row(_C + "revocations", "counter", "{revocation}",
         "Revocations by outcome: requested = drained + forced + cancelled + in flight."),
    _Row(_C + "drain.duration", "histogram", "s",
         "Revocation request to cooperative release (drained only)."),
    _Row(_C + "assignment.latency", "histogram", "s",
         "A split named in this worker's assignment until its claim won."),
    _Row(_C + "reconcile.duration", "histogram", "s", "One reconcile listing of both keyspaces."),
    _Row(_C + "planned", "counter", "{split}",
         "Progress records this worker created while leading."),
    _Row(_C + "replans", "counter", "{run}", "Planner runs while leading, by outcome."),
    _Row(_C + "replan.duration", "histogram", "s", "One planner run, by outcome."),
    # Levels: up-down counters where the fleet's sum means something, gauges where every
    # worker reports the whole job (adding them up would multiply them).
    _Row(_C + "splits.owned", "up_down_counter", "{split}", "Splits this worker holds."),
    _Row(_C + "splits.draining", "up_down_counter", "{split}",
         "Drains in progress (including cancelled revocations' drains)."),
    _Row(_C + "leader", "up_down_counter", "{worker}", "1 while this worker leads."),
    _Row(_C + "idle", "up_down_counter", "{worker}", "1 while this worker holds nothing."),
    _Row(_C + "splits.completed", "gauge", "{split}",
         "Completed splits in this worker's view of the job."),
    _Row(_C + "splits.quarantined", "gauge", "{split}",
         "Quarantined splits in this worker's view of the job (alert when > 0)."),
    _Row(_C + "workers.live", "gauge", "{worker}",
         "Workers with a live presence key, as this worker sees them (itself included)."),
    _Row(_C + "splits.retry_waiting", "up_down_counter", "{split}",
         "Held splits whose handler raised, waiting out the failure backoff."),
    # The leader's placement across failure domains (one worker reports them).
    _Row(_S + "blast_radius", "gauge", "1",
         "Largest share (0-1) of the placed weight one failure domain holds "
         "(reported by the leader)."),
    _Row(_S + "domain.splits", "gauge", "{split}",
         "Splits the leader's placement puts in each failure domain."),
    _Row(_S + "domain.weight", "gauge", "1",
         "Summed split weight the leader's placement puts in each failure domain."),
    # The leader's balance rounds (docs/balancing.md): counters, and the loads as gauges
    # (bounded: one series per live worker, and per the heaviest SPLIT_LOADS_REPORTED splits).
    _Row(_C + "balance.rounds", "counter", "{round}",
         "Balance rounds the leader ran, by reason (moved, ...)."),
    _Row(_C + "balance.moves", "counter", "{split}",
         "Running splits a balance round moved (graceful moves)."),
    _Row(_C + "balance.worker.load", "gauge", "1",
         "Each live worker's load (units of work a second) after the last "
         "balance round (reported by the leader)."),
    _Row(_C + "balance.split.load", "gauge", "1",
         "The heaviest splits' loads (units a second; at most 20 series), as the "
         "leader's last balance round saw them."),
    _Row(_C + "balance.imbalance", "gauge", "1",
         "The hottest worker's load over its mean after the last balance round "
         "(1.0 is even)."),
)  # fmt: skip


def _key(name: str) -> str:
    """An instrument's attribute (or reader) name, as ``_INSTRUMENTS`` says."""
    return name.removeprefix(_C).removeprefix("spate.").replace(".", "_")


_Reader = Callable[[CallbackOptions], Iterable[Observation]]


class Instruments:
    """spate's instruments on one meter (the global meter provider's unless given).

    Get them with :func:`instruments`, which makes one set per meter provider: a second set
    on the same provider would have its observable callbacks ignored by the SDK, and the
    levels of the coordinators using it would silently go unreported.
    """

    writes: metrics.Counter
    write_duration: metrics.Histogram
    acquisitions: metrics.Counter
    losses: metrics.Counter
    releases: metrics.Counter
    failures: metrics.Counter
    quarantines: metrics.Counter
    revocations: metrics.Counter
    drain_duration: metrics.Histogram
    assignment_latency: metrics.Histogram
    reconcile_duration: metrics.Histogram
    planned: metrics.Counter
    replans: metrics.Counter
    replan_duration: metrics.Histogram
    balance_rounds: metrics.Counter
    balance_moves: metrics.Counter

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter: Meter = (
            meter_provider.get_meter("spate", __version__)
            if meter_provider is not None
            else metrics.get_meter("spate", __version__)
        )
        self._live: weakref.WeakSet[OTelMetrics] = weakref.WeakSet()
        self._lock = threading.Lock()  # the SDK collects on its reader's thread
        readers = self._readers()
        for row in _INSTRUMENTS:
            key = _key(row.name)
            if row.kind == "counter":
                counter = meter.create_counter(row.name, unit=row.unit, description=row.description)
                setattr(self, key, counter)
            elif row.kind == "histogram":
                histogram = meter.create_histogram(
                    row.name,
                    unit=row.unit,
                    description=row.description,
                    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
                )
                setattr(self, key, histogram)
            elif row.kind == "up_down_counter":
                meter.create_observable_up_down_counter(
                    row.name, callbacks=[readers[key]], unit=row.unit, description=row.description
                )
            else:
                meter.create_observable_gauge(
                    row.name, callbacks=[readers[key]], unit=row.unit, description=row.description
                )

    def _readers(self) -> dict[str, _Reader]:
        """What each observable instrument reports when the SDK collects, by its key."""

        def level(read: Callable[[Gauges], int]) -> _Reader:
            def observe(options: CallbackOptions) -> Iterable[Observation]:
                return [Observation(read(levels), attrs) for levels, attrs in self._levels()]

            return observe

        def retry_waiting(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(h.waiting, h.attributes) for h in self._live_hooks()]

        def placements() -> list[tuple[PlacementReport, _Attrs]]:
            return [(h.report, h.attributes) for h in self._live_hooks() if h.report is not None]

        def blast_radius(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(report.blast_radius, attrs) for report, attrs in placements()]

        def per_domain(read: Callable[[DomainShare], int]) -> _Reader:
            def observe(options: CallbackOptions) -> Iterable[Observation]:
                return [
                    Observation(read(share), {**attrs, "spate.domain": share.domain})
                    for report, attrs in placements()
                    for share in report.domains
                ]

            return observe

        def balances() -> list[tuple[BalanceReport, _Attrs]]:
            live = self._live_hooks()
            return [(h.balance_report, h.attributes) for h in live if h.balance_report]

        def worker_loads(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(load, {**attrs, "spate.worker": worker})
                for report, attrs in balances()
                for worker, load in report.worker_loads
            ]

        def split_loads(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(load, {**attrs, "spate.split": split})
                for report, attrs in balances()
                for split, load in report.split_loads
            ]

        def imbalance(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(r.imbalance_after, attrs) for r, attrs in balances()]

        return {
            "splits_owned": level(lambda g: g.owned),
            "splits_draining": level(lambda g: g.draining),
            "leader": level(lambda g: int(g.leader)),
            "idle": level(lambda g: int(g.idle)),
            "splits_completed": level(lambda g: g.completed),
            "splits_quarantined": level(lambda g: g.quarantined),
            "workers_live": level(lambda g: g.live_workers),
            "splits_retry_waiting": retry_waiting,
            "placement_blast_radius": blast_radius,
            "placement_domain_splits": per_domain(lambda s: s.splits),
            "placement_domain_weight": per_domain(lambda s: s.weight),
            "balance_worker_load": worker_loads,
            "balance_split_load": split_loads,
            "balance_imbalance": imbalance,
        }

    def _live_hooks(self) -> list[OTelMetrics]:
        with self._lock:
            return list(self._live)

    def hooks(self, job: str, instance: str) -> OTelMetrics:
        """The metrics hooks of one coordinator (``job``, ``instance``) on these instruments."""
        hooks = OTelMetrics(self, job, instance)
        with self._lock:
            self._live.add(hooks)
        return hooks

    def _forget(self, hooks: OTelMetrics) -> None:
        with self._lock:
            self._live.discard(hooks)

    def _levels(self) -> list[tuple[Gauges, _Attrs]]:
        with self._lock:
            live = list(self._live)
        return [(h.levels, h.attributes) for h in live if h.levels is not None]


class OTelMetrics(MetricsHooks):
    """One coordinator's outcomes, recorded on :class:`Instruments`.

    Every series carries ``spate.job`` and ``spate.instance``. Call :meth:`close` when the
    coordinator stops so its levels stop being reported (a departed worker must not keep
    counting as a leader); a forgotten close is covered by garbage collection.
    """

    def __init__(self, instruments: Instruments, job: str, instance: str) -> None:
        self._i = instruments
        self.attributes: _Attrs = {"spate.job": job, "spate.instance": instance}
        self.levels: Gauges | None = None
        """The latest levels reported (None until the first step)."""
        self.waiting = 0
        """Held splits waiting out a failure backoff (run_worker's level)."""
        self.report: PlacementReport | None = None
        """The latest placement report (None unless this coordinator leads)."""
        self.balance_report: BalanceReport | None = None
        """The latest balance round (None unless this coordinator leads and balances)."""
        self._cache: dict[tuple[str, str], _Attrs] = {}
        self._write_cache: dict[tuple[str, str], _Attrs] = {}

    def _with(self, key: str, value: str) -> _Attrs:
        # Attribute dicts are reused: hot paths (a write per renewal) then allocate nothing.
        cached = self._cache.get((key, value))
        if cached is None:
            cached = {**self.attributes, key: value}
            self._cache[(key, value)] = cached
        return cached

    def write(self, operation: str, outcome: WriteOutcome, duration: float) -> None:
        """A guarded store write ended."""
        cached = self._write_cache.get((operation, outcome))
        if cached is None:
            cached = {**self.attributes, "spate.operation": operation, "spate.outcome": outcome}
            self._write_cache[(operation, outcome)] = cached
        self._i.writes.add(1, cached)
        self._i.write_duration.record(duration, cached)

    def acquired(self, reason: AcquireReason) -> None:
        """A split was gained."""
        self._i.acquisitions.add(1, self._with("spate.reason", reason))

    def lost(self, reason: LossReason) -> None:
        """A split was lost involuntarily."""
        self._i.losses.add(1, self._with("spate.reason", reason))

    def released(self, count: int) -> None:
        """Voluntary hand-backs landed."""
        self._i.releases.add(count, self.attributes)

    def failed(self) -> None:
        """A split was reported failed."""
        self._i.failures.add(1, self.attributes)

    def quarantined(self) -> None:
        """A split was seen becoming quarantined."""
        self._i.quarantines.add(1, self.attributes)

    def revocation(self, outcome: RevocationOutcome) -> None:
        """A revocation was requested or settled."""
        self._i.revocations.add(1, self._with("spate.outcome", outcome))

    def drain_duration(self, seconds: float) -> None:
        """A revocation drained cooperatively."""
        self._i.drain_duration.record(seconds, self.attributes)

    def assignment_latency(self, seconds: float) -> None:
        """An assigned split was acquired."""
        self._i.assignment_latency.record(seconds, self.attributes)

    def reconcile_duration(self, seconds: float) -> None:
        """One reconcile listing ended."""
        self._i.reconcile_duration.record(seconds, self.attributes)

    def planned(self, count: int) -> None:
        """Progress records were created while leading."""
        self._i.planned.add(count, self.attributes)

    def replan(self, outcome: ReplanOutcome, seconds: float) -> None:
        """One planner run ended."""
        attrs = self._with("spate.outcome", outcome)
        self._i.replans.add(1, attrs)
        self._i.replan_duration.record(seconds, attrs)

    def gauges(self, levels: Gauges) -> None:
        """Keep the latest levels for the next collection."""
        self.levels = levels

    def retry_waiting(self, count: int) -> None:
        """Keep how many held splits wait out a failure backoff, for the next collection."""
        self.waiting = count

    def placement(self, report: PlacementReport | None) -> None:
        """Keep the leader's latest placement report for the next collection."""
        self.report = report

    def balance(self, report: BalanceReport | None) -> None:
        """Count a balance round, keep its loads for the gauges, and trace it as a span."""
        self.balance_report = report
        if report is None:
            return
        self._i.balance_rounds.add(1, self._with("spate.reason", report.reason))
        if report.moves:
            self._i.balance_moves.add(len(report.moves), self.attributes)
        with _tracer.start_as_current_span(
            "spate.balance_round",
            attributes={
                **self.attributes,
                "spate.round": report.round,
                "spate.reason": report.reason,
                "spate.imbalance.before": report.imbalance_before,
                "spate.imbalance.after": report.imbalance_after,
                "spate.moved_load": report.moved_load,
                "spate.job_load": report.job_load,
                "spate.moves": [
                    f"{split} {source}->{target} ({load:.4g})"
                    for split, source, target, load in report.moves
                ],
            },
        ):
            pass

    def close(self) -> None:
        """Stop reporting this coordinator's levels (its counters keep their totals)."""
        self._i._forget(self)


_global: Instruments | None = None
_by_provider: weakref.WeakKeyDictionary[MeterProvider, Instruments] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def instruments(meter_provider: MeterProvider | None = None) -> Instruments:
    """The spate instruments on ``meter_provider`` (default: the global one), made once each.

    The global set is created through the API's proxy meter, so it starts recording as soon
    as an SDK meter provider is installed globally — before or after this call.
    """
    global _global
    with _cache_lock:
        if meter_provider is None:
            if _global is None:
                _global = Instruments()
            return _global
        found = _by_provider.get(meter_provider)
        if found is None:
            found = _by_provider[meter_provider] = Instruments(meter_provider)
        return found


def metrics_for(job: str, instance: str) -> OTelMetrics:
    """Metrics hooks for one coordinator on the global meter provider's instruments.

    What a coordinator uses when it is given no hooks of its own: cheap no-ops until an SDK
    meter provider is installed, then real series labelled with ``job`` and ``instance``.
    """
    return instruments().hooks(job, instance)
