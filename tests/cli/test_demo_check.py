"""The demo's final check catches every way a split's records could be lost or done twice."""

from __future__ import annotations

import attrs

from spate._cli.demo.check import Piece, check_pieces
from spate._cli.demo.workload import Dataset

DATA = Dataset(seed=2, splits=3, unit=10, straggler=1, straggler_units=8)
"""range-0000, range-0001 (the straggler: 80 records) and range-0002."""


def _piece(dataset: Dataset, id: str, root: str, start: int, end: int, **kw: object) -> Piece:
    fields: dict[str, object] = {"status": "completed", "completed": True}
    fields.update(kw)
    return Piece(
        id=id,
        root=root,
        start=start,
        end=end,
        fold=dataset.fold(start, end),
        **fields,  # type: ignore[arg-type]
    )


def _job(*straggler_pieces: tuple[str, int, int]) -> list[Piece]:
    """Every planned split completed whole, but the straggler in the pieces given."""
    pieces = []
    for split_id, start, end, _ in DATA.ranges():
        if split_id == "range-0001":
            pieces += [_piece(DATA, i, split_id, s, e) for i, s, e in straggler_pieces]
        else:
            pieces.append(_piece(DATA, split_id, split_id, start, end))
    return pieces


def _straggler_range() -> tuple[int, int]:
    _, start, end, _ = DATA.ranges()[1]
    return start, end


def test_pieces_that_tile_every_split_check_out_and_residuals_are_counted() -> None:
    start, end = _straggler_range()
    checked = check_pieces(
        DATA,
        _job(
            ("range-0001", start, start + 20),
            ("range-0001.ra", start + 50, end),
            ("range-0001.rb", start + 20, start + 50),
        ),
    )
    assert checked.problems == []
    assert (checked.splits, checked.residuals) == (3, 2)
    assert checked.pieces == {"range-0000": 1, "range-0001": 3, "range-0002": 1}


def test_a_residual_that_never_ran_is_a_gap() -> None:
    start, end = _straggler_range()
    checked = check_pieces(DATA, _job(("range-0001", start, start + 20)))
    assert checked.problems == [f"range-0001: records {start + 20}-{end} are in no split"]
    assert checked.splits == 2
    middle = check_pieces(
        DATA, _job(("range-0001", start, start + 20), ("range-0001.rb", start + 50, end))
    )
    assert middle.problems == [f"range-0001: records {start + 20}-{start + 50} are in no split"]


def test_a_residual_that_ran_although_its_split_lost_is_an_overlap() -> None:
    # The parent's write lost, so it kept its whole range: the residual's records twice.
    start, end = _straggler_range()
    checked = check_pieces(
        DATA, _job(("range-0001", start, end), ("range-0001.ra", start + 40, end))
    )
    assert checked.problems == [
        f"range-0001: records {start + 40}-{end} are in two splits (range-0001.ra and another)"
    ]
    assert checked.splits == 2


def test_a_split_point_before_the_folded_records_shows_as_a_wrong_checksum() -> None:
    # The primary folded up to 30 before it split at 20: its result is not that of 0-20.
    start, end = _straggler_range()
    primary = _piece(DATA, "range-0001", "range-0001", start, start + 20)
    wrong = attrs.evolve(primary, fold=DATA.fold(start, start + 30))
    pieces = [*_job(("range-0001.ra", start + 20, end)), wrong]
    checked = check_pieces(DATA, pieces)
    assert len(checked.problems) == 1
    assert checked.problems[0].startswith(f"range-0001: records {start}-{start + 20}: checksum")
    assert checked.splits == 2


def test_an_unfinished_piece_and_a_split_never_planned_are_problems() -> None:
    start, end = _straggler_range()
    pieces = _job(
        ("range-0001", start, start + 40),
        ("range-0001.ra", start + 40, end),
    )
    pieces[1] = _piece(
        DATA, "range-0001", "range-0001", start, start + 40, status="quarantined", completed=False
    )
    pieces.append(_piece(DATA, "stray", "stray", 0, 10))
    checked = check_pieces(DATA, pieces)
    assert checked.problems == [
        "range-0001: not completed (status quarantined)",
        "stray: a split the demo never planned (root stray)",
    ]
    assert checked.splits == 2
