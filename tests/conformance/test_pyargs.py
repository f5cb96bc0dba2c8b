"""``pytest --pyargs spate_testing.conformance`` (a store author's first try) runs the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest_pyargs(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # From an empty directory, as an author's project would be: nothing of this repository's
    # pytest configuration applies, and spate is imported from this tree.
    environment = {k: v for k, v in os.environ.items() if k != "SPATE_CONFORMANCE_URL"}
    environment.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "spate_testing.conformance", "-q",
         "-p", "no:cacheprovider"],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_it_runs_the_whole_suite_on_the_memory_store(tmp_path: Path) -> None:
    result = _pytest_pyargs(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed, result.stdout
    assert int(passed[1]) >= 50, result.stdout


def test_it_runs_against_the_url_in_spate_conformance_url(tmp_path: Path) -> None:
    # A URL no store serves: every test fails opening it, so the variable was read.
    result = _pytest_pyargs(tmp_path, SPATE_CONFORMANCE_URL="nosuch://127.0.0.1:1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "nosuch" in result.stdout
    assert not re.search(r"\d+ passed", result.stdout), result.stdout
