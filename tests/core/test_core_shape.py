"""The shape of the machine's core: small classes, parts that hold parts, wiring in one place."""

from __future__ import annotations

import ast
from pathlib import Path

from spate._core.claims import Claims
from spate._core.tenancy import Tenancies

from .world import World

CORE = Path(__file__).resolve().parents[2] / "spate" / "_core"
LIMIT = 500
"""About 450 lines, with a little slack for a docstring grown by a paragraph."""
STILL_LARGER = {"PlacementIndex", "View"}
"""Classes not yet cut down to the limit (the incremental placement and the folded view)."""


def _classes() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in sorted(CORE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                sizes[f"{path.stem}.{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_class_of_the_core_grows_past_about_450_lines() -> None:
    over = {
        name: size
        for name, size in _classes().items()
        if size > LIMIT and name.split(".")[1] not in STILL_LARGER
    }
    assert over == {}


def test_the_machine_gives_components_each_other_only_through_their_constructors() -> None:
    """No ``self._part.attribute = ...`` where the machine builds its parts."""
    tree = ast.parse((CORE / "machine.py").read_text())
    machine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Machine")
    init = next(n for n in machine.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = [
        ast.unparse(target)
        for node in ast.walk(init)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Attribute)
        and isinstance(target.value.value, ast.Name)
        and target.value.value.id == "self"
    ]
    assert assigned == []


def test_claims_hold_a_tenancies_instead_of_inheriting_from_it() -> None:
    assert not issubclass(Claims, Tenancies)
    world = World()
    a = world.start("a")
    machine = a.machine
    assert isinstance(machine._claims.tenancies, Tenancies)
    assert machine._claims.tenancies is machine._tenancies
    # As the revocations see the claims, they answer for what their tenancies hold.
    assert machine._claims.owned is machine._tenancies.owned
