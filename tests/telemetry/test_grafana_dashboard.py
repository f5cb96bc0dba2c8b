"""docs/grafana/spate-dashboard.json queries only series spate exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._catalogue import exported_names

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "spate-dashboard.json"
LABELS = {"spate_job", "spate_instance", "spate_operation", "spate_outcome", "spate_reason"}
LABELS |= {"spate_domain", "le"}
BLAST_RADIUS = "spate_placement_blast_radius"
"""The placement panel's series: the leader's placement report, as the blast-radius gauge."""


def queries(node: Any) -> Iterator[str]:
    """Every PromQL expression of the dashboard: panel targets and template variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            promql = key == "expr" or (key == "query" and "(" in str(value))
            if promql and isinstance(value, str):
                yield value
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def metric_names(expr: str) -> set[str]:
    """The series names an expression reads (label matchers and grouping removed)."""
    bare = re.sub(r"\{[^}]*\}", " ", expr)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)", r"\1", bare)
    return {name for name in re.findall(r"[a-zA-Z_:][\w:]*", bare) if name.startswith("spate_")}


def label_names(expr: str) -> set[str]:
    names: set[str] = set()
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in grouping.split(",") if n.strip()}
    label_values = re.findall(r"label_values\([^,]*,\s*(\w+)\s*\)", expr)
    return names | set(label_values)


def allowed_names() -> frozenset[str]:
    return exported_names()


def unknown_names(dashboard: Any) -> list[str]:
    allowed = allowed_names()
    found = []
    for expr in queries(dashboard):
        names = metric_names(expr)
        if not names:
            found.append(f"{expr!r} reads no spate series")
        found += [f"{n} in {expr!r}" for n in sorted(names - allowed)]
        found += [f"label {n} in {expr!r}" for n in sorted(label_names(expr) - LABELS)]
    return found


def load() -> Any:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_every_query_of_the_dashboard_names_a_series_spate_exports() -> None:
    dashboard = load()
    assert len(list(queries(dashboard))) >= 15
    assert unknown_names(dashboard) == []


def test_the_dashboard_covers_ownership_commits_losses_revocations_and_blast_radius() -> None:
    read = set().union(*(metric_names(q) for q in queries(load())))
    assert {
        "spate_coordination_splits_owned",
        "spate_coordination_writes_total",
        "spate_coordination_losses_total",
        "spate_coordination_revocations_total",
        BLAST_RADIUS,
    } <= read


@pytest.mark.parametrize(
    "expr",
    [
        "rate(spate_coordination_commits_total[5m])",  # no such series
        "spate_coordination_writes",  # the OTel name, not the Prometheus one
        'sum by (spate_nope) (spate_coordination_writes_total{spate_job="x"})',
        "vector(1)",
    ],
)
def test_the_check_catches_a_query_of_something_spate_does_not_export(expr: str) -> None:
    assert unknown_names({"panels": [{"targets": [{"expr": expr}]}]}) != []
