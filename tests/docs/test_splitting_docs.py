"""docs/splitting.md shows the code of examples/splittable_backfill.py, word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_block_of_the_page_is_the_tested_examples_code() -> None:
    page = (ROOT / "docs" / "splitting.md").read_text()
    example = (ROOT / "examples" / "splittable_backfill.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) >= 2
    assert any("await split.split(" in block for block in blocks)  # the recipe itself
    for block in blocks:
        assert block in example, f"not in examples/splittable_backfill.py:\n{block}"


def test_the_page_is_in_the_sites_how_tos_after_revocation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    revocation = nav.index("- Revocation and graceful shutdown: revocation.md")
    splitting = nav.index("- Splitting stragglers: splitting.md")
    assert revocation < splitting < nav.index("- Explanation:")
