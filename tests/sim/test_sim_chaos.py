"""A short chaos run per real store (the full one is `nox -s chaos`)."""

from __future__ import annotations

import pytest

from spate_testing.sim.chaos import run_chaos


@pytest.mark.slow
@pytest.mark.etcd
def test_a_short_chaos_run_on_etcd_keeps_every_invariant() -> None:
    result = run_chaos("etcd", workers=3, splits=12, seconds=12.0, lease=4.0, seed=3)
    assert result.ok, result.violations
    assert result.actions.get("kill", 0) + result.actions.get("stop", 0) > 0
    assert result.acked_commits > 0


@pytest.mark.slow
@pytest.mark.nats
def test_a_short_chaos_run_on_nats_keeps_every_invariant() -> None:
    result = run_chaos("nats", workers=3, splits=12, seconds=12.0, lease=4.0, seed=3)
    assert result.ok, result.violations
    assert result.actions.get("kill", 0) + result.actions.get("stop", 0) > 0
    assert result.acked_commits > 0


def _fair_blame_holds(result: object) -> None:
    from spate_testing.sim.chaos import ChaosResult

    assert isinstance(result, ChaosResult)
    assert result.ok, result.violations
    assert result.poison
    for split in result.poison:
        assert result.outcomes[split] == "quarantined", result.table()
    assert ("healthy", "quarantined") not in result.table(), result.table()


@pytest.mark.slow
@pytest.mark.etcd
def test_a_process_killing_poison_split_alone_is_quarantined_on_etcd() -> None:
    _fair_blame_holds(
        run_chaos("etcd", workers=3, splits=12, seconds=12.0, lease=4.0, seed=3, poison=1)
    )


@pytest.mark.slow
@pytest.mark.nats
def test_a_process_killing_poison_split_alone_is_quarantined_on_nats() -> None:
    _fair_blame_holds(
        run_chaos("nats", workers=3, splits=12, seconds=12.0, lease=4.0, seed=3, poison=1)
    )
