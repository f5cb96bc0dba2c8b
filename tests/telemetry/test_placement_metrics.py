"""The leader's placement metrics: blast radius and splits and weight per failure domain."""

from __future__ import annotations

import pytest

from spate._core.placement.report import placement_report

from .conftest import Meters


def test_the_leaders_placement_is_observed_per_domain_until_it_stops_leading(
    meters: Meters,
) -> None:
    leader = meters.instruments.hooks("j", "lead")
    follower = meters.instruments.hooks("j", "other")
    report = placement_report(
        {"a1": ("s1", "s2"), "b1": ("s3",)},
        {"a1": "zone-a/h1", "b1": "zone-b/h1"},
        {"s1": 1, "s2": 2, "s3": 3},
        0,
    )
    leader.placement(report)
    assert meters.value("spate.placement.blast_radius", {"spate.instance": "lead"}) == (
        pytest.approx(0.5)
    )
    assert meters.value("spate.placement.domain.splits", {"spate.domain": "zone-a"}) == 2
    assert meters.value("spate.placement.domain.weight", {"spate.domain": "zone-b"}) == 3
    assert not [a for a, _ in meters.points("spate.placement.blast_radius")
                if a["spate.instance"] == "other"]  # fmt: skip
    leader.placement(None)  # deposed: its last report is no longer current
    assert meters.points("spate.placement.blast_radius") == []
    follower.close()
