"""run_conformance: the whole suite against a store URL, as ``spate conformance`` will run it."""

from __future__ import annotations

import pytest

from spate import ConfigError
from spate_testing.conformance import run_conformance
from spate_testing.conformance._runner import with_namespace


def test_the_suite_passes_against_a_memory_url(capfd: pytest.CaptureFixture[str]) -> None:
    assert run_conformance("memory://?ttl=5", ["-q", "-rs"]) == 0
    out = capfd.readouterr().out
    assert " passed" in out
    assert "memory declares ephemeral='per-key'" in out


def test_pytest_arguments_pass_through_and_the_exit_code_comes_back(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = run_conformance("memory://", ["-q", "-k", "no_test_has_this_name"])
    assert code == pytest.ExitCode.NO_TESTS_COLLECTED, capfd.readouterr().out


def test_a_failing_test_fails_the_run_and_is_reported(capfd: pytest.CaptureFixture[str]) -> None:
    # A one-byte limit makes a real store unable to hold the suite's sample values.
    code = run_conformance("memory://?max_value_size=1", ["-q", "-k", "values_round_trip"])
    out = capfd.readouterr().out
    assert code == pytest.ExitCode.TESTS_FAILED, out
    assert "FAILED" in out
    assert "test_values_round_trip_byte_exact" in out
    assert "ValueTooLarge" in out


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
