"""The public boundary, in the manner of trio's ``test_exports``.

A module is public exactly when no component of its dotted name starts with an underscore.
The public modules are a decision, listed here; each says what it offers in ``__all__``; and
every public name has one home: it is exported by exactly one public module, it is defined in
a private module behind it (so moving code never moves the API), and it has an entry in the API
reference.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest

import spate
import spate_stores
import spate_testing

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Adding a public module is a decision: add it here, to the API reference, and to the docs.
PUBLIC_MODULES = {
    "spate": {"spate", "spate.ops", "spate.store", "spate.telemetry"},
    "spate_stores": {
        "spate_stores",
        "spate_stores.etcd",
        "spate_stores.memory",
        "spate_stores.nats",
    },
    # The test kit: what docs/testing.md teaches (the conformance suite, the server fixtures,
    # faults, the partitioning proxy, the simulator's entry points: `spate_testing.sim` and
    # `python -m spate_testing.sim.chaos`). The simulator's parts are private modules behind
    # `spate_testing.sim`, as trio.testing is one module.
    "spate_testing": {
        "spate_testing",
        "spate_testing.blackhole",
        "spate_testing.conformance",
        "spate_testing.conformance.test_store_conformance",  # pytest --pyargs collects it
        "spate_testing.faults",
        "spate_testing.servers",
        "spate_testing.servers.clusters",  # the 3-member etcd and NATS clusters
        "spate_testing.servers.etcd",
        "spate_testing.servers.nats",
        "spate_testing.sim",
        "spate_testing.sim.chaos",
    },
}


def _is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _all_modules(package: types.ModuleType) -> list[str]:
    found = [package.__name__]
    for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
        found.append(info.name)
    return found


def _public_names(module: types.ModuleType) -> list[str]:
    return [n for n in dir(module) if not n.startswith("_")]


@pytest.mark.parametrize("package", [spate, spate_stores, spate_testing], ids=lambda p: p.__name__)
def test_the_public_modules_are_exactly_the_listed_ones(package: types.ModuleType) -> None:
    public = {m for m in _all_modules(package) if _is_public(m)}
    assert public == PUBLIC_MODULES[package.__name__]


def _spate_public() -> list[types.ModuleType]:
    return [importlib.import_module(m) for m in sorted(PUBLIC_MODULES["spate"])]


def test_every_public_module_of_spate_says_what_it_exports() -> None:
    for module in _spate_public():
        exported = module.__all__
        assert len(exported) == len(set(exported)), module.__name__
        for name in exported:
            assert hasattr(module, name), f"{module.__name__}.{name}"
        # Nothing public leaks in beside __all__ but the public submodules themselves.
        submodules = {
            n
            for n in _public_names(module)
            if isinstance(getattr(module, n), types.ModuleType)
            and f"{module.__name__}.{n}" in PUBLIC_MODULES["spate"]
        }
        assert set(_public_names(module)) - submodules == set(exported) - {"__version__"}, (
            module.__name__
        )


def _ours(obj: object) -> bool:
    """A class or function spate defines (not a constant, nor an alias of a builtin type)."""
    home = getattr(obj, "__module__", "") or ""
    return (inspect.isclass(obj) or inspect.isfunction(obj)) and home.split(".")[0] == "spate"


def test_every_public_name_is_exported_exactly_once() -> None:
    homes: dict[int, list[str]] = {}
    names: dict[str, list[str]] = {}
    for module in _spate_public():
        for name in module.__all__:
            obj = getattr(module, name)
            if _ours(obj):
                homes.setdefault(id(obj), []).append(f"{module.__name__}.{name}")
            names.setdefault(name, []).append(module.__name__)
    twice = [where for where in homes.values() if len(where) > 1]
    assert not twice, f"exported more than once: {twice}"
    clashes = {n: ms for n, ms in names.items() if len(ms) > 1}
    assert not clashes, f"one name, two meanings: {clashes}"


def _source(module: types.ModuleType) -> ast.Module:
    assert module.__file__, module.__name__
    return ast.parse(Path(module.__file__).read_text())


def test_every_public_name_is_defined_in_a_private_home() -> None:
    # Read from the source: each public name's ``__module__`` names its public home (below).
    for module in _spate_public():
        imported = {
            alias.asname or alias.name: node.module
            for node in _source(module).body
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        for name in module.__all__:
            home = imported.get(name)
            where = f"{module.__name__}.{name} is defined in {home or module.__name__}"
            assert home is not None, where
            assert not _is_public(home), f"{where}: move it behind an underscore"


def _every_public_module() -> list[types.ModuleType]:
    return [importlib.import_module(m) for ms in PUBLIC_MODULES.values() for m in sorted(ms)]


def test_public_names_report_their_public_home() -> None:
    # As trio's fixup_module_metadata: reprs, tracebacks and pickles name spate.Fenced, not
    # spate._errors.Fenced. A name another public module defines keeps that module as home.
    for module in _every_public_module():
        for name in getattr(module, "__all__", []):
            if module.__name__ == "spate_testing":
                continue  # its __all__ lists submodules, imported on demand
            obj = getattr(module, name)
            home = getattr(obj, "__module__", None)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not isinstance(home, str):
                continue
            if home.split(".")[0] not in PUBLIC_MODULES:
                continue  # an alias of someone else's (trio's, typing's)
            assert _is_public(home), f"{module.__name__}.{name} reports {home}"
            assert home == module.__name__ or home in PUBLIC_MODULES[home.split(".")[0]], name
            if inspect.isclass(obj):
                for member in vars(obj).values():
                    method_home = getattr(member, "__module__", "") or ""
                    if inspect.isfunction(member) and method_home.split(".")[0] in PUBLIC_MODULES:
                        assert _is_public(method_home), (name, member)


def test_a_public_name_reads_as_its_public_home() -> None:
    import pickle

    import spate_testing.sim

    assert spate.Fenced.__module__ == "spate"
    assert repr(spate.Fenced) == "<class 'spate.Fenced'>"
    assert repr(spate.store.Won) == "<class 'spate.store.Won'>"
    assert spate.run_worker.__module__ == "spate"
    assert spate.Coordinator.split.__module__ == "spate"
    assert spate.telemetry.OTelMetrics.__module__ == "spate.telemetry"
    assert spate_testing.sim.History.__module__ == "spate_testing.sim"
    # Pickles find a public name at its public home.
    progress = spate.Progress(3, b"s", completed=True)
    assert b"spate._events" not in pickle.dumps(progress)
    assert pickle.loads(pickle.dumps(progress)) == progress
    assert pickle.loads(pickle.dumps(spate.store.Keyspace.DURABLE)) is spate.store.Keyspace.DURABLE


def test_every_package_pins_its_exports() -> None:
    # trio's test_exports habit: each package says exactly what it offers, and says it once.
    for module in (spate, spate_stores, spate_testing):
        exported = module.__all__
        assert len(exported) == len(set(exported)), module.__name__
    assert set(spate_stores.__all__) == {
        "SUPPORTED_SCHEMES",
        "open_store",
        "redact_url",
        "store_from_url",
    }
    assert set(spate_testing.__all__) == {"blackhole", "conformance", "faults", "servers", "sim"}
    for name in spate_stores.__all__:
        assert hasattr(spate_stores, name), name
    for name in spate_testing.__all__:
        # submodules, imported on demand so importing the kit stays light
        assert importlib.import_module(f"spate_testing.{name}").__doc__, name


def test_the_simulator_pins_its_exports() -> None:
    import spate_testing.sim as sim

    assert set(sim.__all__) == {
        "ENGINES",
        "INVARIANTS",
        "Engine",
        "History",
        "Recorder",
        "Scenario",
        "Scripted",
        "SeedResult",
        "SimHang",
        "SimRun",
        "Violation",
        "Workload",
        "check",
        "final_listing",
        "replay_command",
        "run_checked",
        "run_scenario",
        "run_seed",
        "simulate",
        "simulate_machines",
    }
    assert len(sim.__all__) == len(set(sim.__all__))
    for name in sim.__all__:
        assert hasattr(sim, name), name


def test_every_public_class_and_function_has_a_docstring() -> None:
    for module in _spate_public():
        assert inspect.getdoc(module), module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"


def _documented() -> set[str]:
    """What the docs render: each ``::: a.b`` entry, the ``members:`` listed beneath one, and,
    for a whole-module entry with no ``members:`` list, every name of that module's ``__all__``.
    """
    found: set[str] = set()
    for page in DOCS.rglob("*.md"):
        current: str | None = None
        members: list[str] | None = None
        entries: list[tuple[str, list[str] | None]] = []
        for line in [*page.read_text().splitlines(), ""]:
            entry = re.match(r"^::: ([\w.]+)\s*$", line)
            if entry or (line and not line.startswith(" ")) or not line:
                if current is not None:
                    entries.append((current, members))
                current, members = (entry.group(1), None) if entry else (None, None)
            elif current is not None and re.match(r"^\s+members:\s*$", line):
                members = []
            elif members is not None and (member := re.match(r"^\s+- (\w+)\s*$", line)):
                members.append(member.group(1))
        for name, listed in entries:
            found.add(name)
            if listed is not None:
                found.update(f"{name}.{m}" for m in listed)
            elif name in PUBLIC_MODULES["spate"]:
                found.update(f"{name}.{m}" for m in importlib.import_module(name).__all__)
    return found


def test_every_public_name_is_in_the_api_reference() -> None:
    documented = _documented()
    missing = [
        f"{module.__name__}.{name}"
        for module in _spate_public()
        for name in module.__all__
        if name != "__version__" and f"{module.__name__}.{name}" not in documented
    ]
    assert missing == [], f"add these to the API reference (docs/reference/): {missing}"


@pytest.mark.parametrize("name", ["spate.store", "spate.ops"])
def test_a_public_submodule_only_names_what_private_modules_define(name: str) -> None:
    # As trio.abc is trio's: a docstring, re-exports and __all__, so moving code never moves
    # the API and nothing is defined where a user might mistake an internal for API.
    path = ROOT / (name.replace(".", "/") + ".py")
    body = ast.parse(path.read_text()).body
    for node in body[1:]:
        if isinstance(node, ast.ImportFrom):
            assert node.module, name
            assert not _is_public(node.module), (name, node.module)
        else:
            assert isinstance(node, ast.Assign), f"{name} defines more than re-exports: {node}"
            assert [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"], name


def test_the_operators_api_does_not_reach_into_the_runtime() -> None:
    for name in ("spate/ops.py", "spate/_ops.py"):
        for node in ast.walk(ast.parse((ROOT / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("spate._runtime"), (name, node.module)


def test_the_test_kit_keeps_at_most_ten_public_modules() -> None:
    # A user learns the kit from its module list: past ten, a part belongs behind an underscore
    # or inside a neighbour (the two cluster modules became ``spate_testing.servers.clusters``).
    public = {m for m in _all_modules(spate_testing) if _is_public(m)} - {"spate_testing"}
    assert len(public) <= 10, sorted(public)
