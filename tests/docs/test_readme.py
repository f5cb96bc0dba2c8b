"""The README's example runs and finishes the job (under a mock clock, so it is instant)."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (example,) = [b for b in blocks if "run_worker" in b]
    assert example.rstrip().endswith("trio.run(main)")
    return example.rstrip().removesuffix("trio.run(main)")


async def test_the_readme_example_completes_the_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    namespace: dict[str, object] = {}
    exec(compile(_example(), str(README), "exec"), namespace)
    with trio.fail_after(600):
        await namespace["main"]()  # type: ignore[operator]


def test_the_readme_names_the_two_commands() -> None:
    text = README.read_text()
    assert "spate demo" in text
    assert "python3 -m pip install nox && python3 -m nox" in text
    # What the whole gate takes, measured: 14 min 26 s in CI on 2 cores; a run on a 2-core
    # machine shared with other work took 30 minutes of wall time for 16 of CPU.
    assert "about 15 minutes on an otherwise idle 2-core machine" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python3 -m pip install nox && python3 -m nox" in ci
