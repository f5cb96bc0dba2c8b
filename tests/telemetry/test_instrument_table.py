"""Every row of the instrument table becomes one instrument, named exactly as before.

``Instruments.__init__`` walks ``_INSTRUMENTS``, a table of (name, kind, unit, description).
Dashboards, alerts and the docs' reference name these instruments, so the table was written
from the instruments the hand-written constructor created, and this test holds it to that
list: each instrument's name, the call that creates it, its unit and its description, in
creation order, histograms with spate's bucket boundaries.
"""

from __future__ import annotations

from typing import Any

from spate.telemetry import SECONDS_BUCKETS, Instruments
from spate.telemetry._metrics import _INSTRUMENTS, _key

# (name, meter method after ``create_``, unit, description, has bucket boundaries), as
# Instruments created them before the table (the release before this one).
BEFORE = (
    (
        "spate.coordination.writes",
        "counter",
        "{write}",
        "Guarded store writes, by operation and outcome.",
        False,
    ),
    (
        "spate.coordination.write.duration",
        "histogram",
        "s",
        "Duration of guarded store writes, by operation and outcome.",
        True,
    ),
    (
        "spate.coordination.acquisitions",
        "counter",
        "{split}",
        "Splits gained (claim CAS won), by reason.",
        False,
    ),
    (
        "spate.coordination.losses",
        "counter",
        "{split}",
        "Splits lost involuntarily, by reason.",
        False,
    ),
    (
        "spate.coordination.releases",
        "counter",
        "{split}",
        "Voluntary hand-backs that landed.",
        False,
    ),
    (
        "spate.coordination.failures",
        "counter",
        "{split}",
        "Splits reported failed by a handler.",
        False,
    ),
    (
        "spate.coordination.quarantines",
        "counter",
        "{split}",
        "Splits seen becoming quarantined (every worker counts).",
        False,
    ),
    (
        "spate.coordination.revocations",
        "counter",
        "{revocation}",
        "Revocations by outcome: requested = drained + forced + cancelled + in flight.",
        False,
    ),
    (
        "spate.coordination.drain.duration",
        "histogram",
        "s",
        "Revocation request to cooperative release (drained only).",
        True,
    ),
    (
        "spate.coordination.assignment.latency",
        "histogram",
        "s",
        "A split named in this worker's assignment until its claim won.",
        True,
    ),
    (
        "spate.coordination.reconcile.duration",
        "histogram",
        "s",
        "One reconcile listing of both keyspaces.",
        True,
    ),
    (
        "spate.coordination.planned",
        "counter",
        "{split}",
        "Progress records this worker created while leading.",
        False,
    ),
    (
        "spate.coordination.replans",
        "counter",
        "{run}",
        "Planner runs while leading, by outcome.",
        False,
    ),
    ("spate.coordination.replan.duration", "histogram", "s", "One planner run, by outcome.", True),
    (
        "spate.coordination.splits.owned",
        "observable_up_down_counter",
        "{split}",
        "Splits this worker holds.",
        False,
    ),
    (
        "spate.coordination.splits.draining",
        "observable_up_down_counter",
        "{split}",
        "Drains in progress (including cancelled revocations' drains).",
        False,
    ),
    (
        "spate.coordination.leader",
        "observable_up_down_counter",
        "{worker}",
        "1 while this worker leads.",
        False,
    ),
    (
        "spate.coordination.idle",
        "observable_up_down_counter",
        "{worker}",
        "1 while this worker holds nothing.",
        False,
    ),
    (
        "spate.coordination.splits.completed",
        "observable_gauge",
        "{split}",
        "Completed splits in this worker's view of the job.",
        False,
    ),
    (
        "spate.coordination.splits.quarantined",
        "observable_gauge",
        "{split}",
        "Quarantined splits in this worker's view of the job (alert when > 0).",
        False,
    ),
    (
        "spate.coordination.workers.live",
        "observable_gauge",
        "{worker}",
        "Workers with a live presence key, as this worker sees them (itself included).",
        False,
    ),
    (
        "spate.coordination.splits.retry_waiting",
        "observable_up_down_counter",
        "{split}",
        "Held splits whose handler raised, waiting out the failure backoff.",
        False,
    ),
    (
        "spate.placement.blast_radius",
        "observable_gauge",
        "1",
        "Largest share (0-1) of the placed weight one failure domain holds (reported by the "
        "leader).",
        False,
    ),
    (
        "spate.placement.domain.splits",
        "observable_gauge",
        "{split}",
        "Splits the leader's placement puts in each failure domain.",
        False,
    ),
    (
        "spate.placement.domain.weight",
        "observable_gauge",
        "1",
        "Summed split weight the leader's placement puts in each failure domain.",
        False,
    ),
    (
        "spate.coordination.balance.rounds",
        "counter",
        "{round}",
        "Balance rounds the leader ran, by reason (moved, ...).",
        False,
    ),
    (
        "spate.coordination.balance.moves",
        "counter",
        "{split}",
        "Running splits a balance round moved (graceful moves).",
        False,
    ),
    (
        "spate.coordination.balance.worker.load",
        "observable_gauge",
        "1",
        "Each live worker's load (units of work a second) after the last balance round (reported "
        "by the leader).",
        False,
    ),
    (
        "spate.coordination.balance.split.load",
        "observable_gauge",
        "1",
        "The heaviest splits' loads (units a second; at most 20 series), as the leader's last "
        "balance round saw them.",
        False,
    ),
    (
        "spate.coordination.balance.imbalance",
        "observable_gauge",
        "1",
        "The hottest worker's load over its mean after the last balance round (1.0 is even).",
        False,
    ),
)


class _Made:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Meter:
    """A meter that notes each instrument asked of it."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, str, str, bool]] = []
        self.callbacks: dict[str, list[Any]] = {}

    def __getattr__(self, method: str) -> Any:
        if not method.startswith("create_"):
            raise AttributeError(method)
        kind = method.removeprefix("create_")

        def create(
            name: str,
            *,
            unit: str = "",
            description: str = "",
            callbacks: list[Any] | None = None,
            explicit_bucket_boundaries_advisory: tuple[float, ...] | None = None,
        ) -> _Made:
            if explicit_bucket_boundaries_advisory is not None:
                assert explicit_bucket_boundaries_advisory == SECONDS_BUCKETS, name
            self.made.append(
                (name, kind, unit, description, explicit_bucket_boundaries_advisory is not None)
            )
            self.callbacks[name] = callbacks or []
            return _Made(kind)

        return create


class _Provider:
    def __init__(self) -> None:
        self.meter = _Meter()

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return self.meter


def _made() -> tuple[Instruments, _Meter]:
    provider = _Provider()
    return Instruments(provider), provider.meter  # type: ignore[arg-type]


def test_every_row_becomes_the_instrument_it_was() -> None:
    _, meter = _made()
    assert tuple(meter.made) == BEFORE


def test_the_table_is_the_list_of_instruments() -> None:
    assert [row.name for row in _INSTRUMENTS] == [name for name, *_ in BEFORE]
    assert len({row.name for row in _INSTRUMENTS}) == len(_INSTRUMENTS)


def test_each_recorded_instrument_is_an_attribute_and_each_observed_one_has_a_reader() -> None:
    instruments, meter = _made()
    for row in _INSTRUMENTS:
        if row.kind in ("counter", "histogram"):
            made = getattr(instruments, _key(row.name))
            assert isinstance(made, _Made), row.name
            assert made.kind == row.kind, row.name
            assert meter.callbacks[row.name] == [], row.name
        else:
            assert len(meter.callbacks[row.name]) == 1, row.name
