"""The fence check: whether a call for a split, naming a tenancy, may act on this worker.

One rule, shared by every owner's write (a commit, a split, a failure, a hand-back) and by a
load report: the split must be held here, and a call naming a fence must name the tenancy held
now. A task that outlives its tenancy holds an old fence, so it acts on nothing of a later one.
"""

from __future__ import annotations

from spate._errors import Fenced

__all__ = ["refusal"]


def refusal(split: str, held: int | None, fence: int | None, nothing: str) -> Fenced | None:
    """Why a call for ``split`` naming ``fence`` (None: any) must not act, if so.

    ``held`` is the fence of the tenancy this worker holds (None: it does not hold the split);
    ``nothing`` says what did not happen ("nothing was written", "no load was counted").
    """
    if held is None:
        return Fenced(split, f"this worker does not hold it; {nothing}")
    if fence is not None and held != fence:
        return Fenced(
            split,
            f"the tenancy of fence {fence} has ended (this worker holds it again, at fence "
            f"{held}); {nothing}",
        )
    return None
