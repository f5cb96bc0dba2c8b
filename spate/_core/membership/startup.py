"""The startup sequence: what a coordinator does before it watches, and how each step is retried.

In order: open a store session; probe the store's compare-and-swap semantics in both keyspaces
(a store that fails is refused with a clear error, before anything of the job is written); join
the job (create the plan record, or read the one there and check its fingerprint); announce
presence. A step that meets an unavailable store or outlives its bound is tried again after a
capped backoff, up to ``Config.startup_max_attempts`` tries, and then fails fatally: a worker
that cannot start must say so, not hang. A step that loses a benign race (the plan record
deleted between its create and its read; the presence key moved while it was taken over) is
tried again the same way, and logged as what it is, not as a failure.

The runtime performs the steps (opening the session and the probe are I/O of its own; joining
and announcing are the machine's flows, :meth:`Machine.startup_flow
<spate._core.machine.Machine.startup_flow>`) and sleeps the delays; which steps, in which order,
how long each may take, how many tries and how far apart, and what a lost race means are
decided here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from spate._core.backoff import STARTUP_BACKOFF, Backoff
from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.leader.election import fingerprint_mismatch
from spate._core.records import PlanRecord, UnreadableRecord, decode, encode
from spate._errors import FatalCoordinationError
from spate._store import Entry, Keyspace, Won

__all__ = [
    "STARTUP_STEPS",
    "STEP_TIMEOUT_FACTOR",
    "Retry",
    "StartupStep",
    "StartupTries",
    "join_flow",
    "startup_step_flow",
]

STEP_TIMEOUT_FACTOR = 3
"""One try of a startup step may take this many op_timeouts (a join reads, then may create)."""


class Retry(Exception):
    """A startup step lost a benign race; try it again."""


@attrs.frozen
class StartupStep:
    """One step of the startup sequence."""

    name: Literal["session", "probe", "join", "announce"]
    what: str
    """What the step does, for the log and the fatal error (``"joining the job"``)."""
    race_lost: str = ""
    """Why a try that lost a benign race is tried again (the machine's steps only)."""


STARTUP_STEPS = (
    StartupStep("session", "opening a store session"),
    StartupStep("probe", "probing the store"),
    StartupStep(
        "join", "joining the job", "the plan record vanished as it was read; joining again"
    ),
    StartupStep(
        "announce",
        "announcing presence",
        "the presence key changed while this worker took it over; announcing again",
    ),
)
"""The steps, in the order they run."""


class StartupTries:
    """The tries of one startup step: its budget, the backoff between tries, the final error."""

    def __init__(self, step: StartupStep, attempts: int) -> None:
        self.step = step
        self.attempts = attempts
        self.attempt = 1
        """The try under way, counted from 1."""
        self._backoff = Backoff.of(STARTUP_BACKOFF)

    def failed(self, exc: BaseException) -> float:
        """The try failed with ``exc`` (unavailable, too slow, a race lost): the delay to wait.

        Raises :class:`~spate.FatalCoordinationError` (from ``exc``) when that was the last try.
        """
        if self.attempt >= self.attempts:
            raise FatalCoordinationError(
                f"{self.step.what} did not succeed in {self.attempts} attempts (last: "
                f"{exc or type(exc).__name__}); "
                "check that the store is reachable, or raise Config.startup_max_attempts"
            ) from exc
        self.attempt += 1
        return self._backoff.delay()


def startup_step_flow(
    step: StartupStep, join: Callable[[], Flow[bool]], announce: Callable[[], Flow[bool]]
) -> Flow[None]:
    """The machine's part of ``step``: ``join`` or ``announce``, each answering whether it held.

    Raises :class:`Retry` when the try lost a benign race, and
    :class:`~spate.FatalCoordinationError` for a plan record it cannot read.
    """
    if step.name == "join":
        flow = join()
    elif step.name == "announce":
        flow = announce()
    else:
        raise ValueError(f"{step.what} is the runtime's step, not the machine's")
    try:
        done = yield from flow
    except UnreadableRecord as exc:
        raise FatalCoordinationError(
            f"{exc} A worker cannot join a job whose plan record it cannot read (the workers "
            f"running keep their splits): repair it with spate repair --store URL --job "
            f"{exc.key.partition('.')[0]} --plan, then start this worker again."
        ) from exc
    if not done:
        raise Retry(step.race_lost)


def join_flow(host: Host) -> Flow[bool]:
    """Join the job: create its plan record with our fingerprint, or read the one that exists.

    Create first, read only when that loses: the worker that creates the job joins in one
    round trip and every other in two, however many start together, and the race of who
    creates it is no failure to retry (a lost create writes nothing, so a worker with
    another fingerprint is still refused before it writes anything). Returns False only if
    the record vanished between the two calls (deleted by hand): run it again.
    """
    key = host.keys.plan
    # The creation time is the job's incarnation: the fences of a job deleted and created
    # again start above the old job's (records.fence_of).
    fresh = encode(PlanRecord(fingerprint=host.fingerprint, incarnation_ms=host.wall_ms()))
    result = yield Op("create", Keyspace.DURABLE, key, fresh, operation="plan-create")
    if isinstance(result, Won):
        return True
    entry: Entry | None = yield Op("get", Keyspace.DURABLE, key)
    if entry is None:
        return False
    plan = decode(PlanRecord, key, entry.value)
    if plan.fingerprint != host.fingerprint:
        raise fingerprint_mismatch(host.job, plan.fingerprint, host.fingerprint)
    return True
