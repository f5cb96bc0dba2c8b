"""docs/reference/telemetry.md lists every span, instrument and Prometheus series spate defines.

The names are read from the code, not from a list kept beside it: the instruments from
``spate.telemetry._metrics._INSTRUMENTS`` (and the store clients' histogram), the spans from
the source (every ``operation=`` a write is given, every argument a function takes as its
``operation``, every span started by name), the Prometheus series from the exporter itself.
A name added to the code and not to the page fails here, and so does a row left on the page
after its name left the code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from spate.telemetry._metrics import _INSTRUMENTS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "telemetry.md"
HOWTO = ROOT / "docs" / "telemetry.md"
KINDS = {
    "counter": "counter",
    "histogram": "histogram",
    "up_down_counter": "up-down counter",
    "gauge": "gauge",
}
STORE_CLIENT = ("db.client.operation.duration", "histogram", "s")
"""The store adapters' round-trip histogram (``spate_stores._tracing``)."""


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _tables(section: str) -> dict[str, list[list[str]]]:
    """The section's tables by their first column's header: each row's cells, header aside."""
    tables: dict[str, list[list[str]]] = {}
    rows: list[list[str]] = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            tables[rows[0][0]] = [row for row in rows[2:]]  # past the header and the rule
            rows = []
    return tables


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def documented_instruments() -> dict[str, tuple[str, str]]:
    """Instrument name -> (kind, unit) as the reference's Metrics table gives them."""
    found = {}
    for row in _tables(_section(REFERENCE.read_text(), "Metrics"))["instrument"]:
        (name,) = _names(row[0])
        found[name] = (row[1], row[2].strip("`"))
    return found


def test_every_instrument_is_in_the_reference_with_its_kind_and_unit() -> None:
    defined = {row.name: (KINDS[row.kind], row.unit) for row in _INSTRUMENTS}
    defined[STORE_CLIENT[0]] = STORE_CLIENT[1:]
    assert documented_instruments() == defined


def defined_spans() -> set[str]:
    """Every ``spate.<name>`` span the code opens, read from its source."""
    trees = [ast.parse(path.read_text()) for path in sorted((ROOT / "spate").rglob("*.py"))]
    takes: dict[str, set[int]] = {}  # function -> the positions of its ``operation``
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
                params = [p for p in params if p not in ("self", "cls")]
                if "operation" in params:
                    takes.setdefault(node.name, set()).add(params.index("operation"))
    found = set()
    for tree in trees:
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            for keyword in call.keywords:
                if keyword.arg == "operation" and _text(keyword.value):
                    found.add(f"spate.{_text(keyword.value)}")
            callee = call.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            starts = name in ("start_span", "start_as_current_span") and call.args
            if starts and (text := _text(call.args[0])):
                found.add(text)
            for i in takes.get(name, ()):
                if i < len(call.args) and (text := _text(call.args[i])):
                    found.add(f"spate.{text}")
    return found


def _text(node: ast.expr) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def test_every_span_is_in_the_reference() -> None:
    defined = defined_spans()
    assert len(defined) > 20
    named = set(re.findall(r"`(spate\.[a-z_-]+)`", _section(REFERENCE.read_text(), "Spans")))
    assert defined - named == set()


def test_every_span_in_the_reference_is_one_the_code_opens() -> None:
    rows = _tables(_section(REFERENCE.read_text(), "Spans"))["span"]
    assert {name for row in rows for name in _names(row[0])} - defined_spans() == set()


def test_every_prometheus_series_is_in_the_reference() -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus")
    from tests.telemetry._catalogue import exported_names

    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in exported_names()}
    listed = {
        name
        for row in _tables(_section(REFERENCE.read_text(), "Prometheus series"))[
            "Prometheus series"
        ]
        for name in _names(row[0])
    }
    assert listed == families


def test_the_how_to_leaves_the_lists_to_the_reference() -> None:
    howto = HOWTO.read_text()
    assert "reference/telemetry.md" in howto
    assert "| instrument | kind | unit |" not in howto
    assert "| span | write |" not in howto
