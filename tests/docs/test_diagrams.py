"""The documentation's diagrams: drawn by docs/diagrams/make.py, shown on their pages, offline.

The SVGs are committed (GitHub shows them too) and must be exactly what the script draws, so a
change to a diagram is a change to its source. They must render with no network at view time:
no script, no external reference, and the site itself loads no fonts or scripts from a CDN.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DIAGRAMS = DOCS / "diagrams"
SVG = "{http://www.w3.org/2000/svg}"

# The pictures the docs promise, and the page each is shown on.
SHOWN_ON = {
    "split-lifecycle.svg": ["tutorial.md", "glossary.md"],
    "job-keys.svg": ["protocol.md"],
    "hand-over.svg": ["revocation.md"],
    "straggler-split.svg": ["splitting.md", "glossary.md"],
}


def load_make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_diagrams_make", DIAGRAMS / "make.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make = load_make()


def test_every_committed_diagram_is_what_make_py_draws() -> None:
    assert set(make.DIAGRAMS) == set(SHOWN_ON)
    assert {p.name for p in DIAGRAMS.glob("*.svg")} == set(SHOWN_ON)
    for name, draw in make.DIAGRAMS.items():
        assert (DIAGRAMS / name).read_text() == draw().render(), (
            f"{name} is out of date: run python docs/diagrams/make.py"
        )
    assert make.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(SHOWN_ON))
def test_a_diagram_is_a_standalone_svg_with_nothing_to_fetch(name: str) -> None:
    text = (DIAGRAMS / name).read_text()
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    assert root.find(f"{SVG}title") is not None, "a title for screen readers"
    assert root.find(f"{SVG}desc") is not None
    for element in root.iter():
        assert element.tag not in {f"{SVG}script", f"{SVG}image", f"{SVG}foreignObject"}
        for attribute, value in element.attrib.items():
            if attribute.endswith("href"):
                assert value.startswith("#"), (name, attribute, value)
    # The namespace declaration is the only URL in the file.
    assert re.findall(r"https?://[^\"' )]+", text) == ["http://www.w3.org/2000/svg"]


@pytest.mark.parametrize(("name", "pages"), sorted(SHOWN_ON.items()))
def test_each_diagram_is_shown_on_its_pages(name: str, pages: list[str]) -> None:
    for page in pages:
        assert f"](diagrams/{name})" in (DOCS / page).read_text(), (name, page)


def test_the_split_lifecycle_draws_every_state_and_edge() -> None:
    text = (DIAGRAMS / "split-lifecycle.svg").read_text()
    for words in (
        "RUNNABLE",
        "HELD",
        "COMPLETED",
        "QUARANTINED",
        "claim",
        "hand-back",
        "revocation",
        "lease expired",
        "fail: the handler raised",
        "max_attempts",
        "spate requeue",
        "backs off",
    ):
        assert words in text, words


def test_the_key_map_names_every_key_of_the_layout() -> None:
    text = (DIAGRAMS / "job-keys.svg").read_text()
    for key in ("J.plan", "J.spec.", "J.split.", "J.assign.", "J.lease.", "J.leader", "J.worker."):
        assert key in text, key
    protocol = (DOCS / "protocol.md").read_text()
    table = protocol.split("## Keys and records", 1)[1].split("\n## ", 1)[0]
    layout = set(re.findall(r"`J\.([a-z]+)", table))
    drawn = set(re.findall(r"J\.([a-z]+)", text))
    assert layout <= drawn, layout - drawn


def test_the_site_loads_no_fonts_or_scripts_from_the_network() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    theme = config.split("\ntheme:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^  font: false$", theme, re.M), "Material fetches Google Fonts otherwise"
    assert "extra_javascript" not in config or "http" not in config.split("extra_javascript")[1]
    assert "extra_css" not in config or "http" not in config.split("extra_css")[1]
    assert "diagrams/*.py" in config, "make.py is a source file, not part of the site"
