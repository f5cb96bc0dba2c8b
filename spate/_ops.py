"""Operator actions on a job, from outside the fleet (the implementation behind :mod:`spate.ops`).

Both read the store directly with the job's key layout, so they work against a live fleet
without joining it. :func:`requeue` is a fenced write like any other: it moves a quarantined
split back to runnable with one compare-and-swap on its progress record (attempts reset,
epoch bumped), so it can never race a worker into two owners.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from spate import _write_spans as write_spans
from spate._core.balance import BalanceConfig, BalanceSplit, BalanceWorker, judge_loads
from spate._core.balance.loads import split_loads
from spate._core.placement.report import PlacementReport, placement_report
from spate._core.records import (
    AssignmentRecord,
    Finality,
    KeyKind,
    Keys,
    LeaderRecord,
    LeaseRecord,
    PlanRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    Status,
    UnreadableRecord,
    VerdictRecord,
    decode,
    encode,
    now_ms,
)
from spate._errors import ConfigError, StoreError
from spate._plan import validate_job, validate_split_id
from spate._store import Conflict, Entry, Keyspace, Store

__all__ = [
    "JobNotFound",
    "JobStatus",
    "PlanRepair",
    "Repair",
    "RepairRefused",
    "RequeueRefused",
    "SplitStatus",
    "WorkerStatus",
    "held_aside_reason",
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
]


@attrs.frozen
class SplitStatus:
    """One split as the store records it."""

    id: str
    status: str
    owner: str | None
    lease_owner: str | None
    epoch: int
    attempts: int
    watermark: int | None
    completed: bool
    written_at_ms: int
    weight: int
    revision: int
    state: bytes = attrs.field(repr=False, default=b"")
    descriptor: bytes = attrs.field(repr=False, default=b"")
    """What the split covers now: the planner's descriptor, or the primary of its last split."""
    parent: str | None = None
    """For a residual, the split it was split off (``docs/splitting.md``); None if planned."""
    residuals: tuple[str, ...] = ()
    """The residuals split off this split, in order."""
    seeded: bool = True
    """False for a residual its parent's record names whose own records the leader has not
    written yet (it shows with no progress of its own)."""
    reason: str = ""
    """Why the split last failed (the handler's reason, or the leader's note of an owner lost
    without progress); "" if it never failed. For a quarantined split: why it was set aside."""
    load: float | None = None
    """Its smoothed load (units of work a second) as the leader balances by it: its owner's
    trusted measurement, or for a split the leader just moved the load carried across the
    move; None while untrusted, or not running."""
    retry_at_ms: int = 0
    """When its owner runs its handler again after a failure it kept the split through
    (wall-clock ms; 0 if it never waited): see :meth:`retrying`."""

    def retrying(self, now_ms: int) -> bool:
        """Whether the split is held and waits out a failure backoff at ``now_ms``."""
        return self.display_status == "held" and self.retry_at_ms > now_ms

    @property
    def display_status(self) -> str:
        """The status `spate status` shows: ``held``, ``runnable``, ``completed``, ``quarantined``.

        ``held`` is a runnable split with a live lease (a worker is on it); ``runnable`` one
        waiting for an owner.
        """
        if self.status == "runnable" and self.lease_owner is not None:
            return "held"
        return self.status

    def age(self, now_ms: int) -> float | None:
        """Seconds from the last write of the split's progress record to ``now_ms``.

        Every commit writes it (so do a claim, a hand-back, a fail): a runnable, owned split
        whose age keeps growing is stuck. None when the record carries no time.
        """
        if not self.written_at_ms:
            return None
        return max(0, now_ms - self.written_at_ms) / 1000


@attrs.frozen
class WorkerStatus:
    """One live worker (its presence record)."""

    instance: str
    max_in_flight: int
    leader: bool
    holding: int
    locality: str = ""
    capacity: float = 1.0
    """The load it takes relative to a default worker (``Config.capacity``)."""
    load: float | None = None
    """Its load (units a second) as the leader's next balance round would judge it: its
    splits' trusted loads as it reported them, a split the leader just moved to it at the
    load carried across the move, an untrusted split at the job's mean per unit of weight.
    None while no worker reports a trusted load (``docs/balancing.md``)."""
    mean: float | None = None
    """Its share of the job's load (its mean, which the band is around), as the leader's
    round reckons it: by capacity, within its failure domain's share. None with ``load``."""


@attrs.frozen
class JobStatus:
    """A job as an operator needs to see it, read from the store in one pass."""

    job: str
    exists: bool
    fingerprint: str | None
    generation: int | None
    finality: str | None
    planned: int
    leader: str | None
    workers: list[WorkerStatus]
    splits: dict[str, SplitStatus]
    unreadable: list[str]
    isolation_tier: int = 0
    """The locality tier whose domains :meth:`placement` groups the workers by."""
    read_at_ms: int = 0
    """Wall-clock milliseconds when the store was read (the reference of split ages)."""
    load_band: float = 0.10
    """The band the loads are judged by (the fleet's ``Config.load_band``)."""
    verdict: VerdictRecord | None = None
    """How the job ended, once its leader published a verdict (None while it runs)."""

    def outcome(self) -> str | None:
        """The verdict in words (``all complete``, ``stalled: 3 completed, 1 quarantined``)."""
        verdict = self.verdict
        if verdict is None:
            return None
        if verdict.all_complete:
            return f"all complete ({verdict.completed} splits)"
        return f"stalled: {verdict.completed} completed, {verdict.quarantined} quarantined"

    def load_mean(self) -> float | None:
        """The mean load per unit of capacity over the workers that report one (None: none)."""
        reporting = [w for w in self.workers if w.load is not None]
        capacity = sum(w.capacity for w in reporting)
        if not reporting or capacity <= 0:
            return None
        return sum(w.load or 0.0 for w in reporting) / capacity

    def load_ratio(self, worker: WorkerStatus) -> float | None:
        """``worker``'s load over its mean (1.0 is even; None: unknown), as the leader's is."""
        if worker.load is None:
            return None
        if worker.mean is not None:
            return worker.load / worker.mean if worker.mean > 0 else None
        mean = self.load_mean()
        return worker.load / worker.capacity / mean if mean else None

    def placement(self) -> PlacementReport:
        """What each failure domain holds now (live leases, by weight) and the blast radius."""
        held: dict[str, list[str]] = {}
        for split in self.splits.values():
            if split.status == "runnable" and split.lease_owner is not None:
                held.setdefault(split.lease_owner, []).append(split.id)
        return placement_report(
            held,
            {w.instance: w.locality for w in self.workers},
            {s.id: s.weight for s in self.splits.values()},
            self.isolation_tier,
        )

    def counts(self) -> dict[str, int]:
        """How many splits are in each status (plus ``owned``: runnable with a live lease)."""
        out = {"runnable": 0, "completed": 0, "quarantined": 0, "owned": 0}
        for split in self.splits.values():
            out[split.status] = out.get(split.status, 0) + 1
            if split.status == "runnable" and split.lease_owner is not None:
                out["owned"] += 1
        return out

    def ordered_splits(self) -> list[SplitStatus]:
        """Quarantined splits first, then runnable, then completed; by id within each.

        Each residual follows its parent (in the order they were split off), whatever its own
        status: an operator reads a straggler's whole family together.
        """
        rank = {"quarantined": 0, "runnable": 1, "completed": 2}
        children: dict[str, list[str]] = {}
        for split in self.splits.values():
            if split.parent is not None and split.parent in self.splits:
                children.setdefault(split.parent, []).append(split.id)
        for parent, ids in children.items():
            # The order they were split off in (the parent's record), then any it does not name.
            named = {r: n for n, r in enumerate(self.splits[parent].residuals)}
            ids.sort(key=lambda r: (named.get(r, len(named)), r))
        roots = sorted(
            (s for s in self.splits.values() if s.parent is None or s.parent not in self.splits),
            key=lambda s: (rank.get(s.status, 3), s.id),
        )
        ordered: list[SplitStatus] = []
        stack = list(reversed(roots))
        while stack:
            split = stack.pop()
            ordered.append(split)
            stack.extend(self.splits[r] for r in reversed(children.get(split.id, [])))
        return ordered

    def depth(self, split: SplitStatus) -> int:
        """How many splits ``split`` descends from (0 for a planned split)."""
        depth = 0
        while split.parent is not None and split.parent in self.splits and depth < 1000:
            split = self.splits[split.parent]
            depth += 1
        return depth

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (``spate status --json``)."""
        return {
            "job": self.job,
            "exists": self.exists,
            "fingerprint": self.fingerprint,
            "generation": self.generation,
            "finality": self.finality,
            "verdict": None if self.verdict is None else attrs.asdict(self.verdict),
            "planned": self.planned,
            "leader": self.leader,
            "counts": self.counts(),
            "workers": [
                attrs.asdict(w) | {"load_ratio": _ratio(self.load_ratio(w))} for w in self.workers
            ],
            "load_band": self.load_band,
            "load_mean": self.load_mean(),
            "splits": [
                {k: v for k, v in attrs.asdict(s).items() if k not in ("state", "descriptor")}
                | {"age_s": _rounded(s.age(self.read_at_ms)), "display_status": s.display_status}
                | {"retrying": s.retrying(self.read_at_ms)}
                for s in self.ordered_splits()
            ],
            "unreadable": self.unreadable,
            **_placement_json(self),
        }


def _placement_json(status: JobStatus) -> dict[str, object]:
    report = status.placement()
    return {
        "isolation_tier": status.isolation_tier,
        "blast_radius": report.blast_radius,
        "domains": [attrs.asdict(share) for share in report.domains],
    }


def _descriptor(record: ProgressRecord, spec: SpecRecord | None) -> bytes:
    if record.descriptor is not None:
        return record.descriptor  # the primary of the split's last split
    return spec.descriptor if spec is not None else b""


def _balance_loads(
    progress: dict[str, tuple[ProgressRecord, int]],
    specs: dict[str, SpecRecord],
    presence: dict[str, PresenceRecord],
    leases: dict[str, str],
    leader: str | None,
    *,
    isolation_tier: int,
    band: float,
) -> tuple[dict[str, float], tuple[dict[str, float], dict[str, float]]]:
    """Each running split's load and each worker's (load, mean), as the leader balances them.

    The leader's own rules, read from the store: the same split loads
    (:func:`~spate._core.balance.loads.split_loads`, with the loads the leader carries across
    its moves from its presence record) and the same judgement
    (:func:`~spate._core.balance.judge_loads`). Nothing while no worker reports load.
    """
    reports = {i: p for i, p in presence.items() if p.reports_load}
    if not reports:
        return {}, ({}, {})
    held: dict[str, list[str]] = {}
    for split_id, (record, _) in progress.items():
        owner = leases.get(split_id)
        if (
            owner is None
            or owner not in presence
            or split_id not in specs
            or record.status is not Status.RUNNABLE
            or record.completed
        ):
            continue
        held.setdefault(owner, []).append(split_id)
    carried = presence[leader].carried if leader in presence else ()
    by_split = split_loads(held, dict(reports), {e.split: e.rate for e in carried})
    owner_of = {split: owner for owner, names in held.items() for split in names}
    workers = [
        BalanceWorker(
            name=instance,
            lanes=max(1, p.max_in_flight),
            capacity=p.capacity if p.capacity > 0 else 1.0,
            locality=p.locality,
        )
        for instance, p in sorted(presence.items())
    ]
    balance_splits = [
        BalanceSplit(
            id=split, owner=owner_of[split], load=load or 0.0, trusted=load is not None,
            weight=specs[split].weight, affinity=specs[split].locality,
            parent=specs[split].parent,
        )
        for split, (load, _) in by_split.items()
    ]  # fmt: skip
    config = BalanceConfig(load_band=band, isolation_tier=isolation_tier)
    loads = {split: load for split, (load, _) in by_split.items() if load is not None}
    return loads, judge_loads(workers, balance_splits, config)


def _rounded_load(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


async def read_status(
    store: Store, job: str, *, isolation_tier: int = 0, load_band: float = 0.10
) -> JobStatus:
    """Read everything the store holds about ``job`` (two listings, no writes).

    ``isolation_tier`` is the locality tier whose failure domains the status groups by;
    ``load_band`` the band the workers' loads are judged by (the fleet's ``Config.load_band``).
    """
    validate_job(job)
    read_at_ms = now_ms()
    keys = Keys(job)
    durable = _read_durable(keys, await store.list(Keyspace.DURABLE, keys.prefix))
    ephemeral = _read_ephemeral(keys, await store.list(Keyspace.EPHEMERAL, keys.prefix))
    leases = ephemeral.live_leases(durable.session_leases)
    loads, judged = _balance_loads(
        durable.progress, durable.specs, ephemeral.presence, leases, ephemeral.leader,
        isolation_tier=isolation_tier, band=load_band,
    )  # fmt: skip
    plan = durable.plan
    return JobStatus(
        job=job,
        exists=plan is not None,
        fingerprint=plan.fingerprint if plan else None,
        generation=plan.generation if plan else None,
        finality=plan.finality.value if plan else None,
        verdict=plan.verdict if plan else None,
        planned=plan.planned if plan else 0,
        leader=ephemeral.leader,
        workers=_worker_statuses(ephemeral, leases, judged),
        splits=_split_statuses(durable, leases, loads),
        unreadable=durable.unreadable + ephemeral.unreadable,
        isolation_tier=isolation_tier,
        read_at_ms=read_at_ms,
        load_band=load_band,
    )


@attrs.define
class _Durable:
    """What a job's durable keys say: its plan, each split's records, the durable leases."""

    plan: PlanRecord | None = None
    progress: dict[str, tuple[ProgressRecord, int]] = attrs.field(factory=dict)
    """Split -> its progress record and the record's revision."""
    specs: dict[str, SpecRecord] = attrs.field(factory=dict)
    session_leases: dict[str, LeaseRecord] = attrs.field(factory=dict)
    """Durable leases (stores with per-key TTLs): alive while their owner's session is."""
    held_aside: dict[str, dict[str, str]] = attrs.field(factory=dict)
    """Split -> its unreadable records (key -> problem): the split is shown quarantined, as
    the leader counts it (held aside)."""
    bad_progress: dict[str, int] = attrs.field(factory=dict)
    """Split -> the revision of its unreadable progress record."""
    unreadable: list[str] = attrs.field(factory=list)


def _read_durable(keys: Keys, entries: Iterable[Entry]) -> _Durable:
    found = _Durable()
    for entry in entries:
        kind = keys.classify(entry.key)
        try:
            if kind == (KeyKind.PLAN, ""):
                found.plan = decode(PlanRecord, entry.key, entry.value)
            elif kind is not None and kind[0] is KeyKind.SPLIT:
                record = decode(ProgressRecord, entry.key, entry.value, split=kind[1])
                found.progress[kind[1]] = (record, entry.revision)
            elif kind is not None and kind[0] is KeyKind.SPEC:
                found.specs[kind[1]] = decode(SpecRecord, entry.key, entry.value, split=kind[1])
            elif kind is not None and kind[0] is KeyKind.LEASE:
                found.session_leases[kind[1]] = decode(LeaseRecord, entry.key, entry.value)
        except UnreadableRecord as exc:
            found.unreadable.append(entry.key)
            if kind is not None and kind[0] in (KeyKind.SPLIT, KeyKind.SPEC):
                found.held_aside.setdefault(kind[1], {})[entry.key] = exc.problem
                if kind[0] is KeyKind.SPLIT:
                    found.bad_progress[kind[1]] = entry.revision
    return found


@attrs.define
class _Ephemeral:
    """What a job's ephemeral keys say: who leads, who is present, who holds which lease."""

    leader: str | None = None
    presence: dict[str, PresenceRecord] = attrs.field(factory=dict)
    leases: dict[str, str] = attrs.field(factory=dict)
    """Split -> the owner of its ephemeral lease key (stores with sessions)."""
    unreadable: list[str] = attrs.field(factory=list)

    def live_leases(self, session_leases: dict[str, LeaseRecord]) -> dict[str, str]:
        """Split -> its lease's owner, of the leases alive now.

        The ephemeral leases, and each durable one whose owner's presence record still names
        the lease's nonce.
        """
        leases = dict(self.leases)
        for split_id, lease in session_leases.items():
            session = self.presence.get(lease.owner)
            if session is not None and session.nonce == lease.nonce:
                leases[split_id] = lease.owner
        return leases


def _read_ephemeral(keys: Keys, entries: Iterable[Entry]) -> _Ephemeral:
    found = _Ephemeral()
    for entry in entries:
        kind = keys.classify(entry.key)
        try:
            if kind == (KeyKind.LEADER, ""):
                found.leader = decode(LeaderRecord, entry.key, entry.value).owner
            elif kind is not None and kind[0] is KeyKind.WORKER:
                found.presence[kind[1]] = decode(PresenceRecord, entry.key, entry.value)
            elif kind is not None and kind[0] is KeyKind.SPLIT:
                found.leases[kind[1]] = decode(LeaseRecord, entry.key, entry.value).owner
        except UnreadableRecord:
            found.unreadable.append(entry.key)
    return found


def _split_statuses(
    durable: _Durable, leases: dict[str, str], loads: dict[str, float]
) -> dict[str, SplitStatus]:
    """Every split of the job by id.

    Each one with records, then each residual named by its parent's record but not seeded yet
    (the leader writes its records when it reads the parent's): shown, so no work looks
    missing.
    """
    progress = dict(durable.progress)
    for split_id, revision in durable.bad_progress.items():
        progress[split_id] = (ProgressRecord(id=split_id), revision)
    splits: dict[str, SplitStatus] = {}
    for split_id, (record, revision) in sorted(progress.items()):
        spec = durable.specs.get(split_id)
        problems = durable.held_aside.get(split_id)
        if problems and (split_id in durable.bad_progress or record.status is Status.RUNNABLE):
            # Held aside: no worker runs it until `spate repair` rewrites the record.
            record = attrs.evolve(
                record, status=Status.QUARANTINED, reason=held_aside_reason(problems)
            )
        splits[split_id] = SplitStatus(
            id=split_id,
            status=record.status.value,
            owner=record.owner,
            lease_owner=leases.get(split_id),
            epoch=record.epoch,
            attempts=record.attempts,
            watermark=record.watermark,
            completed=record.completed,
            written_at_ms=record.written_at_ms,
            weight=spec.weight if spec is not None else 1,
            revision=revision,
            state=record.state,
            descriptor=_descriptor(record, spec),
            parent=spec.parent if spec is not None and spec.parent else None,
            residuals=tuple(r.id for r in record.residuals),
            reason=record.reason,
            load=loads.get(split_id),
            retry_at_ms=record.retry_at_ms,
        )
    for split_id, (record, _) in sorted(progress.items()):
        for residual in record.residuals:
            if residual.id not in splits:
                splits[residual.id] = SplitStatus(
                    id=residual.id, status="runnable", owner=None, lease_owner=None, epoch=0,
                    attempts=0, watermark=None, completed=False, written_at_ms=0,
                    weight=residual.weight, revision=0, descriptor=residual.descriptor,
                    parent=split_id, seeded=False,
                )  # fmt: skip
    return splits


def _worker_statuses(
    ephemeral: _Ephemeral,
    leases: dict[str, str],
    judged: tuple[dict[str, float], dict[str, float]],
) -> list[WorkerStatus]:
    """Every present worker, by name: what it holds, and its load and mean as judged."""
    holding: dict[str, int] = {}
    for owner in leases.values():
        holding[owner] = holding.get(owner, 0) + 1
    loads, means = judged
    return [
        WorkerStatus(
            instance,
            p.max_in_flight,
            instance == ephemeral.leader,
            holding.get(instance, 0),
            p.locality,
            capacity=p.capacity,
            load=_rounded_load(loads.get(instance)),
            mean=_rounded_load(means.get(instance)),
        )
        for instance, p in sorted(ephemeral.presence.items())
    ]


class JobNotFound(StoreError):
    """The store holds no key of the named job; ``jobs`` names the jobs it does hold."""

    def __init__(self, job: str, jobs: Iterable[str]) -> None:
        self.job = job
        self.jobs = sorted(jobs)
        here = ", ".join(self.jobs) if self.jobs else "none"
        super().__init__(
            f"no job {job} in this store (jobs here: {here}); check --job, and that the store "
            "URL names the namespace the job runs in"
        )


_LIST_PAGE = 1000


async def list_jobs(store: Store) -> list[str]:
    """The names of every job with a key in ``store`` (either keyspace), sorted. Writes nothing.

    Every key of job ``J`` starts with ``J.``; keys of other programs sharing the namespace
    (no dot, or not a valid job name before it) are not jobs and are left out. Reads the
    whole namespace page by page: an operator's look, not something to call in a loop.
    """
    jobs: set[str] = set()
    for keyspace in Keyspace:
        async with store.list_pages(keyspace, "", page_size=_LIST_PAGE) as pages:
            async for page in pages:
                for entry in page:
                    name, dot, _ = entry.key.partition(".")
                    if dot and name not in jobs and _is_job_name(name):
                        jobs.add(name)
    return sorted(jobs)


def _is_job_name(name: str) -> bool:
    try:
        validate_job(name)
    except ConfigError:
        return False
    return True


async def require_job(store: Store, job: str) -> None:
    """Raise :class:`JobNotFound` (naming the jobs there) unless ``store`` holds a key of ``job``.

    Reads only: what read-only commands check before they show anything.
    """
    validate_job(job)
    prefix = Keys(job).prefix
    for keyspace in Keyspace:
        async with store.list_pages(keyspace, prefix, page_size=1) as pages:
            async for _ in pages:
                return
    raise JobNotFound(job, await list_jobs(store))


class RequeueRefused(StoreError):
    """A split named for requeue is missing or not quarantined; nothing was changed for it."""


_MAX_RACES = 8
OPERATOR = "operator"
"""The instance name operator writes carry in their spans."""


async def requeue(store: Store, job: str, splits: Iterable[str]) -> list[str]:
    """Return quarantined splits to the queue: attempts reset, epoch bumped, owner cleared.

    Each split is moved with a compare-and-swap on its progress record, re-read and retried
    if a concurrent write moved it. Raises :class:`RequeueRefused` naming every split that
    does not exist or is not quarantined (those are left untouched; the others are
    requeued). Returns the ids requeued.
    """
    validate_job(job)
    ids = [validate_split_id(s) for s in splits]
    if not ids:
        raise ConfigError("name at least one split to requeue")
    keys = Keys(job)
    scope = write_spans.Scope(job=job, instance=OPERATOR, system=store.capabilities.system)
    done: list[str] = []
    refused: list[str] = []
    for split in ids:
        key = keys.split(split)
        for _ in range(_MAX_RACES):
            entry = await store.get(Keyspace.DURABLE, key)
            if entry is None:
                refused.append(f"{split} (no such split in job {job!r})")
                break
            try:
                record = decode(ProgressRecord, key, entry.value, split=split)
            except UnreadableRecord as exc:
                refused.append(
                    f"{split} (its progress record is unreadable: {exc.problem}; rewrite it "
                    f"with `spate repair --store URL --job {job} {split}`)"
                )
                break
            if record.status is not Status.QUARANTINED:
                refused.append(f"{split} (it is {record.status.value}, not quarantined)")
                break
            fresh = attrs.evolve(
                record,
                status=Status.RUNNABLE,
                attempts=0,
                owner=None,
                owner_nonce="",
                epoch=record.epoch + 1,
                written_at_ms=now_ms(),
            )
            result = await write_spans.write(
                store,
                scope,
                "requeue",
                "update",
                Keyspace.DURABLE,
                key,
                encode(fresh),
                expected=entry.revision,
                split=split,
                epoch=fresh.epoch,
            )
            if not isinstance(result, Conflict):
                done.append(split)
                break
        else:
            refused.append(f"{split} (it kept changing under concurrent writes; try again)")
    if done:
        await _reopen(store, scope, keys)
    if refused:
        raise RequeueRefused(
            f"refused to requeue {', '.join(refused)}"
            + (f"; requeued {', '.join(done)}" if done else "")
            + ". Only quarantined splits can be requeued (see `spate status`)."
        )
    return done


async def requeue_all(store: Store, job: str) -> list[str]:
    """Requeue every quarantined split of ``job`` (as :func:`requeue` does each); their ids.

    Returns ``[]`` when none is quarantined. Raises :class:`JobNotFound` when the store holds
    no key of the job, and :class:`RequeueRefused` when a split listed as quarantined moved
    on before it could be requeued (a worker's write, say): the others are requeued.
    """
    validate_job(job)
    keys = Keys(job)
    quarantined: list[str] = []
    for entry in await store.list(Keyspace.DURABLE, keys.split_prefix):
        kind = keys.classify(entry.key)
        if kind is None or kind[0] is not KeyKind.SPLIT:
            continue
        try:
            record = decode(ProgressRecord, entry.key, entry.value, split=kind[1])
        except UnreadableRecord:
            continue  # `spate status` names it; requeueing what cannot be read helps nobody
        if record.status is Status.QUARANTINED:
            quarantined.append(kind[1])
    if not quarantined:
        await require_job(store, job)
        return []
    return await requeue(store, job, quarantined)


async def _reopen(store: Store, scope: write_spans.Scope, keys: Keys) -> None:
    """Clear the verdict of a final plan after a requeue, so a worker started now finishes it.

    The leader publishes the verdict in the plan record and every worker, however late it
    starts, returns the verdict it finds there: a requeued split would never run again while
    it stands. The record is rewritten even when it carries no verdict yet: a leader judging
    the job right now listed it before the requeue, and its verdict's CAS expects the record's
    revision from before that listing, so this write makes it lose and judge again.
    """
    for _ in range(_MAX_RACES):
        entry = await store.get(Keyspace.DURABLE, keys.plan)
        if entry is None:
            return
        plan = decode(PlanRecord, keys.plan, entry.value)
        if plan.finality is not Finality.FINAL:
            return  # an open plan has no verdict, and none is being judged
        reopened = attrs.evolve(plan, verdict=None, updated_at_ms=now_ms())
        result = await write_spans.write(
            store,
            scope,
            "requeue",
            "update",
            Keyspace.DURABLE,
            keys.plan,
            encode(reopened),
            expected=entry.revision,
        )
        if not isinstance(result, Conflict):
            return
    raise StoreError(
        f"the plan record {keys.plan!r} kept changing under concurrent writes, so the job's "
        "verdict was not cleared: the splits were requeued, but a worker started now returns "
        "the old verdict at once"
    )


def held_aside_reason(problems: dict[str, str]) -> str:
    """The reason a split held aside shows: each unreadable record by key, with its problem.

    The same words the coordinator's view gives it (:mod:`spate._core.view.split_table`).
    """
    return "; ".join(f"unreadable record {key}: {p}" for key, p in sorted(problems.items()))


class RepairRefused(StoreError):
    """A split named for repair cannot be repaired (or moved since it was inspected)."""


@attrs.frozen
class Repair:
    """What :func:`repair` will write over one split's unreadable progress record.

    Found by :func:`inspect_repair`; :func:`repair` writes exactly this, by a
    compare-and-swap at ``revision``, so it overwrites the very bytes that were inspected.
    """

    split: str
    key: str
    """The unreadable progress record's key."""
    problem: str
    """Why it cannot be read."""
    revision: int
    """The revision it stands at (the rewrite's expected revision)."""
    epoch: int
    """The epoch the fresh record starts at: the unreadable record's revision, which is
    above every epoch the record ever held (each epoch was one write of the key, and the
    revision grows by at least one a write), so no fence of an earlier owner is reused."""
    residuals: tuple[str, ...] = ()
    """Splits whose spec names this one as their parent: split off it by earlier owners."""

    def describe(self) -> str:
        """What the rewrite does and what it cannot recover, for the operator to confirm."""
        lines = [
            f"split {self.split}: its progress record {self.key!r} is unreadable ({self.problem}).",
            f"  rewrite: a fresh runnable record at epoch {self.epoch} (attempts 0, no owner).",
            "  lost: its watermark and state (the store holds no other copy), so its work is "
            "done again from the start of its descriptor; make sure your sink tolerates it "
            "(a fence-guarded sink does: the new epoch is above every earlier one).",
        ]
        if self.residuals:
            lines.append(
                f"  also lost: which part it kept when it was split; it runs its planned "
                f"descriptor again, which covers its residuals {', '.join(self.residuals)} too "
                "(they run as well)."
            )
        return "\n".join(lines)


async def inspect_repair(store: Store, job: str, splits: Iterable[str]) -> list[Repair]:
    """What :func:`repair` would write for each named split (reads only).

    Raises :class:`RepairRefused` naming every split that cannot be repaired: missing, its
    progress record readable (nothing to repair; a quarantined one is requeued instead), or
    its spec record unreadable (the planner's descriptor has no other copy in the store).
    """
    validate_job(job)
    ids = [validate_split_id(s) for s in splits]
    if not ids:
        raise ConfigError("name at least one split to repair")
    keys = Keys(job)
    repairs: list[Repair] = []
    refused: list[str] = []
    residuals: dict[str, list[str]] | None = None
    for split in ids:
        key = keys.split(split)
        spec_key = keys.spec(split)
        entry = await store.get(Keyspace.DURABLE, key)
        spec_entry = await store.get(Keyspace.DURABLE, spec_key)
        if spec_entry is not None:
            try:
                decode(SpecRecord, spec_key, spec_entry.value, split=split)
            except UnreadableRecord as exc:
                refused.append(
                    f"{split} (its spec record {spec_key!r} is unreadable: {exc.problem}; the "
                    "descriptor the planner gave it has no other copy in the store, so spate "
                    "cannot rebuild it: write the spec record again from your planner's "
                    "output, or delete the job with `spate delete` and run it again)"
                )
                continue
        if entry is None:
            refused.append(f"{split} (no such split in job {job!r})")
            continue
        try:
            decode(ProgressRecord, key, entry.value, split=split)
        except UnreadableRecord as exc:
            if residuals is None:
                residuals = await _residuals_by_parent(store, keys)
            repairs.append(
                Repair(
                    split=split,
                    key=key,
                    problem=exc.problem,
                    revision=entry.revision,
                    epoch=entry.revision,
                    residuals=tuple(sorted(residuals.get(split, ()))),
                )
            )
            continue
        refused.append(
            f"{split} (its records are readable: nothing to repair; a quarantined split is "
            "requeued with `spate requeue`)"
        )
    if refused:
        raise RepairRefused(f"refused to repair {', '.join(refused)}; nothing was written")
    return repairs


async def repair(store: Store, job: str, repairs: Iterable[Repair]) -> list[str]:
    """Write each inspected :class:`Repair` (from :func:`inspect_repair`); the ids repaired.

    Each rewrite is a compare-and-swap at the revision inspected, so it lands only over the
    bytes the operator confirmed; one that moved since is refused (inspect again). The
    leader places a repaired split like any runnable one once it lists the job (at its next
    reconcile; at once when this clears a published verdict). Raises :class:`RepairRefused`
    naming the splits not repaired (the others are).
    """
    validate_job(job)
    keys = Keys(job)
    scope = write_spans.Scope(job=job, instance=OPERATOR, system=store.capabilities.system)
    done: list[str] = []
    refused: list[str] = []
    for each in repairs:
        record = ProgressRecord(id=each.split, epoch=each.epoch, written_at_ms=now_ms())
        result = await write_spans.write(
            store,
            scope,
            "repair",
            "update",
            Keyspace.DURABLE,
            keys.split(each.split),
            encode(record),
            expected=each.revision,
            split=each.split,
            epoch=record.epoch,
        )
        if isinstance(result, Conflict):
            refused.append(f"{each.split} (its record moved since it was inspected)")
        else:
            done.append(each.split)
    if done:
        await _reopen(store, scope, keys)
    if refused:
        raise RepairRefused(
            f"refused to repair {', '.join(refused)}"
            + (f"; repaired {', '.join(done)}" if done else "")
            + ". Inspect it again (`spate repair` shows what it will write)."
        )
    return done


async def _residuals_by_parent(store: Store, keys: Keys) -> dict[str, list[str]]:
    """Parent split -> the splits whose readable spec names it (one listing of the specs)."""
    out: dict[str, list[str]] = {}
    async with store.list_pages(Keyspace.DURABLE, keys.spec_prefix, page_size=_LIST_PAGE) as pages:
        async for page in pages:
            for entry in page:
                kind = keys.classify(entry.key)
                if kind is None or kind[0] is not KeyKind.SPEC:
                    continue
                try:
                    spec = decode(SpecRecord, entry.key, entry.value, split=kind[1])
                except UnreadableRecord:
                    continue
                if spec.parent:
                    out.setdefault(spec.parent, []).append(kind[1])
    return out


@attrs.frozen
class PlanRepair:
    """What :func:`repair_plan` will write over a job's unreadable plan record.

    Found by :func:`inspect_plan_repair`: the store's other records tell most of it (the
    generation, the count), the rest starts afresh (see :meth:`describe`).
    """

    key: str
    problem: str
    revision: int
    """The revision the unreadable record stands at (the rewrite's expected revision)."""
    record: PlanRecord
    """The record written in its place."""

    def describe(self) -> str:
        """What the rewrite does and what it cannot recover, for the operator to confirm."""
        r = self.record
        return "\n".join(
            [
                f"the plan record {self.key!r} is unreadable ({self.problem}).",
                f"  rewrite: fingerprint {r.fingerprint!r} (every worker of the job must run "
                f"with it), generation {r.generation} (above every leader's and assignment's "
                f"the store holds), {r.planned} split(s) planned, open, no verdict.",
                "  lost: the planner's cursor and whether the plan was final: the next leader "
                "runs the planner again from the start (splits it planned already are found, "
                "not written twice) and publishes what it answers; and the job's creation "
                "time, which starts afresh (every fence from now on is above every earlier "
                "one).",
            ]
        )


async def inspect_plan_repair(store: Store, job: str, *, fingerprint: str = "") -> PlanRepair:
    """What :func:`repair_plan` would write over ``job``'s unreadable plan record (reads only).

    ``fingerprint`` is the one the job's workers run with (``run_worker(fingerprint=)``; the
    store has no other copy). Raises :class:`RepairRefused` when the record is missing or
    readable.
    """
    validate_job(job)
    keys = Keys(job)
    entry = await store.get(Keyspace.DURABLE, keys.plan)
    if entry is None:
        raise RepairRefused(f"job {job!r} has no plan record; nothing to repair")
    try:
        decode(PlanRecord, keys.plan, entry.value)
    except UnreadableRecord as exc:
        problem = exc.problem
    else:
        raise RepairRefused(f"the plan record {keys.plan!r} is readable: nothing to repair")
    generation = 0
    planned = 0
    for keyspace in Keyspace:
        async with store.list_pages(keyspace, keys.prefix, page_size=_LIST_PAGE) as pages:
            async for page in pages:
                for item in page:
                    generation = max(generation, _generation_of(keys, keyspace, item))
                    kind = keys.classify(item.key)
                    if keyspace is Keyspace.DURABLE and kind is not None:
                        planned += kind[0] is KeyKind.SPEC
    record = PlanRecord(
        fingerprint=fingerprint,
        generation=generation,
        planned=planned,
        updated_at_ms=now_ms(),
        incarnation_ms=now_ms(),
    )
    return PlanRepair(key=keys.plan, problem=problem, revision=entry.revision, record=record)


def _generation_of(keys: Keys, keyspace: Keyspace, entry: Entry) -> int:
    """The leader generation a record carries (an assignment's, the leader key's), else 0."""
    kind = keys.classify(entry.key)
    try:
        if keyspace is Keyspace.DURABLE and kind is not None and kind[0] is KeyKind.ASSIGN:
            return decode(AssignmentRecord, entry.key, entry.value).generation
        if keyspace is Keyspace.EPHEMERAL and kind == (KeyKind.LEADER, ""):
            return decode(LeaderRecord, entry.key, entry.value).generation
    except UnreadableRecord:
        pass
    return 0


async def repair_plan(store: Store, job: str, plan_repair: PlanRepair) -> None:
    """Write the inspected :class:`PlanRepair`, by a compare-and-swap at its revision.

    Raises :class:`RepairRefused` when the record moved since it was inspected (nothing is
    written). Once it lands, a worker is elected leader again and plans the job.
    """
    validate_job(job)
    keys = Keys(job)
    scope = write_spans.Scope(job=job, instance=OPERATOR, system=store.capabilities.system)
    result = await write_spans.write(
        store,
        scope,
        "repair",
        "update",
        Keyspace.DURABLE,
        keys.plan,
        encode(plan_repair.record),
        expected=plan_repair.revision,
    )
    if isinstance(result, Conflict):
        raise RepairRefused(
            f"the plan record {keys.plan!r} moved since it was inspected; nothing was written. "
            "Inspect it again."
        )


async def remove_unreadable_leader(store: Store, job: str) -> bool:
    """Delete ``job``'s leader key if it cannot be read, at the revision read; whether it did.

    An unreadable leader key stands in every election's way until it expires with its
    writer's session; removing it lets a worker be elected now. Raises
    :class:`RepairRefused` when the key is readable (a live leader's: never removed here).
    """
    validate_job(job)
    keys = Keys(job)
    entry = await store.get(Keyspace.EPHEMERAL, keys.leader)
    if entry is None:
        return False
    try:
        decode(LeaderRecord, keys.leader, entry.value)
    except UnreadableRecord:
        scope = write_spans.Scope(job=job, instance=OPERATOR, system=store.capabilities.system)
        result = await write_spans.write(
            store,
            scope,
            "repair",
            "delete",
            Keyspace.EPHEMERAL,
            keys.leader,
            expected=entry.revision,
        )
        return not isinstance(result, Conflict)
    raise RepairRefused(
        f"the leader key {keys.leader!r} is readable (a live leader's); it is left alone"
    )
