"""docs/glossary.md defines the words the other pages use, and the tutorial links to it."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
GLOSSARY = DOCS / "glossary.md"
TERMS = ["split", "lane", "tenancy", "epoch", "fence", "watermark", "generation", "residual"]
TERMS += ["quarantine", "verdict"]


def anchors() -> set[str]:
    """Every anchor the glossary page defines: one per heading, plus explicit ids."""
    text = GLOSSARY.read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    slugs = {re.sub(r"[^a-z0-9]+", "-", h.lower()).strip("-") for h in headings}
    return slugs | set(re.findall(r'<a id="([^"]+)"></a>', text))


def prose(markdown: str) -> str:
    """The text of ``markdown`` without code (blocks and spans), headings, links or comments."""
    markdown = re.sub(r"^```.*?^```$", "", markdown, flags=re.S | re.M)
    markdown = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    markdown = re.sub(r"^#.*$", "", markdown, flags=re.M)
    markdown = re.sub(r"`[^`]*`", "", markdown)
    return re.sub(r"\[[^\]]*\]\([^)]*\)", "", markdown)


def test_the_glossary_defines_every_term_the_issue_names() -> None:
    defined = anchors()
    for term in TERMS:
        assert term in defined, term
    assert "epoch-and-fence" in defined


def test_the_glossary_is_in_the_site_navigation() -> None:
    config = (DOCS.parent / "mkdocs.yml").read_text()
    assert re.search(r"^\s+- Glossary: glossary\.md$", config, re.M)


def test_every_link_into_the_glossary_lands_on_an_anchor_it_defines() -> None:
    defined = anchors()
    linked = 0
    for page in DOCS.rglob("*.md"):
        for anchor in re.findall(r"\(glossary\.md#([^)]+)\)", page.read_text()):
            assert anchor in defined, (page.name, anchor)
            linked += 1
    assert linked >= 8


def test_the_tutorial_links_each_term_where_it_first_uses_it() -> None:
    text = (DOCS / "tutorial.md").read_text()
    assert "[glossary](glossary.md)" in text
    for term, anchor in [
        ("split", "split"),
        ("tenancy", "tenancy"),
        ("watermark", "watermark"),
        ("fence", "epoch-and-fence"),
        ("lanes", "lane"),
        ("residual", "residual"),
        ("quarantined", "quarantine"),
        ("verdict", "verdict"),
        ("generation", "generation"),
        ("lease", "lease"),
        ("attempt", "attempt"),
    ]:
        link = re.search(rf"\[{term}\]\(glossary\.md#{anchor}\)", text)
        assert link is not None, term
        # No earlier mention in prose outside code, headings or links.
        before = prose(text[: link.start()])
        assert not re.search(rf"\b{term}\b", before, re.I), f"{term} is used before its link"
