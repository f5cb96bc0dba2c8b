"""The public API of ``spate``: which names it offers, how they behave, that importing it is light.

Where names live (which modules are public, each name's home, its docs) is tests/test_exports.py.
"""

from __future__ import annotations

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
    "Left",
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
    "BalanceReport",
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
    # (That each name exists, once, with a docstring and a private home: tests/test_exports.py.)
    assert set(spate.__all__) == PUBLIC


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
    # A verdict, or Left when a signal ended it (only with handle_signals, off by default:
    # the overloads give a plain call the Verdict type, as mypy checks in the docs' programs).
    hints = inspect.get_annotations(spate.run_worker, eval_str=True)
    assert hints["return"] == spate.Verdict | spate.Left
    assert inspect.signature(spate.run_worker).parameters["handle_signals"].default is False
