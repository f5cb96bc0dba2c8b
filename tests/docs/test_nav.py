"""The site's navigation keeps users' pages apart from contributors' (docs by reader)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONTRIBUTORS = ("architecture.md", "testing.md", "writing-a-store-adapter.md")
USERS = ("tutorial.md", "- How-to:", "- Explanation:", "- Reference:")


def _nav() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    return text[text.index("nav:") : text.index("markdown_extensions:")].splitlines()


def test_contributors_pages_stand_in_a_section_of_their_own_after_every_users_page() -> None:
    nav = _nav()
    heading = nav.index("  - For contributors:")
    section = nav[heading + 1 :]
    for page in CONTRIBUTORS:
        assert any(line.strip().endswith(page) for line in section), page
        assert not any(line.strip().endswith(page) for line in nav[:heading]), page
    for mark in USERS:
        assert any(mark in line for line in nav[:heading]), mark
    # Nothing but contributors' pages after the heading.
    pages = [line for line in section if line.strip().startswith("- ")]
    assert len(pages) == len(CONTRIBUTORS)
