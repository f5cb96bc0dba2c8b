"""The glossary's one word for each idea (docs/glossary.md): a retired name does not come back.

Each retired name once meant a second idea beside its word's own (``echo`` quoted values in
errors and also dropped a write's own watch echo; ``fence`` named a telemetry module too), or
was a second word for one idea (``on_arrival`` beside ``PresenceChanged``; ``Member``,
``set_members``, ``members_seq`` and ``by_member`` beside *worker*, the fleet's process). The
checks look at Python names (tokens), not prose, so a comment may still say what a name used
to be; they read the packages, the benchmarks and the examples (the tests may quote a name).

Some renames land on other branches. Their checks are in ``RETIRED_ELSEWHERE``, each with the
test of whether its new name exists yet: until it does the old name is still the only one,
and the check is skipped rather than failed (it starts checking by itself once it does).
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spate", "spate_stores", "spate_testing", "bench", "examples")

RETIRED_MODULES = [
    ("spate/_echo.py", "spate/_quote.py: quote() quotes a refused value in an error"),
    ("spate/_fenced.py", "spate/_write_spans.py: the span and metrics of every guarded write"),
    ("spate/_core/view/member_table.py", "spate/_core/view/worker_table.py: the worker table"),
]

RETIRED_NAMES = [
    ("on_arrival", "on_presence_changed: it handles joins and rewrites alike"),
    ("LeaseSession", "EtcdLeaseSession: 'lease' alone is a split's lease"),
    # A process of the fleet is a worker, never a member (a store cluster's members stay).
    ("Member", "placement's Worker (vocabulary.py), bench's Worker (bench/_fleet.py)"),
    ("MemberTable", "WorkerTable: the view's worker table"),
    ("set_members", "PlacementIndex.set_workers"),
    ("members_seq", "workers_seq (WorkerTable, View)"),
    ("by_member", "AssignmentWrites.by_worker"),
    ("start_member", "bench's start_worker"),
]


def _source(path: str) -> str:
    return (ROOT / path).read_text()


def _class_names(path: str) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(_source(path))) if isinstance(n, ast.ClassDef)}


def _methods(path: str, cls: str) -> set[str]:
    for node in ast.walk(ast.parse(_source(path))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    raise AssertionError(f"no class {cls} in {path}")


TENANCIES = "spate/_core/tenancy/tenancies.py"
HOST = "spate/_core/host.py"
RECORDS = "spate/_core/records.py"

# (what is retired, whether its new name exists yet, whether the retired name is still there)
RETIRED_ELSEWHERE: list[tuple[str, Callable[[], bool], Callable[[], bool]]] = [
    (
        "Owned (the tenancy record is Tenancy)",
        lambda: "Tenancy" in _class_names(TENANCIES),
        lambda: bool(_files_naming("Owned")),
    ),
    (
        "SessionFacts.generation (the session counter is SessionFacts.session)",
        lambda: "session" in _methods(HOST, "SessionFacts"),
        lambda: "generation" in _methods(HOST, "SessionFacts"),
    ),
    (
        "records.Verdict (the stored verdict is VerdictRecord; spate.Verdict is the public one)",
        lambda: "VerdictRecord" in _class_names(RECORDS),
        lambda: "Verdict" in _class_names(RECORDS),
    ),
]


@functools.cache
def _names() -> dict[str, frozenset[str]]:
    """Every Python name token of every module of the packages, by file."""
    found: dict[str, frozenset[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            names = frozenset(t.string for t in tokens if t.type == tokenize.NAME)
            found[str(path.relative_to(ROOT))] = names
    return found


def _files_naming(name: str) -> list[str]:
    return [path for path, names in _names().items() if name in names]


@pytest.mark.parametrize(("module", "now"), RETIRED_MODULES)
def test_a_retired_module_does_not_come_back(module: str, now: str) -> None:
    assert not (ROOT / module).exists(), f"{module} is retired; its work is in {now}"


@pytest.mark.parametrize(("name", "now"), RETIRED_NAMES)
def test_a_retired_name_does_not_come_back(name: str, now: str) -> None:
    assert _files_naming(name) == [], f"{name} is retired (now {now})"


def test_no_module_imports_a_retired_module() -> None:
    for module, _ in RETIRED_MODULES:
        dotted = module.removesuffix(".py").replace("/", ".")
        stem = dotted.rsplit(".", 1)[1]
        for path in _names():
            text = _source(path)
            assert dotted not in text, (path, dotted)
            assert f"import {stem}" not in text, (path, dotted)


@pytest.mark.parametrize(
    ("what", "renamed", "still_there"), RETIRED_ELSEWHERE, ids=[r[0] for r in RETIRED_ELSEWHERE]
)
def test_a_name_retired_on_another_branch_is_gone_once_its_new_name_is_in(
    what: str, renamed: Callable[[], bool], still_there: Callable[[], bool]
) -> None:
    if not renamed():
        pytest.skip(f"not renamed in this tree yet: {what}")
    assert not still_there(), f"retired: {what}"


def test_the_glossary_names_each_idea_once() -> None:
    text = _source("docs/glossary.md")
    assert "## One word for each idea" in text
    words = ["worker", "instance id", "tenancy", "lease", "etcd lease", "session", "fence"]
    words += ["epoch", "revision", "generation", "verdict", "echo", "quote", "join"]
    table = text.split("## One word for each idea", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")]
    cells = [row.split("](")[0].lstrip("[") for row in rows]
    for word in words:
        assert cells.count(word) == 1, word
    assert "(incarnation_ms << 20) + epoch" in text
