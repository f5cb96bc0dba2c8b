"""spate's OpenTelemetry instruments: names, units, attributes, levels, and no-op cost."""

from __future__ import annotations

import gc

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint

from spate import Gauges
from spate import _write_spans as write_spans
from spate.store import Keyspace
from spate.telemetry import SECONDS_BUCKETS, OTelMetrics, instruments, metrics_for
from spate_stores.memory import MemoryStore

from .conftest import Meters, Spans

JOB = {"spate.job": "j"}


def levels(**overrides: int | bool) -> Gauges:
    base: dict[str, int | bool] = dict(
        owned=0, completed=0, quarantined=0, draining=0, live_workers=1, leader=False, idle=True
    )
    base.update(overrides)
    return Gauges(**base)  # type: ignore[arg-type]


def test_counters_carry_job_instance_and_their_label(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "w-1")
    hooks.acquired("create")
    hooks.acquired("create")
    hooks.acquired("expired")
    hooks.lost("fenced")
    hooks.released(3)
    hooks.failed()
    hooks.quarantined()
    hooks.planned(64)
    hooks.replan("ok", 0.02)
    w1 = {"spate.job": "j", "spate.instance": "w-1"}
    assert meters.value("spate.coordination.acquisitions", {**w1, "spate.reason": "create"}) == 2
    assert meters.value("spate.coordination.acquisitions", {**w1, "spate.reason": "expired"}) == 1
    assert meters.value("spate.coordination.losses", {**w1, "spate.reason": "fenced"}) == 1
    assert meters.value("spate.coordination.releases", w1) == 3
    assert meters.value("spate.coordination.failures", w1) == 1
    assert meters.value("spate.coordination.quarantines", w1) == 1
    assert meters.value("spate.coordination.planned", w1) == 64
    assert meters.value("spate.coordination.replans", {**w1, "spate.outcome": "ok"}) == 1


def test_writes_by_operation_and_outcome_with_a_seconds_histogram(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "w-1")
    hooks.write("commit", "won", 0.003)
    hooks.write("commit", "won", 0.004)
    hooks.write("commit", "lost", 0.002)
    hooks.write("renew", "error", 2.0)
    won = {"spate.operation": "commit", "spate.outcome": "won"}
    assert meters.value("spate.coordination.writes", won) == 2
    assert meters.value("spate.coordination.writes", {"spate.outcome": "lost"}) == 1
    assert meters.value("spate.coordination.writes", {"spate.operation": "renew"}) == 1
    [(attrs, point)] = [
        p
        for p in meters.points("spate.coordination.write.duration")
        if p[0]["spate.outcome"] == "won"
    ]
    assert isinstance(point, HistogramDataPoint)
    assert point.count == 2
    assert point.sum == pytest.approx(0.007)
    assert tuple(point.explicit_bounds) == SECONDS_BUCKETS
    assert attrs["spate.instance"] == "w-1"


def test_instrument_names_and_units() -> None:
    m = Meters()
    hooks = m.instruments.hooks("j", "w")
    hooks.write("commit", "won", 0.1)
    hooks.acquired("create")
    hooks.lost("starved")
    hooks.released(1)
    hooks.failed()
    hooks.quarantined()
    hooks.revocation("requested")
    hooks.drain_duration(1.0)
    hooks.assignment_latency(0.5)
    hooks.reconcile_duration(0.01)
    hooks.planned(1)
    hooks.replan("noop", 0.1)
    hooks.gauges(levels())
    hooks.retry_waiting(1)
    data = m.reader.get_metrics_data()
    assert data is not None
    units = {
        metric.name: metric.unit
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    p = "spate.coordination."
    assert units == {
        p + "writes": "{write}",
        p + "write.duration": "s",
        p + "acquisitions": "{split}",
        p + "losses": "{split}",
        p + "releases": "{split}",
        p + "failures": "{split}",
        p + "quarantines": "{split}",
        p + "revocations": "{revocation}",
        p + "drain.duration": "s",
        p + "assignment.latency": "s",
        p + "reconcile.duration": "s",
        p + "planned": "{split}",
        p + "replans": "{run}",
        p + "replan.duration": "s",
        p + "splits.owned": "{split}",
        p + "splits.draining": "{split}",
        p + "leader": "{worker}",
        p + "idle": "{worker}",
        p + "splits.completed": "{split}",
        p + "splits.quarantined": "{split}",
        p + "workers.live": "{worker}",
        p + "splits.retry_waiting": "{split}",
    }
    m.provider.shutdown()


def test_levels_report_the_latest_gauges_per_worker(meters: Meters) -> None:
    a = meters.instruments.hooks("j", "a")
    b = meters.instruments.hooks("j", "b")
    a.gauges(levels(owned=1))
    a.gauges(levels(owned=3, leader=True, idle=False, completed=7, live_workers=2, draining=1))
    b.gauges(levels(owned=0, completed=7, live_workers=2, quarantined=1))
    assert meters.value("spate.coordination.splits.owned", {"spate.instance": "a"}) == 3
    assert meters.value("spate.coordination.splits.owned") == 3
    assert meters.value("spate.coordination.leader") == 1
    assert meters.value("spate.coordination.idle") == 1
    assert meters.value("spate.coordination.splits.draining") == 1
    a.retry_waiting(2)
    assert meters.value("spate.coordination.splits.retry_waiting", {"spate.instance": "a"}) == 2
    assert meters.value("spate.coordination.splits.retry_waiting", {"spate.instance": "b"}) == 0
    assert meters.value("spate.coordination.splits.completed", {"spate.instance": "b"}) == 7
    assert meters.value("spate.coordination.splits.quarantined", {"spate.instance": "b"}) == 1
    assert meters.value("spate.coordination.workers.live", {"spate.instance": "a"}) == 2


def test_a_worker_reports_no_levels_before_its_first_step_or_after_close(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "a")
    other = meters.instruments.hooks("j", "b")
    other.gauges(levels(owned=1, idle=False))
    assert meters.points("spate.coordination.splits.owned")[0][0]["spate.instance"] == "b"
    hooks.gauges(levels(owned=2, idle=False, leader=True))
    assert meters.value("spate.coordination.splits.owned") == 3
    hooks.close()
    # A departed worker must not keep counting as a leader or as holding splits.
    assert meters.value("spate.coordination.leader") == 0
    assert [a["spate.instance"] for a, _ in meters.points("spate.coordination.splits.owned")] == [
        "b"
    ]


def test_a_dropped_worker_stops_being_observed(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "gone")
    hooks.gauges(levels(leader=True))
    del hooks
    gc.collect()
    assert list(meters.instruments._live) == []


def test_revocation_identity_on_the_counter(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "w")
    for outcome in ["requested"] * 5 + ["drained", "drained", "forced", "cancelled"]:
        hooks.revocation(outcome)  # type: ignore[arg-type]
    count = {
        o: meters.value("spate.coordination.revocations", {"spate.outcome": o})
        for o in ("requested", "drained", "forced", "cancelled")
    }
    in_flight = 1
    assert count["requested"] == count["drained"] + count["forced"] + count["cancelled"] + in_flight


async def test_fenced_writes_feed_the_write_counter(meters: Meters) -> None:
    hooks = meters.instruments.hooks("j", "w")
    scope = write_spans.Scope("j", "w", "memory", hooks)
    async with MemoryStore() as store:
        await write_spans.write(
            store, scope, "announce", "create", Keyspace.EPHEMERAL, "j.worker.w", b""
        )
        await write_spans.write(
            store, scope, "announce", "create", Keyspace.EPHEMERAL, "j.worker.w", b""
        )
    assert meters.value("spate.coordination.writes", {"spate.outcome": "won"}) == 1
    assert meters.value("spate.coordination.writes", {"spate.outcome": "lost"}) == 1


def test_default_hooks_use_the_global_provider_and_are_cheap_without_an_sdk() -> None:
    hooks = metrics_for("j", "w")
    assert isinstance(hooks, OTelMetrics)
    # Same instruments for every coordinator of the process: creating hooks is cheap.
    assert metrics_for("j", "v")._i is hooks._i
    for _ in range(1000):
        hooks.write("renew", "won", 0.001)
        hooks.gauges(levels())
    hooks.close()


def test_instruments_are_made_once_per_meter_provider(meters: Meters) -> None:
    # A second set on the same provider would have its observable callbacks ignored by the
    # SDK: its coordinators' levels would silently vanish.
    again = instruments(meters.provider)
    assert again is meters.instruments
    late = again.hooks("j", "late")
    late.gauges(levels(owned=4))
    assert meters.value("spate.coordination.splits.owned", {"spate.instance": "late"}) == 4


def test_default_hooks_record_once_an_sdk_meter_provider_is_global(global_meters: Meters) -> None:
    hooks = metrics_for("job-global", "w-g")
    hooks.acquired("reassigned")
    hooks.gauges(levels(owned=2, idle=False))
    where = {"spate.job": "job-global", "spate.instance": "w-g"}
    assert global_meters.value("spate.coordination.acquisitions", where) == 1
    assert global_meters.value("spate.coordination.splits.owned", where) == 2
    hooks.close()
    assert global_meters.value("spate.coordination.splits.owned", where) == 0


def test_a_balance_round_counts_its_moves_reports_loads_and_is_a_span(
    meters: Meters, spans: Spans
) -> None:
    from spate import BalanceReport

    hooks = meters.instruments.hooks("j", "w-1")
    hooks.balance(
        BalanceReport(
            round=3, reason="moved", moves=(("s1", "w-1", "w-2", 4.0),), moved_load=4.0,
            job_load=40.0, imbalance_before=1.4, imbalance_after=1.05,
            worker_loads=(("w-1", 21.0), ("w-2", 19.0)), split_loads=(("s1", 4.0), ("s2", 3.0)),
        )
    )  # fmt: skip
    w1 = {"spate.job": "j", "spate.instance": "w-1"}
    assert meters.value("spate.coordination.balance.rounds", {**w1, "spate.reason": "moved"}) == 1
    assert meters.value("spate.coordination.balance.moves", w1) == 1
    assert (
        meters.value("spate.coordination.balance.worker.load", {**w1, "spate.worker": "w-2"})
        == 19.0
    )
    assert meters.value("spate.coordination.balance.split.load", {**w1, "spate.split": "s2"}) == 3.0
    assert meters.value("spate.coordination.balance.imbalance", w1) == 1.05
    span = spans.one("spate.balance_round")
    assert span.attributes is not None
    assert span.attributes["spate.imbalance.before"] == 1.4
    assert span.attributes["spate.imbalance.after"] == 1.05
    assert list(span.attributes["spate.moves"]) == ["s1 w-1->w-2 (4)"]  # type: ignore[arg-type]
    hooks.balance(None)  # stopped leading: no loads reported any more
    assert not meters.points("spate.coordination.balance.worker.load")
