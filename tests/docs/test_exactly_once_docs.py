"""docs/exactly-once.md shows the code of examples/fenced_sqlite.py, word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_block_of_the_recipe_is_the_tested_examples_code() -> None:
    page = (ROOT / "docs" / "exactly-once.md").read_text()
    example = (ROOT / "examples" / "fenced_sqlite.py").read_text()
    blocks = re.findall(r"```(?:python|sql)\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) >= 4
    for block in blocks:
        assert block in example, f"not in examples/fenced_sqlite.py:\n{block}"
