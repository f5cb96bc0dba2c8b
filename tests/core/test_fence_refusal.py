"""The one fence check every owner's write and load report shares (``tenancy/fencing.py``)."""

from __future__ import annotations

from spate._core.tenancy.fencing import refusal


def test_a_split_not_held_is_refused_saying_what_did_not_happen() -> None:
    refused = refusal("s1", None, None, "no load was counted")
    assert refused is not None
    assert refused.split == "s1"
    assert refused.reason == "this worker does not hold it; no load was counted"


def test_a_call_naming_an_ended_tenancy_is_refused_naming_both_fences() -> None:
    refused = refusal("s1", 7, 5, "nothing was written")
    assert refused is not None
    assert "fence 5 has ended" in refused.reason
    assert "at fence 7" in refused.reason


def test_the_held_tenancy_or_any_passes() -> None:
    assert refusal("s1", 7, 7, "nothing was written") is None
    assert refusal("s1", 7, None, "nothing was written") is None
    assert refusal("s1", 0, 0, "nothing was written") is None
