"""Third-party store adapters: a distribution registers one under the ``spate.stores`` group.

Each test installs a tiny distribution of its own into a temporary directory, laid out as
``pip install --target`` lays a wheel out (the package, and a ``.dist-info`` holding its
metadata and ``entry_points.txt`` written from its ``pyproject.toml``). Writing the layout
directly needs no build backend, which an offline test run may not have. The end-to-end test
puts that directory on a subprocess's ``PYTHONPATH``; the others on ``sys.path`` for the test's
length. Nothing is left installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import spate_stores
from spate import ConfigError, StoreError
from spate.store import Keyspace, Won
from spate_stores import _entry_points, open_store, store_from_url
from spate_stores.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-store-adapter.md"

# The adapter of docs/writing-a-store-adapter.md: myscheme://rest is memory://rest.
ADAPTER = """
from spate_stores.memory import MemoryStore


def store_from_url(url: str) -> MemoryStore:
    return MemoryStore.from_url("memory://" + url.split("://", 1)[1])
"""


def _guide_pyproject() -> str:
    """The ``pyproject.toml`` the adapter guide shows, so the guide cannot go stale."""
    blocks = re.findall(r"```toml\n(.*?)```", GUIDE.read_text(), flags=re.S)
    (block,) = [b for b in blocks if '"spate.stores"' in b]
    return str(block)


def install(target: Path, pyproject: str, modules: dict[str, str]) -> None:
    """Install a distribution into ``target`` as ``pip install --target`` would lay it out."""
    project = tomllib.loads(pyproject)["project"]
    for module, source in modules.items():
        (target / f"{module}.py").write_text(source)
    name = re.sub(r"[-_.]+", "_", project["name"])
    info = target / f"{name}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, entries in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines.extend(f"{key} = {value}" for key, value in entries.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")


def pyproject(name: str, **schemes: str) -> str:
    entries = "\n".join(f'{scheme} = "{value}"' for scheme, value in schemes.items())
    return (
        f'[project]\nname = "{name}"\nversion = "1.0"\n\n'
        f'[project.entry-points."spate.stores"]\n{entries}\n'
    )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` to install into; what was read of it is forgotten after."""
    target = tmp_path / "site"
    target.mkdir()
    monkeypatch.syspath_prepend(str(target))
    before = set(sys.modules)
    _entry_points.forget()
    yield target
    _entry_points.forget()
    for module in set(sys.modules) - before:
        if getattr(sys.modules[module], "__file__", "") and str(target) in str(
            sys.modules[module].__file__
        ):
            del sys.modules[module]


def _run(target: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env, timeout=120
    )


OPEN_BY_URL = """
import trio
from spate.store import Keyspace, Won
from spate_stores import open_store, store_from_url
from spate_stores.memory import MemoryStore

async def main():
    assert isinstance(store_from_url("myscheme://by-url?ttl=3"), MemoryStore)
    async with open_store("myscheme://by-url?ttl=3") as store:
        assert store.namespace == "by-url" and store.ephemeral_ttl == 3
        assert isinstance(await store.create(Keyspace.DURABLE, "k", b"v"), Won)
        print("opened", type(store).__name__)

trio.run(main)
"""


def test_an_installed_adapter_opens_by_url_everywhere(tmp_path: Path) -> None:
    target = tmp_path / "site"
    target.mkdir()
    install(target, _guide_pyproject(), {"spate_myscheme": ADAPTER})

    opened = _run(target, "-c", OPEN_BY_URL)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "opened MemoryStore"

    status = _run(
        target, "-m", "spate", "status", "--store", "myscheme://ops", "--job", "j", "--json"
    )
    # The adapter opened (a fresh memory store): status reads it and finds no job there.
    assert status.returncode == 2, status.stderr
    assert "no job j in this store" in status.stderr

    conformance = _run(
        target, "-m", "spate", "conformance", "--store", "myscheme://suite", "--", "-q", "-k", "cas"
    )
    assert conformance.returncode == 0, conformance.stdout + conformance.stderr
    assert re.search(r"\b[1-9]\d* passed\b", conformance.stdout), conformance.stdout

    # Without the distribution on the path, the scheme is unknown again.
    unknown = _run(tmp_path, "-m", "spate", "status", "--store", "myscheme://ops", "--job", "j")
    assert unknown.returncode != 0
    assert "unsupported store URL 'myscheme://ops'" in unknown.stderr


async def test_in_process_the_adapter_is_found_lazily_and_once(site: Path) -> None:
    install(site, _guide_pyproject(), {"spate_myscheme": ADAPTER})
    async with open_store("myscheme://lazy") as store:
        assert isinstance(store, MemoryStore)
        assert isinstance(await store.create(Keyspace.DURABLE, "k", b"v"), Won)
    # Schemes are case-insensitive, as URL schemes are.
    assert isinstance(store_from_url("MyScheme://lazy"), MemoryStore)
    # An unknown scheme's message names the installed ones beside the bundled.
    with pytest.raises(ConfigError, match=r"myscheme://") as info:
        store_from_url("redis://localhost")
    assert "'spate.stores' entry points" in str(info.value)


def test_read_only_reaches_an_adapter_that_takes_it_and_spares_one_that_does_not(
    site: Path,
) -> None:
    install(
        site,
        pyproject(
            "spate-twoways", keen="spate_keen:store_from_url", plain="spate_plain:store_from_url"
        ),
        {
            "spate_keen": (
                "from spate_stores.memory import MemoryStore\n"
                "seen = []\n"
                "def store_from_url(url, *, read_only=False):\n"
                "    seen.append(read_only)\n"
                "    return MemoryStore.from_url('memory://x', read_only=read_only)\n"
            ),
            "spate_plain": ADAPTER,
        },
    )
    import spate_keen  # type: ignore[import-not-found]

    store_from_url("keen://a", read_only=True)
    store_from_url("keen://a")
    assert spate_keen.seen == [True, False]
    # The entry-point contract asks only for the URL: such an adapter is opened as always.
    assert isinstance(store_from_url("plain://a", read_only=True), MemoryStore)


def test_a_bundled_scheme_cannot_be_shadowed(site: Path) -> None:
    install(
        site,
        pyproject("spate-hijack", memory="spate_hijack:store_from_url"),
        {"spate_hijack": "def store_from_url(url):\n    raise AssertionError('shadowed')\n"},
    )
    # A bundled scheme never reaches the entry points.
    assert isinstance(store_from_url("memory://x"), MemoryStore)
    # Looking one up (for an unknown scheme) tells about the ignored registration.
    with (
        pytest.warns(UserWarning, match=r"'spate-hijack' is ignored: memory:// is a scheme"),
        pytest.raises(ConfigError, match="unsupported store URL"),
    ):
        store_from_url("unknown://x")
    assert "memory" not in _entry_points.installed_schemes(spate_stores.SUPPORTED_SCHEMES)


BROKEN = {
    "import": (
        "spate_broken:store_from_url",
        "import no_such_module_anywhere\n",
        r"could not be loaded \(ModuleNotFoundError: .*no_such_module_anywhere.*\); "
        r"reinstall or upgrade 'spate-broken', or uninstall it",
    ),
    "not-callable": (
        "spate_broken:store_from_url",
        "store_from_url = 42\n",
        r"names int object, not a callable store_from_url\(url\) -> Store; 'spate-broken'",
    ),
    "not-a-store": (
        "spate_broken:store_from_url",
        "def store_from_url(url):\n    return object()\n",
        r"returned a object, which is not a spate.store.Store; 'spate-broken'",
    ),
    "raises": (
        "spate_broken:store_from_url",
        "def store_from_url(url):\n    raise KeyError('oops')\n",
        r"failed on a broken:// URL \(KeyError: 'oops'\); report it to the maintainers of "
        r"'spate-broken'",
    ),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_adapter_is_a_clear_error_naming_its_distribution(
    site: Path, case: tuple[str, str, str]
) -> None:
    value, source, message = case
    install(site, pyproject("spate-broken", broken=value), {"spate_broken": source})
    with pytest.raises(StoreError, match=message) as info:
        store_from_url("broken://host")
    assert "the store adapter 'broken' = 'spate_broken:store_from_url'" in str(info.value)


def test_an_adapters_own_config_error_passes_through(site: Path) -> None:
    source = (
        "from spate import ConfigError\n\ndef store_from_url(url):\n    raise ConfigError('no')\n"
    )
    install(
        site, pyproject("spate-picky", picky="spate_picky:store_from_url"), {"spate_picky": source}
    )
    with pytest.raises(ConfigError, match=r"^no$"):
        store_from_url("picky://host")


def test_one_scheme_from_two_distributions_is_refused(site: Path) -> None:
    for name in ("spate-one", "spate-two"):
        module = name.replace("-", "_")
        install(
            site,
            pyproject(name, twice=f"{module}:store_from_url"),
            {module: ADAPTER},
        )
    with pytest.raises(ConfigError, match=r"more than one distribution \('spate-(one|two)', "):
        store_from_url("twice://x")
