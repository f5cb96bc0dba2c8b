"""The shape of the package: no import cycles, and a core that needs no event loop.

Every import counts here, including those under ``TYPE_CHECKING`` and those inside functions:
a cycle hidden behind either is still two modules that cannot be read, tested or changed apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("spate", "spate_stores", "spate_testing")


def _modules(package: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports, anywhere in its source.

    ``from pkg import sub`` counts as importing ``pkg.sub`` when that is a module (not as
    importing ``pkg``); a package's own ``__init__`` is not counted as a dependency of its
    submodules, since Python runs it before any of them regardless.
    """
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            subs = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
            if subs:
                out |= subs
            elif base in known:
                out.add(base)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_the_import_graph_has_no_cycles(package: str) -> None:
    known = _modules(package)
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    # Package __init__ files re-export their children (the table of contents); they are
    # the roots of the graph, so an edge into one from inside the package is the only way
    # they could join a cycle, and that is what this reports.
    assert _cycles(graph) == []


def test_the_checker_sees_a_cycle_hidden_behind_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nB = 1\n"
    )
    known = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_nothing_the_machine_imports_reaches_an_event_loop_or_a_store_client() -> None:
    # The sans-IO core: everything spate._core imports, directly or through other spate
    # modules, is free of Trio, of the runtime and of any transport. (Importing it at run
    # time still runs the package __init__, the public table of contents, which does.)
    known = _modules("spate")
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    reached: set[str] = set()
    todo = [name for name in known if name.startswith("spate._core")]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    assert not {name for name in reached if name.startswith("spate._runtime")}
    for name in sorted(reached):
        tops = _external_imports(known[name])
        assert not tops & {"trio", "outcome_trio", "httpx", "trio_websocket", "spate_stores"}, (
            name,
            tops,
        )


def _external_imports(path: Path) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops.add(node.module.split(".")[0])
    return tops


def test_every_core_module_is_free_of_trio() -> None:
    for name, path in _modules("spate").items():
        if not name.startswith("spate._core"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(not a.name.startswith("trio") for a in node.names), name
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("trio", "spate._runtime")), name


# -- the core's folders -------------------------------------------------------------------

FOLDERS = ("balance", "leader", "membership", "placement", "tenancy", "view")
"""The core's folders (``spate._core.<folder>``); the frame (machine, flows, records) is the top."""


def _folder(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["spate", "_core"] else None


def _core_graph() -> dict[str, set[str]]:
    known = _modules("spate")
    return {
        name: _imports(name, path, known)
        for name, path in known.items()
        if name.startswith("spate._core.")
    }


def _crossings(graph: dict[str, set[str]], one: str, other: str) -> list[str]:
    return sorted(
        f"{name} -> {dep}"
        for name, deps in graph.items()
        for dep in deps
        if {_folder(name), _folder(dep)} == {one, other}
    )


def test_the_leader_and_the_tenancies_share_no_import() -> None:
    # The leader decides where splits go; a worker's tenancy holds what it was given. They
    # meet only in the records and in the machine's wiring: a rule that needs both is the
    # machine's to wire, not one folder's to reach into the other for.
    assert _crossings(_core_graph(), "leader", "tenancy") == []


def test_no_folder_of_the_core_imports_the_machine() -> None:
    graph = _core_graph()
    offenders = sorted(
        n for n, deps in graph.items() if _folder(n) and "spate._core.machine" in deps
    )
    assert offenders == []


def test_every_folder_of_the_core_says_what_lives_there() -> None:
    for folder in FOLDERS:
        init = ROOT / "spate" / "_core" / folder / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, folder
        modules = sorted(p.name for p in init.parent.glob("*.py") if p.name != "__init__.py")
        if folder != "balance":  # (balance/ re-exports its decision: its text is its API)
            missing = [m for m in modules if f"``{m}``" not in doc]
            assert missing == [], (folder, missing)


def _folder_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Pairs of the core's folders that import each other, each as ``a <-> b``."""
    edges = {
        (_folder(name), _folder(dep))
        for name, deps in graph.items()
        for dep in deps
        if _folder(name) and _folder(dep) and _folder(name) != _folder(dep)
    }
    return sorted(f"{a} <-> {b}" for a, b in edges if (b, a) in edges and str(a) < str(b))


def test_no_two_folders_of_the_core_import_each_other() -> None:
    # The folders stand in layers (placement below balance below the leader, the view below
    # both): a folder that imports one above it is a layer that cannot be read on its own.
    assert _folder_cycles(_core_graph()) == []


def test_the_folder_cycle_rule_sees_two_folders_importing_each_other() -> None:
    graph = {
        "spate._core.placement.a": {"spate._core.balance.b"},
        "spate._core.balance.b": {"spate._core.placement.c"},
        "spate._core.placement.c": set(),
    }
    assert _folder_cycles(graph) == ["balance <-> placement"]


def test_the_folder_rule_sees_a_crossing() -> None:
    graph = {
        "spate._core.leader.a": {"spate._core.tenancy.b"},
        "spate._core.tenancy.b": {"spate._core.records"},
    }
    assert _crossings(graph, "leader", "tenancy") == [
        "spate._core.leader.a -> spate._core.tenancy.b"
    ]


# -- the machine's facade ------------------------------------------------------------------

COMPONENTS = frozenset({"claims", "leader", "placement_changes", "revocations", "verdict", "view"})
"""The machine's components: nothing outside spate._core reaches them through a machine."""


def _is_machine(node: ast.expr) -> bool:
    """Whether ``node`` names a machine: ``machine``, ``self._machine``, ``core.machine`` ..."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return isinstance(name, str) and name.lstrip("_") == "machine"


def _reaches_into_the_machine(source: str) -> list[str]:
    """The attribute reads ``<a machine>.<component>`` in ``source`` (public or private name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.lstrip("_") in COMPONENTS
            and _is_machine(node.value)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_the_core_reaches_into_the_machine() -> None:
    # The runtime, the simulator and the benchmarks call the machine's facade, as h11's users
    # call Connection and never its state: a rule reached through a component has two homes.
    offenders = {}
    for package in (*PACKAGES, "bench"):
        for name, path in _modules(package).items():
            if name.startswith("spate._core"):
                continue
            found = _reaches_into_the_machine(path.read_text())
            if found:
                offenders[name] = found
    assert offenders == {}


def test_the_facade_check_sees_a_component_reached_through_a_machine() -> None:
    source = (
        "self._machine.claims.commit_flow(s, p)\n"
        "core.machine._leader.replan_tick()\n"
        "machine.view.already_seen(k, key, r)\n"
        "status.leader\n"
        "self.view.get(key)\n"
        "machine.owned\n"
    )
    assert _reaches_into_the_machine(source) == [
        "line 1: self._machine.claims",
        "line 2: core.machine._leader",
        "line 3: machine.view",
    ]


# -- the simulator's machine engine ------------------------------------------------------------

MACHINE_ENGINE = (
    "spate_testing.sim._process",
    "spate_testing.sim._flowrunner",
    "spate_testing.sim._handlers",
    "spate_testing.sim._machines",
    "spate_testing.sim._clockwork",
    "spate_testing.sim._model",
    "spate_testing.sim._session",
    "spate_testing.sim._recorder",
)
"""The simulator's own runtime for the machine (the Trio engine, ``fleet``, runs the real one)."""


def test_the_machine_engine_imports_nothing_of_the_trio_runtime() -> None:
    # The policy both runtimes follow (startup, backoffs, the ticker schedule, the echo and
    # hold-back rules) is the machine's: a machine engine that imports the Trio runtime's is
    # a copy of that runtime waiting to drift from it.
    known = {**_modules("spate"), **_modules("spate_testing")}
    for name in MACHINE_ENGINE:
        imported = _imports(name, known[name], known)
        assert not {m for m in imported if m.startswith("spate._runtime")}, name
