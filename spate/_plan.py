"""What a planner returns, what it is told, and the identifier rules.

A planner is a function the leader calls (sync in a thread, or async) with a
:class:`PlanContext`; it returns a :class:`Plan` listing the splits to add. Split ids are
deterministic (the same work always gets the same id), which is what makes replanning
create-if-absent: a planner may return splits the store already holds and nothing changes.

Every rule here raises :class:`~spate.PlanError` (for plans) or
:class:`~spate.ConfigError` (for job names and instance ids) with a message saying
what is wrong and how to fix it. A planner whose plan is rejected has written nothing.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeAlias

import attrs

from spate._core.placement.vocabulary import validate_locality
from spate._errors import ConfigError, PlanError
from spate._quote import quote

__all__ = [
    "MAX_INSTANCE_LENGTH",
    "MAX_JOB_LENGTH",
    "MAX_SPLIT_ID_LENGTH",
    "Plan",
    "PlanContext",
    "Planner",
    "SplitSpec",
    "default_instance_id",
    "validate_instance",
    "validate_job",
    "validate_plan",
    "validate_split_id",
]

MAX_SPLIT_ID_LENGTH = 200
"""Longest split id."""
MAX_JOB_LENGTH = 100
"""Longest job name."""
MAX_INSTANCE_LENGTH = 150
"""Longest instance id."""

_SPLIT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Job names carry no dot: every key of a job starts with "<job>.", so a dot-free job name keeps
# one job's keys from ever being a prefix of another job's.
_JOB_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_INSTANCE_RE = _SPLIT_ID_RE


def validate_split_id(split_id: object) -> str:
    """Return ``split_id`` if valid, else raise :class:`~spate.PlanError`.

    Split ids are 1-200 characters of ``[A-Za-z0-9._-]`` starting with a letter or digit.
    """
    if (
        not isinstance(split_id, str)
        or len(split_id) > MAX_SPLIT_ID_LENGTH
        or not _SPLIT_ID_RE.fullmatch(split_id)
    ):
        raise PlanError(
            f"invalid split id {quote(split_id)}: split ids are 1-{MAX_SPLIT_ID_LENGTH} characters "
            "of [A-Za-z0-9._-] starting with a letter or digit. Derive ids deterministically "
            "from the work (for example 'range-0042'), so replanning finds the same ids."
        )
    return split_id


def validate_job(job: object) -> str:
    """Return ``job`` if it is a valid job name, else raise :class:`~spate.ConfigError`.

    Job names are 1-100 characters of ``[A-Za-z0-9_-]`` starting with a letter or digit (no
    dots: a job's keys are all prefixed ``"<job>."``).
    """
    if not isinstance(job, str) or len(job) > MAX_JOB_LENGTH or not _JOB_RE.fullmatch(job):
        raise ConfigError(
            f"invalid job name {quote(job)}: job names are 1-{MAX_JOB_LENGTH} characters of "
            "[A-Za-z0-9_-] starting with a letter or digit (no dots), for example 'backfill-42'."
        )
    return job


def validate_instance(instance: object) -> str:
    """Return ``instance`` if it is a valid instance id, else raise ConfigError.

    Instance ids are 1-150 characters of ``[A-Za-z0-9._-]`` starting with a letter or digit,
    and must be unique among the live workers of a job (use the pod name, not a constant).
    """
    if (
        not isinstance(instance, str)
        or len(instance) > MAX_INSTANCE_LENGTH
        or not _INSTANCE_RE.fullmatch(instance)
    ):
        raise ConfigError(
            f"invalid instance id {quote(instance)}: instance ids are 1-{MAX_INSTANCE_LENGTH} "
            "characters of [A-Za-z0-9._-] starting with a letter or digit, unique per live "
            "worker (the pod or host name is a good choice)."
        )
    return instance


def default_instance_id(hostname: str | None = None) -> str:
    """The default instance id: the host name, rewritten into the allowed characters.

    Characters outside ``[A-Za-z0-9._-]`` become ``-``; a leading ``.``, ``_`` or ``-`` is
    dropped and the result is cut to the maximum length. An empty result becomes
    ``"spate-worker"``.
    """
    name = socket.gethostname() if hostname is None else hostname
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:MAX_INSTANCE_LENGTH]
    return cleaned or "spate-worker"


def _check_id(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    validate_split_id(value)


def _check_descriptor(_: object, attribute: attrs.Attribute[bytes], value: object) -> None:
    if not isinstance(value, bytes):
        raise PlanError(
            f"SplitSpec.descriptor must be bytes, not {type(value).__name__}; encode it "
            "(for example json.dumps(...).encode())."
        )


def _check_weight(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(
            f"SplitSpec.weight must be a positive int (a relative cost, such as a byte or row "
            f"count), not {value!r}."
        )


def _check_locality(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    try:
        validate_locality(value, "SplitSpec.locality")
    except ConfigError as exc:
        raise PlanError(str(exc)) from None


@attrs.frozen
class SplitSpec:
    """One split of a job: a deterministic ``id``, an opaque ``descriptor`` and a ``weight``.

    The descriptor tells the handler what the split covers (a key range, a file and byte
    range) and is written once, immutably. The weight is the split's relative cost: the
    leader balances summed weight across workers. ``locality`` is an affinity (data
    locality): a prefix of whole locality tiers (``"zone-b"``) that the split's worker should
    have; the leader honours it when such a worker has a free lane and otherwise ignores it
    (see the placement guide, ``docs/placement.md``). Raises :class:`~spate.PlanError` for an
    invalid id, a non-bytes descriptor, a non-positive weight or an invalid locality.
    """

    id: str = attrs.field(validator=_check_id)
    descriptor: bytes = attrs.field(default=b"", validator=_check_descriptor)
    weight: int = attrs.field(default=1, validator=_check_weight)
    locality: str = attrs.field(default="", kw_only=True, validator=_check_locality)


def _to_tuple(splits: Iterable[SplitSpec]) -> tuple[SplitSpec, ...]:
    return tuple(splits)


@attrs.frozen
class Plan:
    """What a planner returns: splits to add, and whether the job can still grow.

    ``final=True`` says the job is bounded and no more splits will come: once every split is
    completed (or quarantined) the job ends with a verdict. ``final=False`` (the default)
    keeps the job open: the leader calls the planner again every ``replan_interval``.
    Returning splits the job already has is fine (they are skipped). ``cursor`` is optional
    planner state kept in the plan record and handed back in the next
    :attr:`PlanContext.cursor` (``None`` keeps the previous cursor).
    """

    splits: tuple[SplitSpec, ...] = attrs.field(converter=_to_tuple, factory=tuple)
    final: bool = False
    cursor: bytes | None = None


@attrs.frozen
class PlanContext:
    """What the planner is told when the leader calls it.

    ``known`` is every split id the job already has (skip them or not: either is correct),
    ``generation`` the leader's generation, ``cursor`` what the last plan returned as its
    cursor, and ``final`` whether the job was already declared final.
    """

    job: str
    known: frozenset[str]
    generation: int
    cursor: bytes | None = None
    final: bool = False


def validate_plan(plan: object, *, max_descriptor: int | None = None) -> Plan:
    """Return ``plan`` if it is a valid :class:`Plan`, else raise PlanError.

    Checks the type, every split's id, descriptor and weight, duplicate ids, and (when
    ``max_descriptor`` is given) that no descriptor is longer than that many bytes.
    """
    if not isinstance(plan, Plan):
        raise PlanError(
            f"the planner returned {type(plan).__name__}, not spate.Plan; return "
            "spate.Plan(splits=[spate.SplitSpec(...), ...], final=...)."
        )
    seen: set[str] = set()
    for spec in plan.splits:
        if not isinstance(spec, SplitSpec):
            raise PlanError(
                f"Plan.splits holds a {type(spec).__name__}, not spate.SplitSpec; build each "
                "split with spate.SplitSpec(id, descriptor=..., weight=...)."
            )
        # Re-validate: attrs validators can be bypassed (object.__setattr__, evolve hooks).
        validate_split_id(spec.id)
        _check_descriptor(None, None, spec.descriptor)  # type: ignore[arg-type]
        _check_weight(None, None, spec.weight)  # type: ignore[arg-type]
        _check_locality(None, None, spec.locality)  # type: ignore[arg-type]
        if spec.id in seen:
            raise PlanError(
                f"the plan lists split id {quote(spec.id)} twice; ids must be unique within a plan "
                "(derive them from the work so each piece of work has exactly one id)."
            )
        seen.add(spec.id)
        if max_descriptor is not None and len(spec.descriptor) > max_descriptor:
            raise PlanError(
                f"split {quote(spec.id)} has a {len(spec.descriptor)}-byte descriptor, over the "
                f"{max_descriptor} bytes this store can hold in one record; put the data "
                "elsewhere and keep a pointer (a path, a key range) in the descriptor."
            )
    if plan.cursor is not None and not isinstance(plan.cursor, bytes):
        raise PlanError(f"Plan.cursor must be bytes or None, not {type(plan.cursor).__name__}")
    return plan


Planner: TypeAlias = Callable[[PlanContext], Plan | Awaitable[Plan]]
"""A function (sync or async) that returns the splits to add to the job."""
