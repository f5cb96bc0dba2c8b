"""The history of one run: what the store saw, what the workers were told, and how it ended.

A :class:`History` is an append-only list of frozen events. The recorder
(:mod:`spate_testing.sim._recorder`) fills it while a fleet runs; the invariant checker
(:mod:`spate_testing.sim._checker`) reads it afterwards. Events are appended in the order they
happened on one Trio event loop, so list order is real-time order for an in-process fleet.
Histories of real processes (the chaos run) are merged from several files and carry only the
events each process could see.

The events:

- :class:`StoreWrite` — one create/update/delete as the store applied it (true outcome, new
  revision and value), by which actor. Recorded beneath the fault injection, so a write whose
  reply was lost still shows as won, and a zombie's delayed write shows when it landed.
- :class:`Gained` — a handler started for a split at an epoch (the worker believes it owns it).
- :class:`Acked` — a handler's ``commit`` returned: the worker was told the commit landed.
- :class:`HandlerEnded` — a handler finished (completed, returned, raised, cancelled, fenced).
- :class:`Split` — a handler's split call ended: split (the residual's id), fenced, or
  abandoned (the handler was cancelled with the call in flight).
- :class:`ItemSpace` — the workload's descriptors are ranges of one item space (splittable).
- :class:`Verdict` — a worker's ``run_worker`` returned a verdict.
- :class:`Revocations` — a worker's revocation counters, from its metrics hooks.
- :class:`Action` — something the simulator did (start, kill, freeze, partition, ...).
- :class:`Leading` — a worker began or stopped leading the job.
- :class:`Balanced` — the leader ran a balance round (see ``docs/balancing.md``): its moves,
  the load they carried, the job's load, each worker's load, and the rules it ran under (the
  budget, the cooldown and the band).
- :class:`Delivered` — a watch delivered keys of splits (or another worker's assignment
  record) to a worker: a live event, or the entries of a snapshot.
- :class:`Final` — the authoritative final listing of the job, and whether the run ended in
  time.

An *actor* names one incarnation of a worker (``"w3#2"``: the second life of instance
``w3``); a restart under the same instance id is a new actor. Actors that are not workers (the
simulator, an operator) have names of their own.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TypeAlias

import attrs

__all__ = [
    "Acked",
    "Action",
    "BalanceMove",
    "Balanced",
    "Delivered",
    "Final",
    "FinalSplit",
    "Gained",
    "HandlerEnded",
    "History",
    "HistoryEvent",
    "ItemSpace",
    "Leading",
    "Revocations",
    "Split",
    "SplitOutcome",
    "StoreWrite",
    "Verdict",
    "instance_of",
    "range_bounds",
    "range_descriptor",
]

WriteOp: TypeAlias = Literal["create", "update", "delete"]
WriteOutcome: TypeAlias = Literal["won", "lost", "error"]


def instance_of(actor: str) -> str:
    """The instance id of an actor name (``"w3#2"`` -> ``"w3"``)."""
    return actor.split("#", 1)[0]


@attrs.frozen(kw_only=True)
class StoreWrite:
    """One write as the store applied it.

    ``outcome`` is ``"won"`` (applied: ``revision`` is the new revision, ``value`` what was
    written; None for a delete), ``"lost"`` (its condition failed: nothing changed) or
    ``"error"`` (the store raised: it may or may not have landed, as with a timeout).
    ``keyspace`` is ``"durable"`` or ``"ephemeral"``.
    """

    at: float
    actor: str
    op: WriteOp
    keyspace: str
    key: str
    expected: int | None
    outcome: WriteOutcome
    revision: int | None = None
    value: bytes | None = None


@attrs.frozen(kw_only=True)
class Gained:
    """A handler started: ``actor`` believes it owns ``split`` at ``epoch``."""

    at: float
    actor: str
    split: str
    epoch: int
    watermark: int | None


@attrs.frozen(kw_only=True)
class Acked:
    """A commit was acknowledged to ``actor``'s handler (``commit`` returned)."""

    at: float
    actor: str
    split: str
    epoch: int
    watermark: int | None
    completed: bool


HandlerHow: TypeAlias = Literal["completed", "returned", "raised", "cancelled", "fenced"]


@attrs.frozen(kw_only=True)
class HandlerEnded:
    """A handler finished, and how."""

    at: float
    actor: str
    split: str
    epoch: int
    how: HandlerHow


SplitOutcome: TypeAlias = Literal["split", "fenced", "abandoned"]


@attrs.frozen(kw_only=True)
class Split:
    """``actor``'s handler's call to split ``split`` (held at ``epoch``) ended.

    It asked for ``primary`` to stay and ``residual`` to become a new split. ``outcome``:
    ``"split"`` (it returned ``residual_id``), ``"fenced"`` (it raised Fenced: no residual may
    ever run) or ``"abandoned"`` (the handler was cancelled while the call was in flight, its
    outcome unknown). ``asked``: the leader had asked for it (``split_requested``).
    """

    at: float
    actor: str
    split: str
    epoch: int
    primary: bytes
    residual: bytes
    outcome: SplitOutcome
    residual_id: str | None = None
    asked: bool = False


def range_descriptor(start: int, end: int) -> bytes:
    """The descriptor of the items ``[start, end)`` (see :class:`ItemSpace`)."""
    return f"{start}:{end}".encode()


def range_bounds(descriptor: bytes) -> tuple[int, int]:
    """``(start, end)`` of a range descriptor; ValueError if it is not one."""
    start, colon, end = descriptor.decode("ascii", errors="replace").partition(":")
    if not colon:
        raise ValueError(f"not a range descriptor: {descriptor!r}")
    return int(start), int(end)


@attrs.frozen(kw_only=True)
class ItemSpace:
    """The workload's descriptors are ranges ``b"start:end"`` of the items ``[start, end)``.

    Its watermarks are positions in that space. The checker's ``range-partition`` invariant
    then holds the job's committed ranges to tiling it exactly.
    """

    at: float
    start: int
    end: int


@attrs.frozen(kw_only=True)
class Verdict:
    """``actor``'s ``run_worker`` returned a verdict.

    ``all_complete`` for AllComplete; otherwise Stalled with its two counts.
    """

    at: float
    actor: str
    all_complete: bool
    completed: int | None = None
    quarantined: int | None = None


@attrs.frozen(kw_only=True)
class Revocations:
    """One actor's revocation counters from its metrics hooks.

    ``settled`` is True when the actor's coordinator closed normally (a verdict or a graceful
    leave), so nothing may still be in flight; a killed actor's counters are a prefix only.
    """

    at: float
    actor: str
    requested: int
    drained: int
    forced: int
    cancelled: int
    settled: bool
    problem: str | None = None
    """The first inconsistency the hooks saw live (an outcome before its request, more in
    flight than the worker reports draining), if any."""


@attrs.frozen(kw_only=True)
class Action:
    """Something the simulator (or chaos driver) did to ``actor``: ``what`` plus a detail."""

    at: float
    actor: str
    what: str
    detail: str = ""


@attrs.frozen(kw_only=True)
class Leading:
    """``actor`` began (``leading``) or stopped leading the job.

    A worker leads from the moment its coordinator first says it leads until its watches
    are a follower's again: a deposed leader learns it in one step and closes the leader's
    watches after the next one, and what those watches deliver meanwhile is still a leader's.
    """

    at: float
    actor: str
    leading: bool


@attrs.frozen(kw_only=True)
class BalanceMove:
    """One move of a balance round: ``split`` from ``source`` to ``target``, carrying ``load``."""

    split: str
    source: str
    target: str
    load: float


@attrs.frozen(kw_only=True)
class Balanced:
    """``actor``, leading, ran balance round ``round`` (its own count: a new leader starts at 1).

    ``moves`` are the round's decision (the leader's, as its metrics hook heard it: whether each
    move then landed is the store's story), ``moved_load`` the load they carry by the leader's
    account and ``job_load`` the job's. ``budget`` is the config's ``max_moved_load`` (the share
    of the job's load a round may move) and ``cooldown`` the seconds a moved split stays put
    (``cooldown_rounds`` x ``balance_interval``). ``loads`` are each live worker's load as
    the round judged it, after its moves (empty for a round that judged none: idle or
    unmeasured), and ``band`` the config's ``load_band``.
    """

    at: float
    actor: str
    round: int
    reason: str
    moves: tuple[BalanceMove, ...]
    moved_load: float
    job_load: float
    budget: float
    cooldown: float
    loads: tuple[tuple[str, float], ...] = ()
    band: float = 0.0


@attrs.frozen(kw_only=True)
class Delivered:
    """A watch delivered ``keys`` of ``keyspace`` to ``actor``.

    One live event (``snapshot`` False: one key) or the entries of one watch snapshot.
    Only keys the foreign-delivery invariant is about are recorded: progress records, leases
    and specs of splits, and assignment records of other instances. Point reads and listings
    are not deliveries.
    """

    at: float
    actor: str
    keyspace: str
    keys: tuple[str, ...]
    snapshot: bool = False


@attrs.frozen(kw_only=True)
class FinalSplit:
    """One split as the final authoritative listing shows it."""

    split: str
    status: str
    epoch: int
    watermark: int | None
    completed: bool
    owner: str | None


@attrs.frozen(kw_only=True)
class Final:
    """How the run ended: the final listing and whether the job terminated in time.

    ``plan_final`` is whether the plan record says no more splits will come; ``expected`` the
    split ids the workload planned (None when unknown). ``terminated`` is False when the run
    was cut off at its bound of simulated time (``bound`` seconds after the faults stopped).
    """

    at: float
    plan_final: bool
    expected: tuple[str, ...] | None
    splits: tuple[FinalSplit, ...]
    terminated: bool
    bound: float


HistoryEvent: TypeAlias = (
    StoreWrite
    | Gained
    | Acked
    | HandlerEnded
    | Split
    | ItemSpace
    | Verdict
    | Revocations
    | Action
    | Leading
    | Balanced
    | Delivered
    | Final
)
_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        StoreWrite,
        Gained,
        Acked,
        HandlerEnded,
        Split,
        ItemSpace,
        Verdict,
        Revocations,
        Action,
        Leading,
        Balanced,
        Delivered,
        Final,
    )
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if attrs.has(type(value)):
        return {f.name: _jsonable(getattr(value, f.name)) for f in attrs.fields(type(value))}
    return value


def event_to_json(event: HistoryEvent) -> dict[str, Any]:
    """A JSON-ready dict of ``event`` (bytes as ``{"b64": ...}``), tagged with its type."""
    data: dict[str, Any] = _jsonable(event)
    data["type"] = type(event).__name__
    return data


def event_from_json(data: dict[str, Any]) -> HistoryEvent:
    """The event :func:`event_to_json` produced ``data`` from; raises ValueError if unknown."""
    data = dict(data)
    cls = _TYPES.get(data.pop("type", ""))
    if cls is None:
        raise ValueError(f"not a history event: {data!r}")
    if cls is Final:
        data["splits"] = tuple(FinalSplit(**s) for s in data["splits"])
        if data["expected"] is not None:
            data["expected"] = tuple(data["expected"])
    if cls is Delivered:
        data["keys"] = tuple(data["keys"])
    if cls is Balanced:
        data["moves"] = tuple(BalanceMove(**m) for m in data["moves"])
        data["loads"] = tuple((w, x) for w, x in data.get("loads", ()))
    for name, value in list(data.items()):
        if isinstance(value, dict) and set(value) == {"b64"}:
            data[name] = base64.b64decode(value["b64"])
    event: HistoryEvent = cls(**data)
    return event


def _canonical_value(value: bytes | None) -> Any:
    # Records carry advisory wall-clock stamps (written_at_ms, updated_at_ms) that differ
    # between two runs of one seed; everything else in them is decided by the seed.
    if value is None:
        return None
    head, newline, state = value.partition(b"\n")
    if newline and head.startswith(b"{"):
        # A framed record (a schema-2 progress record): a JSON header line, then raw bytes.
        return {"header": _canonical_value(head), "rest": _jsonable(state)}
    try:
        decoded = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return _jsonable(value)
    if isinstance(decoded, dict):
        return {k: v for k, v in decoded.items() if not k.endswith("_at_ms")}
    return decoded


@attrs.define
class History:
    """An append-only record of one run of job ``job`` (optionally from seed ``seed``)."""

    job: str
    seed: int | None = None
    events: list[HistoryEvent] = attrs.field(factory=list)

    def append(self, event: HistoryEvent) -> None:
        """Add one event at the end."""
        self.events.append(event)

    def __iter__(self) -> Iterator[HistoryEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of(self, cls: type[Any]) -> list[Any]:
        """Every event of type ``cls``, in order."""
        return [e for e in self.events if isinstance(e, cls)]

    @property
    def final(self) -> Final | None:
        """The last :class:`Final` event, if the run recorded one."""
        finals = self.of(Final)
        return finals[-1] if finals else None

    def digest(self) -> str:
        """A SHA-256 over the whole history: equal digests mean the same run, event by event.

        Wall-clock stamps inside stored records are left out (they are advisory and differ
        between runs); everything else counts, including simulated times.
        """
        h = hashlib.sha256()
        for event in self.events:
            data = event_to_json(event)
            if isinstance(event, StoreWrite):
                data["value"] = _canonical_value(event.value)
            h.update(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
            h.update(b"\n")
        return h.hexdigest()

    def to_jsonl(self) -> str:
        """The history as JSON lines (a header line with job and seed, then one per event)."""
        lines = [json.dumps({"job": self.job, "seed": self.seed})]
        lines.extend(json.dumps(event_to_json(e), sort_keys=True) for e in self.events)
        return "\n".join(lines) + "\n"

    @classmethod
    def from_jsonl(cls, text: str) -> History:
        """Read back what :meth:`to_jsonl` wrote."""
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError("an empty history file has no header line")
        header = json.loads(lines[0])
        history = cls(job=header["job"], seed=header.get("seed"))
        history.events.extend(event_from_json(json.loads(line)) for line in lines[1:])
        return history

    def extend(self, events: Iterable[HistoryEvent]) -> None:
        """Append many events."""
        self.events.extend(events)
