"""The simulator runs whole fleets reproducibly, and its command line reports and replays."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

from spate_testing.sim import _cli as cli
from spate_testing.sim._checker import Violation
from spate_testing.sim._history import Acked, Action, Final, Gained, StoreWrite, Verdict
from spate_testing.sim._runner import SeedResult, replay_command, run_checked, run_seed
from spate_testing.sim._scenario import Scenario


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


def test_a_seed_replays_bit_for_bit_in_another_process() -> None:
    seed = faulty_seed()
    digests = set()
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "spate_testing.sim", "--seed", str(seed)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        found = re.search(r"digest ([0-9a-f]{16})", done.stdout)
        assert found, done.stdout + done.stderr
        digests.add(found.group(1))
    assert digests == {run_seed(seed).digest[:16]}


def test_the_machine_engine_needs_no_event_loop() -> None:
    # It drives the machines on its own scheduler: nothing of Trio runs (or is patched).
    import trio

    with pytest.raises(RuntimeError):
        trio.current_time()  # no Trio run is active here ...
    result = run_seed(faulty_seed())  # ... nor needed for a whole fleet
    assert result.events > 0


def test_the_simulator_patches_nothing_of_trio_or_secrets() -> None:
    # The clock and the nonces are injected; Trio's scheduler is left alone (the Trio engine
    # says it does not replay one interleaving exactly instead of reaching into Trio).
    root = pathlib.Path(__file__).parents[2] / "spate_testing" / "sim"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr in (
                "_core",
                "_run",
                "_r",
                "_ALLOW_DETERMINISTIC_SCHEDULING",
            ):
                offenders.append(f"{where} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trio._"):
                offenders.append(f"{where} from {node.module}")
            if isinstance(node, ast.Name) and node.id == "secrets":
                offenders.append(f"{where} secrets")
    assert offenders == []


@pytest.mark.parametrize("seed", [3, 11])
def test_the_trio_engine_runs_a_seed_clean(seed: int) -> None:
    result = run_checked(Scenario.from_seed(seed), engine="trio")
    assert result.ok, result.violations


def test_a_store_wrapper_needs_the_trio_engine() -> None:
    with pytest.raises(ValueError, match="engine='trio'"):
        run_checked(Scenario.from_seed(1), wrap_store=lambda store: store)


def test_two_seeds_make_two_histories() -> None:
    assert run_seed(1).digest != run_seed(2).digest


def test_a_run_records_every_kind_of_event() -> None:
    result = run_seed(faulty_seed())
    kinds = {type(e) for e in result.history}
    assert {StoreWrite, Gained, Acked, Action, Final} <= kinds
    assert Verdict in kinds or not result.ok


def test_the_replay_command_is_the_nox_session() -> None:
    assert replay_command(17) == "nox -s sim -- --seed 17"
    assert replay_command(17, "trio") == "nox -s sim -- --seed 17 --engine trio"


def test_a_failing_seed_prints_its_seed_and_replay_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = run_seed

    def failing(
        seed: int, *, engine: str = "machines", wall_budget: float | None = None
    ) -> SeedResult:
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
