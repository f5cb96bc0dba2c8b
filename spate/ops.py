"""Operator actions from outside the fleet: status, requeue, repair, list the jobs, delete a job.

They read the store directly with the job's key layout, so they work against a live fleet
without joining it. :func:`requeue` is a fenced write like any other: it moves a quarantined
split back to runnable with one compare-and-swap on its progress record (attempts reset,
epoch bumped), so it can never race a worker into two owners; :func:`repair` rewrites an
unreadable progress record the same way, after :func:`inspect_repair` said what it will write
and what is lost. :func:`read_status`,
:func:`list_jobs` and :func:`require_job` only read: they work on a store opened with
``read_only=True``. :func:`delete_job` removes every key of a job, refusing while a worker of
it is live; :func:`reset_ttl` clears the TTL a namespace with no job still records.

Everything here is re-exported from a private module; this module only names it.
"""

from spate._delete import (
    DeleteRefused as DeleteRefused,
)
from spate._delete import (
    DeleteReport as DeleteReport,
)
from spate._delete import (
    ResetRefused as ResetRefused,
)
from spate._delete import (
    delete_job as delete_job,
)
from spate._delete import (
    reset_ttl as reset_ttl,
)
from spate._ops import (
    JobNotFound as JobNotFound,
)
from spate._ops import (
    JobStatus as JobStatus,
)
from spate._ops import (
    PlanRepair as PlanRepair,
)
from spate._ops import (
    Repair as Repair,
)
from spate._ops import (
    RepairRefused as RepairRefused,
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
    inspect_plan_repair as inspect_plan_repair,
)
from spate._ops import (
    inspect_repair as inspect_repair,
)
from spate._ops import (
    list_jobs as list_jobs,
)
from spate._ops import (
    read_status as read_status,
)
from spate._ops import (
    remove_unreadable_leader as remove_unreadable_leader,
)
from spate._ops import (
    repair as repair,
)
from spate._ops import (
    repair_plan as repair_plan,
)
from spate._ops import (
    requeue as requeue,
)
from spate._ops import (
    requeue_all as requeue_all,
)
from spate._ops import (
    require_job as require_job,
)

__all__ = [
    "DeleteRefused",
    "DeleteReport",
    "JobNotFound",
    "JobStatus",
    "PlanRepair",
    "Repair",
    "RepairRefused",
    "RequeueRefused",
    "ResetRefused",
    "SplitStatus",
    "WorkerStatus",
    "delete_job",
    "inspect_plan_repair",
    "inspect_repair",
    "list_jobs",
    "read_status",
    "remove_unreadable_leader",
    "repair",
    "repair_plan",
    "requeue",
    "requeue_all",
    "require_job",
    "reset_ttl",
]
