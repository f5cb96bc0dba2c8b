"""The example in docs/testing.md runs and its history is clean."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_checking_your_own_workload_example_runs() -> None:
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    example = next(b for b in blocks if "final_listing" in b)
    exec(compile(example, str(DOC), "exec"), {"__name__": "docs_example"})
