"""Operator actions on a job, from outside the fleet: read its status, requeue quarantined splits.

Both read the store directly with the job's key layout, so they work against a live fleet
without joining it. :func:`requeue` is a fenced write like any other: it moves a quarantined
split back to runnable with one compare-and-swap on its progress record (attempts reset,
epoch bumped), so it can never race a worker into two owners.

Everything here is re-exported from a private module; this module only names it.
"""

from spate._ops import (
    JobStatus as JobStatus,
)
from spate._ops import (
    RequeueRefused as RequeueRefused,
)
from spate._ops import (
    SplitStatus as SplitStatus,
)
from spate._ops import (
    WorkerStatus as WorkerStatus,
)
from spate._ops import (
    read_status as read_status,
)
from spate._ops import (
    requeue as requeue,
)

__all__ = [
    "JobStatus",
    "RequeueRefused",
    "SplitStatus",
    "WorkerStatus",
    "read_status",
    "requeue",
]
