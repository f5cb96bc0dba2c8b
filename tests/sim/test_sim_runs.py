"""The simulator runs whole fleets reproducibly, and its command line reports and replays."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spate_testing.sim import cli
from spate_testing.sim.checker import Violation
from spate_testing.sim.history import Acked, Action, Final, Gained, StoreWrite, Verdict
from spate_testing.sim.runner import SeedResult, replay_command, run_seed
from spate_testing.sim.scenario import Scenario


def faulty_seed() -> int:
    """A seed whose scenario injects random store faults and chaos actions."""
    for seed in range(100):
        scenario = Scenario.from_seed(seed)
        if scenario.rates.maybe_landed_rate > 0 and dict(scenario.weights).get("kill"):
            return seed
    raise AssertionError("no faulty seed among the first 100")


def test_a_seed_replays_bit_for_bit() -> None:
    seed = faulty_seed()
    first, second = run_seed(seed), run_seed(seed)
    assert first.digest == second.digest
    assert first.faults == second.faults


def test_two_seeds_make_two_histories() -> None:
    assert run_seed(1).digest != run_seed(2).digest


def test_a_run_records_every_kind_of_event() -> None:
    result = run_seed(faulty_seed())
    kinds = {type(e) for e in result.history}
    assert {StoreWrite, Gained, Acked, Action, Final} <= kinds
    assert Verdict in kinds or not result.ok


def test_the_replay_command_is_the_nox_session() -> None:
    assert replay_command(17) == "nox -s sim -- --seed 17"


def test_a_failing_seed_prints_its_seed_and_replay_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = run_seed

    def failing(seed: int, *, wall_budget: float | None = None) -> SeedResult:
        result = real(seed)
        return SeedResult(
            seed=seed,
            violations=(Violation("lost-ack", "made up for this test"),),
            digest=result.digest,
            faults=result.faults,
            sim_seconds=result.sim_seconds,
            wall_seconds=result.wall_seconds,
            events=result.events,
            history=result.history,
        )

    monkeypatch.setattr(cli, "run_seed", failing)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert cli.main(["--seed", "3"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION [lost-ack] made up for this test" in out
    assert "seed 3 FAILED; replay with: nox -s sim -- --seed 3" in out


def test_the_command_line_runs_seeds_in_parallel_processes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spate_testing.sim", "--seeds", "4", "--start", "10", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "4 seeds (10..13)" in done.stdout, done.stdout + done.stderr
    assert "simulated hours" in done.stdout
