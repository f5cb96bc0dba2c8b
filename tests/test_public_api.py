"""The public surface of ``spate``: what is exported, and that importing it stays light."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import spate

PUBLIC = {
    # the coordinator and the high-level runner
    "open_coordinator",
    "Coordinator",
    "run_worker",
    "SplitHandle",
    "Verdict",
    "Planner",
    "Handler",
    # configuration and planning
    "Config",
    "Plan",
    "PlanContext",
    "SplitSpec",
    # progress and events
    "Progress",
    "Event",
    "Gained",
    "Lost",
    "RevokeRequested",
    "SplitRequested",
    "Quarantined",
    "AllComplete",
    "Stalled",
    # metrics hooks
    "MetricsHooks",
    "Gauges",
    # errors
    "SpateError",
    "StoreError",
    "ValueTooLarge",
    "StoreUnavailable",
    "Fenced",
    "FatalCoordinationError",
    "ConfigError",
    "PlanError",
    "__version__",
}


def test_all_is_exactly_the_public_surface() -> None:
    # Adding or removing a public name is a decision: update this set with it.
    assert set(spate.__all__) == PUBLIC
    assert len(spate.__all__) == len(set(spate.__all__))
    for name in spate.__all__:
        assert hasattr(spate, name), name


def test_public_names_are_documented_and_report_their_public_home() -> None:
    # Defined in private modules (test_exports reads the imports), they report ``spate`` as
    # their module, as trio's names report ``trio``: ``spate.Fenced`` in reprs and tracebacks.
    for name in sorted(PUBLIC - {"__version__", "Event", "Verdict", "Planner", "Handler"}):
        obj = getattr(spate, name)
        assert inspect.getdoc(obj), f"spate.{name} has no docstring"
        assert obj.__module__ == "spate", name
        assert obj.__qualname__ == name, name


def test_errors_form_one_hierarchy() -> None:
    for name in ("StoreError", "StoreUnavailable", "Fenced", "FatalCoordinationError"):
        assert issubclass(getattr(spate, name), spate.SpateError)
    assert issubclass(spate.ConfigError, spate.SpateError)
    assert issubclass(spate.PlanError, spate.SpateError)
    assert issubclass(spate.ValueTooLarge, spate.StoreError)


def test_events_and_progress_are_frozen_values() -> None:
    progress = spate.Progress(5, b"s", completed=True)
    assert progress == spate.Progress(watermark=5, state=b"s", completed=True)
    gained = spate.Gained("a", 1, progress, b"d", 2)
    assert hash(gained) == hash(spate.Gained("a", 1, progress, b"d", 2))
    assert spate.Lost("a").reason == ""
    assert spate.Stalled(completed=1, quarantined=2).quarantined == 2


def test_importing_spate_stays_light() -> None:
    code = (
        "import sys, spate; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('httpx', 'rich', 'trio_websocket')"
        " or m.startswith('opentelemetry.sdk')]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_worker_is_annotated_to_return_a_verdict() -> None:
    hints = inspect.get_annotations(spate.run_worker, eval_str=True)
    assert hints["return"] == spate.Verdict


def test_every_public_module_pins_its_exports() -> None:
    # trio's test_exports habit: each package says exactly what it offers, and says it once.
    import spate_stores
    import spate_testing

    for module in (spate, spate_stores, spate_testing):
        exported = module.__all__
        assert len(exported) == len(set(exported)), module.__name__
    assert set(spate_stores.__all__) == {
        "SUPPORTED_SCHEMES",
        "open_store",
        "redact_url",
        "store_from_url",
    }
    assert set(spate_testing.__all__) == {"blackhole", "conformance", "faults", "servers", "sim"}
    for name in spate_stores.__all__:
        assert hasattr(spate_stores, name), name
    for name in spate_testing.__all__:
        # submodules, imported on demand so importing the kit stays light
        assert importlib.import_module(f"spate_testing.{name}").__doc__, name


def test_the_simulator_pins_its_exports() -> None:
    import spate_testing.sim as sim

    assert set(sim.__all__) == {
        "ENGINES",
        "INVARIANTS",
        "Engine",
        "History",
        "Recorder",
        "Scenario",
        "Scripted",
        "SeedResult",
        "SimHang",
        "SimRun",
        "Violation",
        "Workload",
        "check",
        "final_listing",
        "replay_command",
        "run_checked",
        "run_scenario",
        "run_seed",
        "simulate",
        "simulate_machines",
    }
    assert len(sim.__all__) == len(set(sim.__all__))
    for name in sim.__all__:
        assert hasattr(sim, name), name
