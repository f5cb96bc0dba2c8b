"""The suite's own assertions are rewritten by pytest, so a failure names the values compared.

The adapter guide promises failures that name the rule and the values involved; a module of
the suite left out of ``register_assert_rewrite`` fails with a bare ``AssertionError``. Both
tests run pytest in a fresh process with plugin autoloading off (as many CI runs have it),
loading pytest-trio and the suite's plugin by name: then nothing but the suite's own
``register_assert_rewrite`` marks its modules (an installed spate's plugin entry point marks
the whole package otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EVERY_MODULE = """
import ast
import importlib
import pkgutil
from pathlib import Path

import spate_testing.conformance as suite


def test_every_module_with_an_assert_is_rewritten():
    checked = []
    for info in pkgutil.iter_modules(suite.__path__, suite.__name__ + "."):
        module = importlib.import_module(info.name)
        tree = ast.parse(Path(module.__file__).read_text())
        if any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
            assert type(module.__loader__).__name__ == "AssertionRewritingHook", info.name
            checked.append(info.name)
    assert "spate_testing.conformance._batched" in checked
"""

EMPTY_GROUP_ANSWERED = """
import pytest
import trio.testing

from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.conformance import StoreConformance


class Chatty(MemoryStore):
    async def write_many(self, writes, *, session=None):
        if not writes:
            return ["surprise"]
        return await super().write_many(writes, session=session)


class TestChatty(StoreConformance):
    @pytest.fixture
    def store_factory(self):
        server = MemoryServer()
        return lambda namespace: Chatty(namespace=namespace, server=server)

    @pytest.fixture
    def spate_clock(self):
        return trio.testing.MockClock(autojump_threshold=0)
"""


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_it.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    plugins = ["-p", "pytest_trio.plugin", "-p", "spate_testing.conformance._plugin"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-p", "no:cacheprovider", *plugins, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        timeout=120,
    )


def test_every_module_of_the_suite_with_an_assert_is_rewritten(tmp_path: Path) -> None:
    result = _pytest(tmp_path, EVERY_MODULE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_batched_writes_failure_shows_the_values(tmp_path: Path) -> None:
    result = _pytest(tmp_path, EMPTY_GROUP_ANSWERED, "-k", "test_an_empty_group_writes_nothing")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "assert ['surprise'] == []" in result.stdout, result.stdout
