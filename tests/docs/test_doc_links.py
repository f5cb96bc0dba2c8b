"""Every relative link of the docs and the README leads somewhere: a file, and a heading in it.

``mkdocs build --strict`` checks the site's links too, but only where MkDocs is installed (the
docs session); this runs in every test session, and covers the README, which the site does not
build. A link to another site is not followed (that needs the network).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")


def slug(heading: str) -> str:
    """The anchor MkDocs' table of contents gives a heading (Python-Markdown's ``slugify``)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[`*_]", "", text) if "`" in text or "*" in text else text
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def prose(text: str) -> str:
    """The page without its code: links shown as code are examples, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found = set(HTML_ID.findall(text))
    for heading in HEADING.findall(text):
        explicit = EXPLICIT_ID.search(heading)
        found.add(explicit.group(1) if explicit else slug(heading))
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # http:, https:, mailto:: another site
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            where = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file.name
            broken.append(f"{target}: no heading #{anchor} in {where}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Scrape with Prometheus\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## `spate.telemetry.configure`\n\n"
        "[fine](other.md#scrape-with-prometheus), [here](#spatetelemetryconfigure),\n"
        "[away](https://example.com/x), `[code](nowhere.md)`,\n"
        "[gone](missing.md), [moved](other.md#prometheus).\n\n"
        "```\n[in a block](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#prometheus: no heading #prometheus in other.md",
    ]
