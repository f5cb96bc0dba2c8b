"""What a worker says when its job's durable records vanish under it.

The protocol never deletes a plan, spec or progress record. The one spate path that does is
``spate delete --force`` (:func:`spate.ops.delete_job` with ``force=True``), which removes a
job while its workers run and so cuts them off; anything else that removes them works behind
spate's back. A worker cannot tell the two apart (a forced delete leaves no trace: it must
leave the namespace empty), so its words name both, the likelier first.
"""

from __future__ import annotations

__all__ = ["record_vanished"]


def record_vanished(key: str, when: str, *, stops: bool = True) -> str:
    """The message for durable record ``key`` found deleted ``when`` (``"during an election"``).

    ``stops``: the worker stops on it (else it is a warning, and the worker carries on).
    """
    text = (
        f"the durable record {key!r} was deleted {when}: the job was most likely deleted by "
        "`spate delete --force` (which cuts off its live workers), or something other than "
        "spate removed it."
    )
    if stops:
        text += (
            " This worker stops; to run the job again, start its workers anew (it is planned "
            "afresh), or restore the record."
        )
    return text
