"""No two test files share a basename, so a test's file name alone says which one failed.

``tests/core/`` specifies the protocol machine by machine and ``tests/runtime/`` runs it end to
end; a pair such as ``core/test_claims.py`` and ``runtime/test_claims.py`` made a report, a
``-k`` filter or a search by name ambiguous. Each file is named for what it tests instead.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def shared_basenames(root: Path) -> dict[str, list[str]]:
    """Each test-file basename found in more than one folder under ``root``, with its paths."""
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("test_*.py")):
        where[path.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_test_files_share_a_basename() -> None:
    assert shared_basenames(TESTS) == {}


def test_a_shared_basename_is_found(tmp_path: Path) -> None:
    for folder in ("core", "runtime"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_claims.py").write_text("")
    (tmp_path / "core" / "test_alone.py").write_text("")
    assert shared_basenames(tmp_path) == {
        "test_claims.py": ["core/test_claims.py", "runtime/test_claims.py"]
    }
