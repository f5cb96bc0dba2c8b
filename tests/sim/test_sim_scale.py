"""The fleet-scale run, small: it finishes, and its counts say who reads what (docs/protocol.md)."""

from __future__ import annotations

from spate_testing.sim._scale import ScaleSpec, run_scale


def test_a_small_fleet_scale_run_counts_who_hears_what() -> None:
    report = run_scale(ScaleSpec(workers=6, splits=120, max_in_flight=20))
    assert report.done, report.lines
    writes, deliveries = report.writes, report.deliveries
    assert writes["plain commit"] > 0
    assert deliveries.get("plain commit", 0) == 0  # a plain commit is delivered to nobody
    assert deliveries.get("completing commit", 0) == 0
    assert deliveries["lease delete"] <= writes["lease delete"]  # the leader alone hears it
    # Its three keys, and each assigned split it does not hold: progress, spec and lease.
    assert 0 < report.backstop_records <= 3 + 3 * 20
