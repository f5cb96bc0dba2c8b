"""What an installed spate promises: light imports, a working console script, type hints."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import spate

OPTIONAL_MODULES = ["httpx", "trio_websocket", "rich", "opentelemetry.sdk"]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )


@pytest.mark.parametrize("package", ["spate", "spate.store", "spate_stores", "spate_stores.memory"])
def test_importing_the_core_pulls_in_no_optional_dependency(package: str) -> None:
    # In a fresh interpreter: this test process has imported half the world already.
    result = _python(
        f"import sys, {package}; print(sorted(m for m in {OPTIONAL_MODULES!r} if m in sys.modules))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"import {package} loaded {result.stdout.strip()}"


# The console script the package installs, and the module form that works without it.
COMMANDS = {
    "script": [str(Path(sys.executable).with_name("spate"))],
    "module": [sys.executable, "-m", "spate"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_spate_version(command: list[str]) -> None:
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spate {spate.__version__}"


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_spate_help(command: list[str]) -> None:
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: spate")


@pytest.mark.parametrize("package", ["spate", "spate_stores", "spate_testing"])
def test_every_package_ships_py_typed(package: str) -> None:
    assert resources.files(package).joinpath("py.typed").is_file()
