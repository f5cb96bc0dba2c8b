"""The records spate keeps in a store, their encoding, and the key layout of a job.

One store may host many jobs: every key of job ``J`` starts with ``"J."`` (job names carry no
dot, so one job's keys never fall under another's prefix). Within a job:

==========  =====================  ========================  =====================================
keyspace    key                    record                    written by
==========  =====================  ========================  =====================================
durable     ``J.plan``             :class:`PlanRecord`       leader (join creates it)
durable     ``J.spec.<split>``     :class:`SpecRecord`       leader, once (immutable)
durable     ``J.split.<split>``    :class:`ProgressRecord`   claimant, owner, leader (seeding)
durable     ``J.assign.<inst>``    :class:`AssignmentRecord` leader
ephemeral   ``J.leader``           :class:`LeaderRecord`     leader
ephemeral   ``J.worker.<inst>``    :class:`PresenceRecord`   each worker
ephemeral   ``J.split.<split>``    :class:`LeaseRecord`      owner
both        ``J._probe.<random>``  opaque scratch bytes      the startup probe
==========  =====================  ========================  =====================================

The progress record's revision is what guards a commit (a guarded write lands only at the
revision its tenancy read; a tenancy's fence is for the user's sink, see docs/glossary.md);
lease keys are liveness. The prefixes after ``J.`` never overlap, so a key is classified by its
prefix alone.

Encoding: compact JSON objects with a ``schema`` field (:data:`SCHEMA`), structured with one
cattrs converter from frozen attrs classes. Bytes (descriptor, planner cursor) are standard
base64 with padding. Unknown or missing fields, a foreign schema or undecodable bytes raise
:class:`UnreadableRecord`; the coordinator decides whether that is fatal (records that carry
ownership) or a warning (records that do not).

The progress record is the one written on every commit, and its resume state may be large,
so it has a framing of its own (:data:`PROGRESS_SCHEMA`, schema 2): the compact JSON object of
every field but ``state``, a newline, then the state's raw bytes::

    {"schema":2,"id":"s07","epoch":3,...,"written_at_ms":1764530000000}<LF><raw state bytes>

Compact JSON never contains a raw newline, so the first one ends the header. The state is
copied once into the value and once out of it, never base64-encoded (a third of its size
saved, and no encoding pass). Schema-1 progress records (one JSON object, state in base64)
still read, and are written back in schema 2.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import re
import time
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from spate._errors import StoreError
from spate._events import Progress

__all__ = [
    "EPOCH_BITS",
    "MAX_REASON",
    "PROGRESS_SCHEMA",
    "SCHEMA",
    "AssignmentRecord",
    "Finality",
    "KeyKind",
    "Keys",
    "LeaderRecord",
    "LeaseRecord",
    "PlanRecord",
    "PresenceRecord",
    "ProgressRecord",
    "Residual",
    "SpecRecord",
    "SplitLoad",
    "SplitRequest",
    "Status",
    "UnreadableRecord",
    "VerdictRecord",
    "bounded_reason",
    "canonical_progress",
    "canonical_spec",
    "decode",
    "encode",
    "fence_of",
    "now_ms",
]

MAX_REASON = 500
"""The most characters of a failure's reason a progress record keeps (the rest is cut)."""


def bounded_reason(reason: str) -> str:
    """``reason`` as a progress record keeps it: at most :data:`MAX_REASON` characters."""
    if len(reason) <= MAX_REASON:
        return reason
    return reason[: MAX_REASON - 1] + "…"


SCHEMA = 1
"""The record schema of every record but the progress record (one JSON object)."""
PROGRESS_SCHEMA = 2
"""The schema progress records are written in: a JSON header line, then the raw state.

Progress records of :data:`SCHEMA` (state in base64 inside the JSON) read too.
"""
_FRAMED = b'{"schema":2,'
"""How a schema-2 progress record begins (``schema`` is the first field of the header)."""


class UnreadableRecord(StoreError):
    """A stored value is not a record this version of spate can read.

    ``key`` names the store key; the message says what is wrong (foreign schema, bad JSON,
    unknown or missing fields, undecodable base64).
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(
            f"the record at key {key!r} is unreadable: {problem}. Another program (or another "
            "spate version with a different record schema) may be writing to this job; give "
            "each job its own name, or upgrade every worker of the job together."
        )
        self.key = key
        self.problem = problem


class Status(enum.Enum):
    """Lifecycle of a split; completed and quarantined are terminal."""

    RUNNABLE = "runnable"
    COMPLETED = "completed"
    QUARANTINED = "quarantined"


class Finality(enum.Enum):
    """Whether a job's plan can still grow."""

    OPEN = "open"
    FINAL = "final"


def now_ms() -> int:
    """Wall-clock milliseconds, for advisory ``written_at_ms`` fields (never used by a rule)."""
    return int(time.time() * 1000)


@attrs.frozen(kw_only=True)
class VerdictRecord:
    """How a bounded job ended, as its leader published it (see :mod:`spate._core.leader.verdict`).

    ``all_complete`` is true when every split completed (then ``quarantined`` is 0); otherwise
    the job is stalled with ``completed`` splits done and ``quarantined`` set aside.
    """

    all_complete: bool
    completed: int
    quarantined: int

    def __attrs_post_init__(self) -> None:
        # A verdict that contradicts itself is refused as unreadable rather than reported:
        # every worker returns it, so a corrupt one would end the job with a false outcome.
        if self.completed < 0 or self.quarantined < 0:
            raise ValueError(
                f"a verdict with negative counts ({self.completed} completed, "
                f"{self.quarantined} quarantined)"
            )
        if self.all_complete and self.quarantined:
            raise ValueError(f"an all-complete verdict with {self.quarantined} quarantined")


@attrs.frozen(kw_only=True)
class PlanRecord:
    """The job's plan: who may join (fingerprint), the leader generation, and the plan's shape.

    ``planned`` is the number of progress records at the last publish: a lower bound, not a
    census (the terminal verdict always recounts). ``verdict`` is set once, by the leader, when
    an authoritative listing found every split finished; it never changes after (absent in
    records written before the field existed, and while the job runs).

    ``incarnation_ms`` is the wall-clock time the record was created (the job's incarnation):
    a job deleted and created again gets a later one, and every fence of the new job is above
    every fence of the old (:func:`fence_of`). Every later write of the record keeps it; a
    record written before the field existed reads as 0.
    """

    schema: int = SCHEMA
    fingerprint: str
    generation: int = 0
    finality: Finality = Finality.OPEN
    planned: int = 0
    cursor: bytes | None = None
    updated_at_ms: int = 0
    verdict: VerdictRecord | None = None
    incarnation_ms: int = 0


EPOCH_BITS = 20
"""The low bits of a fence that hold the epoch (see :func:`fence_of`)."""


def fence_of(incarnation_ms: int, epoch: int) -> int:
    """The fencing token of a tenancy: the job's incarnation above the split's epoch.

    Within one incarnation the fence grows with the epoch (it is added, so even an epoch past
    ``2**EPOCH_BITS`` keeps it growing). Across a job deleted and created again, the new
    incarnation is at least a millisecond later, which adds ``2**20`` to every fence: above
    every fence of the old job unless one of its splits changed hands a million times.

    The bound: a fence must fit a signed 64-bit integer (an SQLite ``INTEGER``, a ``BIGINT``).
    Wall-clock milliseconds stay below ``2**43`` until the year 2248, so the fence stays below
    ``2**63`` while epochs stay below ``2**20``. A plan record written before incarnations
    existed has 0, and its fences are its epochs, as they always were.
    """
    return (incarnation_ms << EPOCH_BITS) + epoch


@attrs.frozen(kw_only=True)
class SpecRecord:
    """A split's immutable description: what the planner said about it.

    ``locality`` is the split's affinity prefix ("" for none; absent in older records).
    """

    schema: int = SCHEMA
    id: str
    generation: int = 0
    weight: int = 1
    descriptor: bytes = b""
    locality: str = ""
    parent: str = ""
    """For a residual (section 4c), the split it was split off; "" for a planned split."""


@attrs.frozen(kw_only=True)
class Residual:
    """A split's remainder that one of its owners split off, as the parent's record names it.

    The parent's progress record carries it whole (id, descriptor, weight) from the fenced
    write that decided the split: that write is the residual's only proof of existence, so
    whoever finds it there can seed the residual's own records, and nothing has to be written
    ahead of the decision (nothing to collect when the decision loses).
    """

    id: str
    descriptor: bytes
    weight: int


@attrs.frozen(kw_only=True)
class ProgressRecord:
    """A split's mutable state and the fence: its CAS revision guards every ownership change.

    ``epoch`` rises by one on every change of ownership (claim, quarantine); 0 means never
    owned. ``owner`` is the current or last tenant, ``None`` after a graceful hand-back.
    ``attempts`` counts the non-graceful ends that count against the split (see
    :mod:`spate._core.tenancy.claims`). ``advanced`` is cleared by every claim and set by the first
    commit of
    the tenancy that moves the watermark: a successor taking over from a dead owner charges an
    attempt only when it is still clear (the owner died without moving the split forward).
    Records written before the field existed read as ``False``, which charges as before.
    ``owner_nonce`` is the owning *process*'s nonce (``""`` when unowned or written before the
    field existed): two processes misconfigured under one instance id write otherwise identical
    claims, and a claimant settling an unknown outcome must not take the other's for its own.
    """

    schema: int = PROGRESS_SCHEMA
    id: str
    epoch: int = 0
    status: Status = Status.RUNNABLE
    owner: str | None = None
    attempts: int = 0
    watermark: int | None = None
    state: bytes = b""
    completed: bool = False
    written_at_ms: int = 0
    advanced: bool = False
    owner_nonce: str = ""
    descriptor: bytes | None = None
    """The split's descriptor since its last split (the primary); None: the spec's."""
    splits: int = 0
    """How many residuals were split off this split (each split's write adds one)."""
    residuals: tuple[Residual, ...] = ()
    """Every residual split off this split, in order (the leader seeds each one it finds)."""
    reason: str = ""
    """Why the split last failed (a handler's ``fail`` reason, or the leader's note of owners
    lost without progress), at most :data:`MAX_REASON` characters; "" if it never failed (and
    in records written before the field existed). Kept until the next failure replaces it:
    what ``spate status`` shows for a quarantined split."""
    retry_at_ms: int = 0
    """When (wall-clock ms) the owner runs the split's handler again after a failure it kept
    the split through (``Config.failure_backoff``); 0 if it never waited. ``spate status``
    shows a held split as ``retrying`` until then."""

    @property
    def progress(self) -> Progress:
        """The resume point this record holds."""
        return Progress(self.watermark, self.state, self.completed)


@attrs.frozen(kw_only=True)
class LeaseRecord:
    """A split's lease: liveness of its owner (``nonce`` tells two processes apart)."""

    schema: int = SCHEMA
    owner: str
    nonce: str
    epoch: int


@attrs.frozen(kw_only=True)
class LeaderRecord:
    """The leader key: who leads, which process (``nonce``), at which generation."""

    schema: int = SCHEMA
    owner: str
    nonce: str
    generation: int


@attrs.frozen(kw_only=True)
class SplitLoad:
    """One held split's smoothed load, as its owner carries it on its presence record."""

    split: str
    rate: float
    """Units of work a second (smoothed: ``spate._core.balance.meter``)."""


@attrs.frozen(kw_only=True)
class PresenceRecord:
    """A live worker: its process nonce, its advertised lane budget and its locality.

    ``locality`` is the worker's failure-domain path (``"zone-a/rack-3"``; "" when unknown,
    and in records written before the field existed).
    """

    schema: int = SCHEMA
    nonce: str
    max_in_flight: int
    locality: str = ""
    parents: tuple[str, ...] = ()
    """Splits this worker split since its presence record last landed without them: the
    leader reads their progress records, which name the residuals to seed (the notice rides on
    the renewal the heartbeat writes anyway; absent in older records)."""
    capacity: float = 1.0
    """The load this worker takes relative to a default worker (``Config.capacity``; absent
    while 1.0, and in older records)."""
    loads: tuple[SplitLoad, ...] = ()
    """The measured loads of the heaviest splits it holds (see :class:`SplitLoad`; absent
    while it measures nothing, and in older records): the leader balances by them."""
    other_splits: int = 0
    """Trusted measured splits it holds beyond those in ``loads`` (a bounded summary)."""
    other_load: float = 0.0
    """Their summed load (units of work a second)."""
    untrusted: int = 0
    """Measured splits it holds whose load is not trusted yet (measured too briefly)."""
    split_requests: bool = True
    """Whether the leader may ask it to split the splits it holds (``Config.split_requests``:
    False says its handlers never split; absent while True, and in older records)."""
    carried: tuple[SplitLoad, ...] = ()
    """The leader's alone: the last trusted load of each running split a balance round moved,
    until its new owner's own is trusted (what the leader counts it at meanwhile; absent
    otherwise, and in older records). ``spate status`` reads it to count a moved split as the
    leader does (``spate._core.balance.loads``)."""

    @property
    def reports_load(self) -> bool:
        """Whether this record carries any load summary."""
        return bool(self.loads or self.other_splits or self.untrusted)


@attrs.frozen(kw_only=True)
class SplitRequest:
    """The leader asks the holder of ``split`` to split it; ``seq`` tells requests apart."""

    split: str
    seq: int


@attrs.frozen(kw_only=True)
class AssignmentRecord:
    """The leader's instruction to one worker: hold exactly these splits.

    An instruction, not ownership: a missing record means "nothing decided, keep what you
    hold". Workers ignore a record below the highest generation they have seen for themselves.
    """

    schema: int = SCHEMA
    generation: int
    splits: tuple[str, ...] = ()
    ready: tuple[str, ...] = ()
    """Splits of this record whose lease the leader saw go since it wrote them: a nudge. The
    worker reads these again (it watches no lease), and no other split of an unchanged record."""
    split_requested: tuple[SplitRequest, ...] = ()
    """The leader's requests that the worker split these held splits (idle lanes could take a
    part): each is told to the handler once (a request is an edge, told by its ``seq``)."""


Record = (
    PlanRecord
    | SpecRecord
    | ProgressRecord
    | LeaseRecord
    | LeaderRecord
    | PresenceRecord
    | AssignmentRecord
)
R = TypeVar("R", bound=Record)


def _strict_int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _strict_float(value: Any, _: type) -> float:
    # (JSON writes 1.0 as 1.0, but another writer may write 1: an int is a number too.)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected a finite number at least 0, got {value!r}")
    return number


def _strict_str(value: Any, _: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _strict_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return value


def _bytes_from_b64(value: Any, _: type) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected a base64 string, got {value!r}")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"undecodable base64 {value[:40]!r}") from exc


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(bytes, _bytes_from_b64)
    converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))
    converter.register_structure_hook_func(
        lambda t: t == tuple[str, ...], lambda v, _: tuple(_strict_str(x, str) for x in _list(v))
    )
    # Fields added after schema 1 shipped are left out while they hold their default, so a
    # fleet that does not use them writes exactly the bytes it wrote before (and a worker of
    # the previous release, which refuses unknown fields, still reads them).
    for cls, fields in _OPTIONAL_FIELDS.items():
        converter.register_unstructure_hook(
            cls,
            make_dict_unstructure_fn(
                cls,
                converter,
                **{name: override(omit_if_default=True) for name in fields},  # type: ignore[arg-type]
            ),
        )
    return converter


_OPTIONAL_FIELDS: dict[type, tuple[str, ...]] = {
    PlanRecord: ("verdict", "incarnation_ms"),
    ProgressRecord: (
        "advanced",
        "owner_nonce",
        "descriptor",
        "splits",
        "residuals",
        "reason",
        "retry_at_ms",
    ),
    SpecRecord: ("locality", "parent"),
    PresenceRecord: (
        "locality",
        "parents",
        "capacity",
        "loads",
        "other_splits",
        "other_load",
        "untrusted",
        "split_requests",
        "carried",
    ),
    AssignmentRecord: ("ready", "split_requested"),
}


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return value


_converter = _make_converter()
_progress_header = make_dict_unstructure_fn(
    ProgressRecord,
    _converter,
    state=override(omit=True),
    **{name: override(omit_if_default=True) for name in _OPTIONAL_FIELDS[ProgressRecord]},  # type: ignore[arg-type]
)
"""Every field of a progress record but its state (the framing's header)."""


def encode(record: Record) -> bytes:
    """The stored bytes of ``record``: compact JSON (the progress record: framed, see above)."""
    # A plan writes a spec and a progress record per split and a commit a progress record,
    # so these two have a direct path (``_fast_*`` below); it answers None for anything
    # unusual, which then takes the general one. Both give the same bytes (a test pins it).
    cls = type(record)
    if cls is ProgressRecord:
        fast = _fast_encode_progress(record)  # type: ignore[arg-type]
        return fast if fast is not None else _encode_general(record)
    if cls is SpecRecord:
        fast = _fast_encode_spec(record)  # type: ignore[arg-type]
        return fast if fast is not None else _encode_general(record)
    return _encode_general(record)


def _encode_general(record: Record) -> bytes:
    """:func:`encode` through the converter (the reference the direct paths must match)."""
    if isinstance(record, ProgressRecord):
        return _encode_progress(record)
    return json.dumps(_converter.unstructure(record), separators=(",", ":")).encode()


def _encode_progress(record: ProgressRecord) -> bytes:
    fields = _progress_header(record)
    fields["schema"] = PROGRESS_SCHEMA  # (a record read from schema 1 is written in schema 2)
    header = json.dumps(fields, separators=(",", ":")).encode()
    return b"\n".join((header, record.state))


def decode(cls: type[R], key: str, data: bytes, *, split: str | None = None) -> R:
    """Read a ``cls`` record stored at ``key``, or raise :class:`UnreadableRecord`.

    When ``split`` is given, a spec or progress record must name that split.
    """
    # Joining a job folds a spec and a progress record per split: the direct path reads the
    # well-formed ones; anything it does not accept (old schema, a bad field, the wrong
    # split) takes the general path, which reads it or says exactly what is wrong.
    if cls is ProgressRecord:
        fast: Any = canonical_progress(data, split)
        if fast is None:
            fast = _fast_decode_progress(data, split)
        if fast is not None:
            return fast  # type: ignore[no-any-return]
    elif cls is SpecRecord:
        fast = canonical_spec(data, split)
        if fast is None:
            fast = _fast_decode_spec(data, split)
        if fast is not None:
            return fast  # type: ignore[no-any-return]
    return _decode_general(cls, key, data, split=split)


def _decode_general(cls: type[R], key: str, data: bytes, *, split: str | None = None) -> R:
    """:func:`decode` through the converter (the reference the direct paths must match)."""
    state: bytes | None = None
    if cls is ProgressRecord and data.startswith(_FRAMED):
        end = data.find(b"\n")
        if end < 0:
            raise UnreadableRecord(key, "a schema-2 progress record without its state line")
        data, state = data[:end], data[end + 1 :]
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise UnreadableRecord(key, _not_json(data)) from None
    if not isinstance(raw, dict):
        raise UnreadableRecord(key, "not a JSON object")
    schema = raw.get("schema")
    if isinstance(schema, bool) or schema != (PROGRESS_SCHEMA if state is not None else SCHEMA):
        readable = f"{SCHEMA} and {PROGRESS_SCHEMA}" if cls is ProgressRecord else f"{SCHEMA}"
        # (A record with another framing lands here too when it happens to be valid JSON.)
        raise UnreadableRecord(key, f"schema {schema!r}, this spate reads schema {readable}")
    if cls is ProgressRecord:
        # Either schema reads as the record this spate writes (and compares equal to it).
        raw["schema"] = PROGRESS_SCHEMA
        if state is not None:
            if "state" in raw:
                raise UnreadableRecord(key, "a schema-2 progress record with a state field")
            raw["state"] = ""  # structured as b"", replaced by the raw state below
    try:
        record = _converter.structure(raw, cls)
    except Exception as exc:  # cattrs raises ClassValidationError groups and plain errors
        raise UnreadableRecord(key, f"not a valid {cls.__name__} ({_summary(exc)})") from None
    if state is not None:
        assert isinstance(record, ProgressRecord)
        record = attrs.evolve(record, state=state)
    if split is not None and isinstance(record, SpecRecord | ProgressRecord) and record.id != split:
        raise UnreadableRecord(key, f"it names split {record.id!r}, not the key's split")
    return record


# -- the direct paths of the two records written and read once per split -----------------------
#
# Each accepts only values of exactly the expected types (so the converter would have read or
# written them the same way) and answers None for anything else.

_json_str = json.encoder.encode_basestring_ascii  # how json.dumps writes a str (ensure_ascii)
_STATUS_JSON = {status: _json_str(status.value) for status in Status}
_STATUS_OF = {status.value: status for status in Status}
_PROGRESS_OPTIONAL = ("advanced", "owner_nonce")
"""Header fields the encoder writes only when they are not their defaults."""
_PROGRESS_RARE = ("descriptor", "splits", "residuals", "reason", "retry_at_ms")
"""Optional fields of a split that was split or failed: such records take the general path."""
_PROGRESS_ALWAYS = (
    len(attrs.fields(ProgressRecord)) - 1 - len(_PROGRESS_OPTIONAL) - len(_PROGRESS_RARE)
)
"""Header fields the encoder always writes (every field but the state and the optional)."""
_SPEC_FIELDS = frozenset(f.name for f in attrs.fields(SpecRecord)) - {"parent"}
"""What the direct path reads (a residual's spec, naming its parent, takes the general one)."""
_raw_decode = json.JSONDecoder().raw_decode


def _loads(text: str) -> Any:
    """``json.loads`` of a text that is one JSON value and nothing else (ValueError if not)."""
    value, end = _raw_decode(text)
    if end != len(text):
        raise ValueError("trailing characters")
    return value


def _fast_encode_progress(r: ProgressRecord) -> bytes | None:
    owner, watermark = r.owner, r.watermark
    if not (
        type(r.id) is str
        and type(r.epoch) is int
        and type(r.status) is Status
        and (owner is None or type(owner) is str)
        and type(r.attempts) is int
        and (watermark is None or type(watermark) is int)
        and type(r.state) is bytes
        and type(r.completed) is bool
        and type(r.written_at_ms) is int
        and type(r.advanced) is bool
        and type(r.owner_nonce) is str
        and r.descriptor is None
        and not r.splits
        and not r.residuals
        and not r.reason
        and not r.retry_at_ms
    ):
        return None
    header = (
        f'{{"schema":{PROGRESS_SCHEMA},"id":{_json_str(r.id)},"epoch":{r.epoch!r},'
        f'"status":{_STATUS_JSON[r.status]},'
        f'"owner":{"null" if owner is None else _json_str(owner)},"attempts":{r.attempts!r},'
        f'"watermark":{"null" if watermark is None else repr(watermark)},'
        f'"completed":{"true" if r.completed else "false"},"written_at_ms":{r.written_at_ms!r}'
    )
    if r.advanced:
        header += ',"advanced":true'
    if r.owner_nonce:
        header += f',"owner_nonce":{_json_str(r.owner_nonce)}'
    return (header + "}\n").encode() + r.state


def _fast_encode_spec(r: SpecRecord) -> bytes | None:
    if not (
        type(r.schema) is int
        and type(r.id) is str
        and type(r.generation) is int
        and type(r.weight) is int
        and type(r.descriptor) is bytes
        and type(r.locality) is str
        and not r.parent
    ):
        return None
    descriptor = base64.b64encode(r.descriptor).decode("ascii")
    text = (
        f'{{"schema":{r.schema!r},"id":{_json_str(r.id)},"generation":{r.generation!r},'
        f'"weight":{r.weight!r},"descriptor":"{descriptor}"'
    )
    if r.locality:
        text += f',"locality":{_json_str(r.locality)}'
    return (text + "}").encode()


def _fast_decode_progress(data: bytes, split: str | None) -> ProgressRecord | None:
    if not data.startswith(_FRAMED):
        return None
    end = data.find(b"\n")
    if end < 0:
        return None
    # The fields the encoder always writes are read directly; any that is missing, or a
    # value of the wrong shape, sends the record down the general path.
    try:
        raw = _loads(data[:end].decode())
        ident = raw["id"]
        epoch = raw["epoch"]
        status = _STATUS_OF[raw["status"]]
        owner = raw["owner"]
        attempts = raw["attempts"]
        watermark = raw["watermark"]
        completed = raw["completed"]
        written = raw["written_at_ms"]
        schema = raw["schema"]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        return None
    optional = len(raw) - _PROGRESS_ALWAYS
    if optional:
        advanced = raw.get("advanced", False)
        nonce = raw.get("owner_nonce", "")
        if optional != sum(name in raw for name in _PROGRESS_OPTIONAL):
            return None  # a field this spate does not know
    else:
        advanced, nonce = False, ""
    if not (
        type(ident) is str
        and (split is None or ident == split)
        and type(schema) is int
        and schema == PROGRESS_SCHEMA
        and type(epoch) is int
        and (owner is None or type(owner) is str)
        and type(attempts) is int
        and (watermark is None or type(watermark) is int)
        and type(completed) is bool
        and type(written) is int
        and type(advanced) is bool
        and type(nonce) is str
    ):
        return None
    return ProgressRecord(
        id=ident,
        epoch=epoch,
        status=status,
        owner=owner,
        attempts=attempts,
        watermark=watermark,
        state=data[end + 1 :],
        completed=completed,
        written_at_ms=written,
        advanced=advanced,
        owner_nonce=nonce,
    )


def _fast_decode_spec(data: bytes, split: str | None) -> SpecRecord | None:
    try:
        raw = _loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if type(raw) is not dict or not raw.keys() <= _SPEC_FIELDS:
        return None
    get = raw.get
    ident = get("id")
    descriptor = get("descriptor", "")
    locality = get("locality", "")
    if not (
        type(ident) is str
        and (split is None or ident == split)
        and type(get("schema")) is int
        and get("schema") == SCHEMA
        and type(get("generation", 0)) is int
        and type(get("weight", 1)) is int
        and type(descriptor) is str
        and type(locality) is str
    ):
        return None
    if descriptor:
        try:
            value = base64.b64decode(descriptor.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            return None
    else:
        value = b""
    return SpecRecord(
        id=ident,
        generation=get("generation", 0),
        weight=get("weight", 1),
        descriptor=value,
        locality=locality,
    )


# -- the canonical forms: what the direct encoders above write, read by one pattern -----------
#
# A new leader reads a spec and a progress record of every split, nearly all of them exactly as
# _fast_encode_* wrote them. Such a record is matched by one compiled pattern instead of parsed
# into a dict and picked apart (about a third of its reading cost). The patterns accept only
# texts whose JSON reading is plain: keys in the encoder's order, once each, no whitespace,
# strings of printable ASCII without escapes (their text is their bytes), integers of at most
# 18 digits (no float, no exponent). Anything else, say a record of another writer or with an
# escaped string, answers None and is read by the paths above, which give the same record for
# every text both accept (a test pins it).

_ASCII = rb'"([ !#-\[\]-~]*)"'
"""A JSON string of printable ASCII other than the quote and the backslash: no escapes."""
_INT = rb"(-?(?:0|[1-9][0-9]{0,17}))"
"""A JSON integer that ``int`` reads the same (and well within its digit limit)."""
_CANONICAL_PROGRESS = re.compile(
    rb'\{"schema":%d,"id":%s,"epoch":%s,"status":"(runnable|completed|quarantined)",'
    rb'"owner":(?:null|%s),"attempts":%s,"watermark":(?:null|%s),"completed":(true|false),'
    rb'"written_at_ms":%s(,"advanced":true)?(?:,"owner_nonce":%s)?\}\n'
    % (PROGRESS_SCHEMA, _ASCII, _INT, _ASCII, _INT, _INT, _INT, _ASCII)
)
_CANONICAL_SPEC = re.compile(
    rb'\{"schema":%d,"id":%s,"generation":%s,"weight":%s,"descriptor":"([A-Za-z0-9+/]*=?=?)"'
    rb'(?:,"locality":%s)?\}' % (SCHEMA, _ASCII, _INT, _INT, _ASCII)
)
_STATUS_OF_BYTES = {status.value.encode(): status for status in Status}

# A frozen attrs class's __init__ sets each field through ``object.__setattr__``, a lookup by
# name per field: seventeen a progress record, which cost about as much as matching its text.
# The canonical paths fill a new object's slots through their descriptors instead (nearly
# twice as fast): the same record, every field set (a test compares them with records built by
# __init__). Unpacking the setters names every field: a field added to either class breaks
# this import until its reader here sets it too.
_new = object.__new__


def _slot_setters(cls: type) -> tuple[Any, ...]:
    """The ``__set__`` of each field's slot of ``cls``, in field order."""
    return tuple(cls.__dict__[field.name].__set__ for field in attrs.fields(cls))


(
    _p_schema,
    _p_id,
    _p_epoch,
    _p_status,
    _p_owner,
    _p_attempts,
    _p_watermark,
    _p_state,
    _p_completed,
    _p_written_at_ms,
    _p_advanced,
    _p_owner_nonce,
    _p_descriptor,
    _p_splits,
    _p_residuals,
    _p_reason,
    _p_retry_at_ms,
) = _slot_setters(ProgressRecord)
(
    _s_schema,
    _s_id,
    _s_generation,
    _s_weight,
    _s_descriptor,
    _s_locality,
    _s_parent,
) = _slot_setters(SpecRecord)


def canonical_progress(data: bytes, split: str | None) -> ProgressRecord | None:
    """The progress record ``data`` holds in its canonical form, else None (see above)."""
    match = _CANONICAL_PROGRESS.match(data)
    if match is None:
        return None
    ident, epoch, status, owner, attempts, watermark, completed, written, advanced, nonce = (
        match.groups()
    )
    text = ident.decode("ascii")
    if split is not None and text != split:
        return None
    record: ProgressRecord = _new(ProgressRecord)
    _p_schema(record, PROGRESS_SCHEMA)
    _p_id(record, text)
    _p_epoch(record, int(epoch))
    _p_status(record, _STATUS_OF_BYTES[status])
    _p_owner(record, None if owner is None else owner.decode("ascii"))
    _p_attempts(record, int(attempts))
    _p_watermark(record, None if watermark is None else int(watermark))
    _p_state(record, data[match.end() :])
    _p_completed(record, completed == b"true")
    _p_written_at_ms(record, int(written))
    _p_advanced(record, advanced is not None)
    _p_owner_nonce(record, "" if nonce is None else nonce.decode("ascii"))
    _p_descriptor(record, None)
    _p_splits(record, 0)
    _p_residuals(record, ())
    _p_reason(record, "")
    _p_retry_at_ms(record, 0)
    return record


def canonical_spec(data: bytes, split: str | None) -> SpecRecord | None:
    """The spec ``data`` holds in its canonical form, else None (see above)."""
    match = _CANONICAL_SPEC.fullmatch(data)
    if match is None:
        return None
    ident, generation, weight, descriptor, locality = match.groups()
    text = ident.decode("ascii")
    if split is not None and text != split:
        return None
    if descriptor:
        try:
            value = base64.b64decode(descriptor, validate=True)
        except binascii.Error:
            return None
    else:
        value = b""
    spec: SpecRecord = _new(SpecRecord)
    _s_schema(spec, SCHEMA)
    _s_id(spec, text)
    _s_generation(spec, int(generation))
    _s_weight(spec, int(weight))
    _s_descriptor(spec, value)
    _s_locality(spec, "" if locality is None else locality.decode("ascii"))
    _s_parent(spec, "")
    return spec


def _not_json(data: bytes) -> str:
    """Why ``data`` is unreadable: a framed record of a schema we do not know, or not JSON."""
    try:
        header = json.loads(data.partition(b"\n")[0])
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if isinstance(header, dict) and "schema" in header:
        return (
            f"schema {header['schema']!r} (framed), this spate reads schema {SCHEMA} "
            f"and {PROGRESS_SCHEMA} (progress)"
        )
    return "not JSON"


def _summary(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_summary(e) for e in exc.exceptions)
    notes = getattr(exc, "__notes__", None) or []
    return " ".join([str(exc), *notes]).strip() or type(exc).__name__


class KeyKind(enum.Enum):
    """What a key of a job holds, by prefix."""

    PLAN = "plan"
    SPEC = "spec"
    SPLIT = "split"
    LEASE = "lease"
    ASSIGN = "assign"
    LEADER = "leader"
    WORKER = "worker"
    PROBE = "_probe"


_PREFIXED = (
    KeyKind.SPEC,
    KeyKind.SPLIT,
    KeyKind.LEASE,
    KeyKind.ASSIGN,
    KeyKind.WORKER,
    KeyKind.PROBE,
)


_HEADS = {kind.value: kind for kind in _PREFIXED}
"""The prefixed kinds by the word before their name (``split`` in ``J.split.<name>``)."""


@attrs.frozen
class Keys:
    """The key layout of one job: every key starts with ``"<job>."``."""

    job: str
    _prefix: str = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(lambda s: f"{s.job}.", True)
    )

    @property
    def prefix(self) -> str:
        """The prefix of every key of this job (what coordinators watch and list)."""
        return self._prefix

    @property
    def plan(self) -> str:
        """Durable key of the plan record."""
        return f"{self.job}.plan"

    @property
    def leader(self) -> str:
        """Ephemeral key of the leader record."""
        return f"{self.job}.leader"

    @property
    def probe_prefix(self) -> str:
        """Prefix of the startup probe's scratch keys."""
        return f"{self.job}._probe"

    @property
    def split_prefix(self) -> str:
        """Prefix of the progress records (durable) and leases (ephemeral)."""
        return f"{self.job}.split."

    @property
    def spec_prefix(self) -> str:
        """Prefix of the spec records (durable)."""
        return f"{self.job}.spec."

    def spec(self, split: str) -> str:
        """Durable key of a split's spec record."""
        return f"{self.job}.spec.{split}"

    def split(self, split: str) -> str:
        """Key of a split's progress record (durable) and lease (ephemeral)."""
        return f"{self.job}.split.{split}"

    @property
    def lease_prefix(self) -> str:
        """Prefix of the durable lease keys (stores whose ephemeral keys live per key)."""
        return f"{self.job}.lease."

    def lease(self, split: str) -> str:
        """Durable key of a split's lease on a store with per-key TTLs (see ``Keyspace``).

        There a lease lives by its owner's session (its presence record), not by a TTL of
        its own, so it is kept where nothing expires and renewed by nobody.
        """
        return f"{self.job}.lease.{split}"

    def assign(self, instance: str) -> str:
        """Durable key of an instance's assignment record."""
        return f"{self.job}.assign.{instance}"

    def worker(self, instance: str) -> str:
        """Ephemeral key of an instance's presence record."""
        return f"{self.job}.worker.{instance}"

    def classify(self, key: str) -> tuple[KeyKind, str] | None:
        """``(kind, name)`` of a key of this job, or None for a key spate does not write.

        ``name`` is the split id or instance id the key names ("" for plan and leader).
        """
        prefix = self._prefix
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix) :]
        head, dot, name = rest.partition(".")
        if dot:
            kind = _HEADS.get(head)
            return (kind, name) if kind is not None and name else None
        if rest == "plan":
            return KeyKind.PLAN, ""
        if rest == "leader":
            return KeyKind.LEADER, ""
        return None
