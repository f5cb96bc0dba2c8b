"""run_conformance: the whole suite against a store URL, as ``spate conformance`` will run it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spate.errors import ConfigError
from spate_testing.conformance import run_conformance
from spate_testing.conformance._runner import with_namespace


def _run(url: str, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    # A separate interpreter: pytest.main inside this pytest run would share its state.
    code = (
        "import sys; from spate_testing.conformance import run_conformance; "
        f"sys.exit(run_conformance({url!r}, {list(pytest_args)!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_the_suite_passes_against_a_memory_url() -> None:
    result = _run("memory://?ttl=5", "-q", "-rs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert "memory declares ephemeral='per-key'" in result.stdout


def test_pytest_arguments_pass_through_and_the_exit_code_comes_back() -> None:
    result = _run("memory://", "-q", "-k", "no_test_has_this_name")
    assert result.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout


def test_an_unusable_url_fails_before_any_test_runs() -> None:
    with pytest.raises(ConfigError, match="unsupported store URL"):
        run_conformance("bogus://host")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("memory://", "memory://?namespace=ns"),
        ("etcd://h:1?ttl=2", "etcd://h:1?ttl=2&namespace=ns"),
        ("etcd://h:1?namespace=job&ttl=2", "etcd://h:1?ttl=2&namespace=job-ns"),
    ],
)
def test_each_client_gets_the_suites_namespace(url: str, expected: str) -> None:
    assert with_namespace(url, "ns") == expected
