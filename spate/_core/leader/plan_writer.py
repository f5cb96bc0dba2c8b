"""Plan writing: the user's planner run off the machine, and what it answers written in order.

**Planning** runs the user's planner off the machine (the runtime uses a thread for a sync
planner, a task under its own cancel scope for an async one) and takes its outcome as one more
input: a slow plan never stalls renewals. Its result is validated before anything is written
(an invalid plan is a ``PlanError``); then spec records, then progress records (so a progress
record implies its spec), then the plan record (planned count: the progress records in the
leader's view, which it listed when it took over; finality). A planner that raises is logged
and retried with backoff. A plan publish that loses its CAS means a successor bumped the
generation: this leader steps down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import outcome

from spate._core.backoff import Backoff
from spate._core.flows import Batch, Flow, Hold, Op, OpsOf
from spate._core.host import Host, PlannerRun
from spate._core.leader.election import Election
from spate._core.records import Finality, PlanRecord, ProgressRecord, SpecRecord, encode
from spate._core.view.view import Notice
from spate._errors import PlanError, StoreUnavailable
from spate._plan import Plan, PlanContext, Planner, validate_plan
from spate._store import Keyspace, Won

__all__ = ["PLANNER_BACKOFF", "PlanWriter"]

logger = logging.getLogger("spate.leader")

DURABLE = Keyspace.DURABLE
PLANNER_BACKOFF = (1.0, 60.0)
"""First and largest delay before a failed planner run is retried."""


@attrs.define(eq=False)
class _PlanRun:
    plan: PlanRecord
    plan_rev: int
    started: float
    call: PlannerRun | None = None
    records: int = 0
    """Splits of the plan being written (0 until the planner's answer is in)."""


class PlanWriter:
    """The leader's planner runs, and the records each one's answer is written as."""

    def __init__(
        self,
        host: Host,
        planner: Planner,
        election: Election,
        *,
        demote: Callable[[bool], None],
    ) -> None:
        self.host = host
        self.planner = planner
        self._election = election
        self._demote = demote
        self.owed = False
        """Whether a planner run is owed (a new leadership, the replan timer, a failure)."""
        self._run: _PlanRun | None = None
        self._retry_at = 0.0
        self._backoff = Backoff.of(PLANNER_BACKOFF)

    @property
    def running(self) -> bool:
        """Whether a planner run (or the writing of its answer) is under way."""
        return self._run is not None

    @property
    def seeding(self) -> int:
        """Splits of the plan this leader is writing now (0 when it writes none)."""
        return self._run.records if self._run is not None else 0

    def replan_tick(self) -> None:
        """The replan timer: an open plan is planned again."""
        plan = self.host.view.plan
        if self._election.leading and plan is not None and plan.finality is Finality.OPEN:
            self.owed = True

    def step(self, now: float) -> None:
        """Start the planner when a run is owed and none is under way."""
        if (
            self.owed
            and self._run is None
            and now >= self._retry_at
            and not self.host.busy(DURABLE, self.host.keys.plan)
        ):
            # (A plan record write in flight is the verdict's: a run started now would publish
            # on the revision that write replaces, lose, and step this leader down.)
            self._start(now)

    def next_deadline(self, now: float) -> float | None:
        """When a failed planner run is retried (None: nothing waits)."""
        if self.owed and self._retry_at > now:
            return self._retry_at
        return None

    def stop(self) -> None:
        """The leadership ended: owe nothing, and abandon a run under way."""
        self.owed = False

    def abandon(self) -> None:
        """Cancel the planner call under way, if any: its result is no longer ours."""
        if self._run is not None:
            if self._run.call is not None:
                self._run.call.cancel()
            self._run = None

    def _start(self, now: float) -> None:
        host = self.host
        plan, rev = host.view.plan, host.view.plan_rev
        assert plan is not None
        self.owed = False
        ctx = PlanContext(
            job=host.job,
            known=frozenset(host.view.splits),
            generation=self._election.generation,
            cursor=plan.cursor,
            final=plan.finality is Finality.FINAL,
        )
        run = self._run = _PlanRun(plan, rev, now)
        run.call = host.run_planner(self.planner, ctx, lambda result: self._planned(run, result))

    def _planned(self, run: _PlanRun, result: outcome.Outcome[Any]) -> None:
        if run is not self._run:
            return  # leadership changed while it ran: its result is not ours to write
        host = self.host
        if isinstance(result, outcome.Error):
            error = result.error
            if isinstance(error, PlanError):
                raise error
            logger.error("the planner raised; retrying with backoff", exc_info=error)
            self._failed(run)
            return
        plan = validate_plan(result.unwrap())
        limit = host.max_value_size
        specs: list[tuple[SpecRecord, bytes]] = []
        for split in plan.splits:
            spec = SpecRecord(
                id=split.id,
                generation=self._election.generation,
                weight=split.weight,
                descriptor=split.descriptor,
                locality=split.locality,
            )
            data = encode(spec)
            if len(data) > limit:
                raise PlanError(
                    f"split {spec.id!r}: its spec record is {len(data)} bytes (descriptor "
                    f"{len(spec.descriptor)} bytes, base64-encoded), over this store's limit of "
                    f"{limit} bytes; keep descriptors small (a pointer to the data, not the "
                    "data). Nothing of this plan was written."
                )
            specs.append((spec, data))
        run.records = len(specs)
        host.start(self._write_plan(run, plan, specs), self._written(run))

    def _written(self, run: _PlanRun) -> Callable[[outcome.Outcome[None]], None]:
        def done(result: outcome.Outcome[None]) -> None:
            if self._run is run:
                self._run = None
            result.unwrap()

        return done

    def _failed(self, run: _PlanRun) -> None:
        host = self.host
        host.metrics.replan("error", host.now() - run.started)
        self._retry_at = host.now() + self._backoff.delay()
        self.owed = True
        if self._run is run:
            self._run = None

    def _write_plan(
        self, run: _PlanRun, plan: Plan, specs: list[tuple[SpecRecord, bytes]]
    ) -> Flow[None]:
        host, view, keys = self.host, self.host.view, self.host.keys
        fresh = [(spec, data) for spec, data in specs if spec.id not in view.splits]
        created = 0
        if fresh:

            def spec_landed(i: int, result: object) -> None:
                # Folded as each write lands, so its watch echo is known by revision and
                # dropped undecoded (see Batch).
                if isinstance(result, Won):
                    spec = fresh[i][0]
                    view.put_spec(spec.id, spec, result.revision)

            def spec_op(i: int) -> Op:
                spec, data = fresh[i]
                return Op(
                    "create",
                    DURABLE,
                    keys.spec(spec.id),
                    data,
                    operation="seed-spec",
                    split=spec.id,
                )

            spec_results = yield Batch(OpsOf(len(fresh), spec_op), spec_landed)
            if any(isinstance(r, Exception) for r in spec_results):
                logger.warning("seeding spec records failed; the plan is retried")
                self._failed(run)
                return
            written_at = self.host.wall_ms()
            records = [ProgressRecord(id=s.id, written_at_ms=written_at) for s, _ in fresh]
            notices: list[Notice] = []

            def progress_landed(i: int, result: object) -> None:
                if isinstance(result, Won):
                    record = records[i]
                    notices.extend(view.put_progress(record.id, record, result.revision))

            def progress_op(i: int) -> Op:
                record = records[i]
                return Op(
                    "create",
                    DURABLE,
                    keys.split(record.id),
                    encode(record),
                    operation="seed-split",
                    split=record.id,
                    epoch=record.epoch,
                )

            results = yield Batch(OpsOf(len(records), progress_op), progress_landed)
            created = sum(isinstance(r, Won) for r in results)
            host.fold(notices)
            if any(isinstance(r, Exception) for r in results):
                logger.warning("seeding progress records failed; the plan is retried")
                self._failed(run)
                return
        host.metrics.planned(created)
        if self._run is not run:
            return
        # The planned count is every progress record there is. This leader's view holds them
        # all: it listed the job when it took over, and only a leader seeds (a predecessor's
        # records seeded before it died are in that listing). So the count is the view's,
        # with no second listing of the job.
        planned = len(view.splits)
        finality = Finality.FINAL if plan.final else Finality.OPEN
        published = attrs.evolve(
            run.plan,
            planned=planned,
            finality=finality,
            cursor=plan.cursor if plan.cursor is not None else run.plan.cursor,
            updated_at_ms=self.host.wall_ms(),
        )
        yield Hold(DURABLE, keys.plan)
        try:
            result = yield Op(
                "update", DURABLE, keys.plan, encode(published), expected=run.plan_rev,
                operation="plan-publish",
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("publishing the plan failed (%s); retrying", exc)
            self._failed(run)
            return
        if not isinstance(result, Won):
            # A successor bumped the generation meanwhile; what we seeded is what it seeds.
            host.metrics.replan("error", host.now() - run.started)
            self._demote(True)
            return
        host.fold(view.put_plan(published, result.revision))
        changed = (
            created or finality is not run.plan.finality or published.planned != run.plan.planned
        )
        host.metrics.replan("ok" if changed else "noop", host.now() - run.started)
        self._backoff.reset()
