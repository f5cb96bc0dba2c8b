"""A SplitHandle's one state: its life, moved only by the table of ``_LIFE``.

Whether the handler run is over and whether the tenancy is are one value, so no caller can
leave a handle lost-but-running in one field and ended in another.
"""

from __future__ import annotations

import itertools
from typing import cast, get_args

import pytest

from spate import Fenced, Progress, SplitHandle
from spate._runtime.coordinator import Coordinator
from spate._runtime.worker import _LIFE, _Life, _Step


def _handle(watermark: int | None = None) -> SplitHandle:
    # (No call here reaches the coordinator: each is refused before it would.)
    return SplitHandle(
        id="s1",
        descriptor=b"",
        weight=1,
        epoch=1,
        progress=Progress(watermark=watermark),
        _coordinator=cast(Coordinator, None),
        _fence=1,
    )


def test_every_state_has_a_transition_for_every_step() -> None:
    steps = get_args(_Step)
    assert set(_LIFE) == set(itertools.product(_Life, steps))


def test_a_refusal_after_the_run_ended_is_no_loss_of_the_split() -> None:
    handle = _handle()
    handle._step("ended")
    handle._step("refused")
    assert not handle.lost


def test_a_refusal_while_the_run_goes_on_is_a_loss() -> None:
    handle = _handle()
    handle._step("refused")
    assert handle.lost


def test_a_loss_learnt_after_the_run_ended_still_reads_lost() -> None:
    handle = _handle()
    handle._step("ended")
    handle._step("lost")
    assert handle.lost
    # The run being over is what a call is told first.
    with pytest.raises(Fenced, match="handler run this handle was made for has ended"):
        handle.report_load(1.0)


async def test_a_lost_handle_refuses_saying_it_was_lost() -> None:
    handle = _handle()
    handle._step("lost")
    with pytest.raises(Fenced, match="it was lost earlier; nothing was written"):
        await handle.commit(5)
    assert not handle.completed
    assert not handle._advanced


def test_a_handle_is_new_progress_only_past_the_watermark_it_began_from() -> None:
    assert not _handle(watermark=4)._advanced
    moved = _handle(watermark=4)
    moved.progress = Progress(watermark=6, completed=True)  # (what a landed commit sets)
    assert moved._advanced
    assert moved.completed
