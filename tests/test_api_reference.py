"""The API reference page documents every public name of ``spate``."""

from __future__ import annotations

import pathlib

import spate

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"


def test_every_public_name_has_an_api_reference_entry() -> None:
    text = PAGE.read_text()
    missing = [n for n in spate.__all__ if n != "__version__" and f"::: spate.{n}\n" not in text]
    assert missing == [], f"add these to docs/reference/api.md: {missing}"
