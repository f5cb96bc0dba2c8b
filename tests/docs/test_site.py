"""The built documentation site shows every diagram and fetches nothing from the network.

`nox -s docs` builds the site and then runs this file against it (``SPATE_SITE_DIR``); run
alone with MkDocs installed, it builds the site itself, strictly, into a temporary directory.
Without MkDocs (the default test session) it is skipped: the docs session is where it runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL = re.compile(r"""<(script|link)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("SPATE_SITE_DIR")
    if given:
        return Path(given)
    pytest.importorskip("mkdocs", reason="MkDocs is not installed (nox -s docs runs this)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_no_page_loads_a_script_or_a_stylesheet_from_the_network(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        found = [m.group(0) for m in EXTERNAL.finditer(page.read_text())]
        assert not found, (page.relative_to(site), found)


@pytest.mark.parametrize(
    ("page", "diagram"),
    [
        ("tutorial", "split-lifecycle.svg"),
        ("glossary", "split-lifecycle.svg"),
        ("glossary", "straggler-split.svg"),
        ("protocol", "job-keys.svg"),
        ("revocation", "hand-over.svg"),
        ("splitting", "straggler-split.svg"),
    ],
)
def test_each_diagram_is_an_image_of_its_page_served_by_the_site(
    site: Path, page: str, diagram: str
) -> None:
    html = (site / page / "index.html").read_text()
    assert re.search(rf'<img [^>]*src="\.\./diagrams/{re.escape(diagram)}"', html), diagram
    assert (site / "diagrams" / diagram).read_bytes() == (
        ROOT / "docs" / "diagrams" / diagram
    ).read_bytes()
