"""The benchmark suites import: ``nox -s bench`` is not in the default run, so a rename that
breaks one would otherwise go unseen until someone measures."""

from __future__ import annotations

import importlib

import pytest

SUITES = [
    "commit",
    "failover",
    "scale",
    "steady",
    "cluster",
    "fleet",
    "makespan",
    "balance",
    "balance_move",
    "balance_runtime",
    "bench_etcd",
    "kazoo",
    "_kazoo_worker",
]


@pytest.mark.parametrize("name", SUITES)
def test_a_benchmark_suite_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")


def test_every_suite_is_registered() -> None:
    main = importlib.import_module("bench.__main__")
    assert set(main.SUITES) == {
        "commit",
        "failover",
        "handover",
        "scale",
        "steady",
        "cluster",
        "fleet",
        "makespan",
        "balance",
        "balance-move",
        "balance-runtime",
        "kazoo",
    }
