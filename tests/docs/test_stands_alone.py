"""The project stands alone: nothing in it sends the reader to a text they cannot open.

A reference to a design document that is not in the repository (``DESIGN §4b``), to an issue
tracker by number (``issue 35``, ``see #41``, "the issue's targets"), or to an unnamed "Rust
reference" tells a reader only that the explanation is somewhere else. Each such place says
what the reader needs instead, or links a page of the project (``docs/protocol.md``, "Who reads
what"). Another project's issue is fine as a link to it (``[NATS issue 4888](https://...)``).
Marks of work to come (``TODO``, ``FIXME``) are either done or belong in the tracker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["spate", "spate_stores", "spate_testing", "bench", "examples", "docs", "tests"]
SCANNED_FILES = ["README.md", "CHANGELOG.md", "noxfile.py", "mkdocs.yml", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".json", ".txt", ".cfg", ".ini"}

PATTERNS = {
    "a design document not in the repository": re.compile(r"\bDESIGN\b|§\s*\d"),
    "an issue by number": re.compile(
        r"\b[Ii]ssues? \d+|\b(?:[Ii]ssue|PR|[Ff]ixes|[Cc]loses|[Ss]ee) #\d+|\(#\d+\)"
    ),
    "an issue the reader cannot see": re.compile(r"\b(?:[Tt]he|[Tt]his) issue's\b"),
    "an unlinked reference implementation": re.compile(
        r"\bRust (?:reference|implementation)\b|\bthe reference implementation\b"
    ),
    "work to come": re.compile(r"\b(?:TODO|FIXME|XXX|TBD)\b"),
}
EXTERNAL_LINK = re.compile(r"\[[^\]]*\]\(https?://[^)]*\)")
"""A markdown link to another site: what it names is one click away."""

THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()


def findings(text: str) -> list[str]:
    """What in ``text`` points outside the project: one ``line: what (quoted)`` per hit."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        bare = EXTERNAL_LINK.sub("", line)
        for what, pattern in PATTERNS.items():
            for hit in pattern.finditer(bare):
                found.append(f"{number}: {what} ({hit.group(0)!r})")
    return found


def scanned() -> list[Path]:
    paths = [ROOT / name for name in SCANNED_FILES]
    for folder in SCANNED:
        paths += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    caches = ("__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis")
    return sorted(p for p in paths if not any(part in caches for part in p.parts))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_nothing_points_outside_the_project() -> None:
    found = {
        _relative(path): hits
        for path in scanned()
        if _relative(path) != THIS_FILE
        if (hits := findings(path.read_text(errors="replace")))
    }
    assert found == {}


@pytest.mark.parametrize(
    "line",
    [
        "A follower watches no lease (DESIGN §4b).",
        "the residuals (§4c) it finds",
        '"""Item 2 of issue 35: the leader moves running splits."""',
        "# Issue 33's operator checks",
        "fixed upstream, see #41",
        "the scheduler's rewrite (#41)",
        "The scenarios and targets are the issue's:",
        "## Deliberate differences from the Rust reference",
        "# TODO: remove once the leader exports it",
    ],
)
def test_a_planted_reference_is_found(line: str) -> None:
    assert findings(f"fine\n{line}\n") != []
    assert findings(f"fine\n{line}\n")[0].startswith("2: ")


@pytest.mark.parametrize(
    "line",
    [
        "where [NATS issue 4888](https://github.com/nats-io/nats-server/issues/4888) begins",
        "split 's00', write #320 by w2#1 at t=12.965 lowered the watermark",
        'MUTED = "#52606d"',
        'see docs/protocol.md, "Who reads what"',
        "a design that works; the reference model's answer",
        "the issue of a lost reply is handled by reading back",
    ],
)
def test_what_a_reader_can_follow_is_not_found(line: str) -> None:
    assert findings(line) == []
