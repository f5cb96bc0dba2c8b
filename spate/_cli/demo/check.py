"""The demo's final check: every planned split's records folded exactly once, residuals too.

A split that was split ends as several splits in the store (the planned one and its
residuals), each covering the range its descriptor names now. The job is right if and only
if, for every planned split, those pieces are all completed, each holds the single-pass
checksum of its own range, and together they tile the planned range exactly. A gap is a
residual that never ran; an overlap, a residual that ran although its split's write lost (or
descriptors that overlap); a split point before records already folded shows as a checksum
that differs (the primary folded past its new end).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from spate._cli.demo.workload import Dataset, Fold

__all__ = ["Checked", "Piece", "check_pieces"]


@attrs.frozen
class Piece:
    """One split as the store ended it: the planned split it belongs to, its range, result."""

    id: str
    root: str
    """The planned split it was split off (through any number of splits), or itself."""
    start: int
    end: int
    status: str
    completed: bool
    fold: Fold


@attrs.frozen
class Checked:
    """What the check found."""

    problems: list[str]
    splits: int
    """Planned splits whose every piece checked out."""
    residuals: int
    """Residuals of those splits (pieces beyond the first)."""
    pieces: dict[str, int]
    """Planned split -> how many splits its range ended in."""


def check_pieces(dataset: Dataset, pieces: Iterable[Piece]) -> Checked:
    """Hold every piece against a single pass over its range and its planned split's tiling."""
    planned = {split_id: (start, end) for split_id, start, end, _ in dataset.ranges()}
    by_root: dict[str, list[Piece]] = {split_id: [] for split_id in planned}
    problems: list[str] = []
    bad: set[str] = set()
    for piece in pieces:
        if piece.root not in planned:
            problems.append(f"{piece.id}: a split the demo never planned (root {piece.root})")
            continue
        by_root[piece.root].append(piece)
        if not piece.completed:
            problems.append(f"{piece.id}: not completed (status {piece.status})")
            bad.add(piece.root)
            continue
        want = dataset.fold(piece.start, piece.end)
        if piece.fold != want:
            problems.append(
                f"{piece.id}: records {piece.start}-{piece.end}: checksum {piece.fold} differs "
                f"from the single-pass {want}"
            )
            bad.add(piece.root)
    for root, (start, end) in planned.items():
        found = sorted(by_root[root], key=lambda p: (p.start, p.end))
        if not found:
            problems.append(f"{root}: no progress record in the store")
            bad.add(root)
            continue
        covered = start
        for piece in found:
            if piece.start > covered:
                problems.append(f"{root}: records {covered}-{piece.start} are in no split")
                bad.add(root)
            elif piece.start < covered:
                problems.append(
                    f"{root}: records {piece.start}-{min(covered, piece.end)} are in two "
                    f"splits ({piece.id} and another)"
                )
                bad.add(root)
            covered = max(covered, piece.end)
        if covered < end:
            problems.append(f"{root}: records {covered}-{end} are in no split")
            bad.add(root)
        elif covered > end:
            problems.append(f"{root}: its splits run past its end, to record {covered}")
            bad.add(root)
    good = [root for root in planned if root not in bad]
    return Checked(
        problems=problems,
        splits=len(good),
        residuals=sum(len(by_root[root]) - 1 for root in good),
        pieces={root: len(found) for root, found in by_root.items()},
    )
