"""Splitting a running split (docs/splitting.md): the owner's one fenced write, and residual ids.

A split's owner, in its handler (which alone knows its position), splits the split's
remaining work into a primary it keeps and a residual that becomes a new split. The rules,
each with the race it prevents:

- **One fenced write decides**: the parent's progress record, by CAS on the revision the
  owner holds (the fence of every commit), takes the primary as its descriptor and names the
  residual *whole* (id, descriptor, weight). A stale owner's write loses, so its residual
  never exists; a write that won is the residual's proof, and nothing is written ahead of it
  (on a store without multi-key transactions nothing is left to collect when it loses).
- **Only the leader seeds** (as for planned splits): it finds the residual in the parent's
  record, which it reads while a request of its to split it stands, when the owner's next
  presence renewal names the split (a split made unasked, or asked by a leader since gone),
  at the parent's tenancy end, and in any listing; it writes the residual's spec, then its
  progress record, each create-only, so finding it twice seeds it once. A job's verdict
  waits for every named residual to be seeded (see :mod:`spate._core.leader.verdict`).
- **A maybe-landed split is read back**: the write is ours if the record holds exactly it,
  or, once someone else moved the record on, if the record names our residual's id (ids
  are unique, see :func:`residual_id`). A retry whose view already folded the landed record
  returns that split's residual instead of splitting the primary again, and a read-back
  that fails leaves the outcome unknown (StoreUnavailable), never Fenced: Fenced promises
  that no residual runs.
- **A successor resumes the primary**: the record's ``descriptor`` overrides the spec's.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from typing import TYPE_CHECKING

import attrs

from spate._core.flows import Flow, Op
from spate._core.records import ProgressRecord, Residual, SpecRecord, Status, encode
from spate._errors import ConfigError, Fenced, StoreUnavailable, ValueTooLarge
from spate._store import Keyspace, Won

if TYPE_CHECKING:
    from spate._core.tenancy.tenancies import Tenancies

__all__ = ["check_split_args", "residual_id", "split_flow"]

DURABLE = Keyspace.DURABLE

_STEM_MAX = 180
"""The longest stem a residual id keeps of its root split's id (ids are at most 200)."""
_RESIDUAL_SUFFIX = re.compile(r"\.r[a-z2-7]{13}$")


def residual_id(parent: str, epoch: int, n: int) -> str:
    """The id of the ``n``-th residual split off ``parent`` in the tenancy at ``epoch``.

    The root split's id (``parent`` without the suffix a residual carries) then ``.r`` and 13
    base32 characters of a hash of (parent, epoch, n): a valid split id however deep the
    splitting goes (at most 195 characters), and unique across failovers. Within a tenancy
    ``n`` (the record's split count, moved only by fenced writes) tells splits apart; across
    tenancies the epoch does.
    """
    stem = _RESIDUAL_SUFFIX.sub("", parent)[:_STEM_MAX]
    digest = hashlib.blake2b(f"{parent}\0{epoch}\0{n}".encode(), digest_size=10).digest()
    return f"{stem}.r{base64.b32encode(digest).decode('ascii').lower()[:13]}"


def check_split_args(primary: object, residual: object, weight: object) -> None:
    """Refuse arguments of :meth:`SplitHandle.split` that are not what it takes (ConfigError)."""
    for name, value in (("primary", primary), ("residual", residual)):
        if not isinstance(value, bytes):
            raise ConfigError(
                f"split(): {name} is a bytes descriptor, not {type(value).__name__}; nothing "
                "was written"
            )
        if not value:
            raise ConfigError(
                f"split(): {name} is empty; a descriptor names the work it covers (both parts "
                "must be non-empty). Nothing was written."
            )
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, int) or weight < 1
    ):
        raise ConfigError(
            f"split(): weight must be a positive int (or None for half the parent's), not "
            f"{weight!r}; nothing was written"
        )


def _landed_already(
    split: str, epoch: int, current: ProgressRecord, primary: bytes, residual: bytes
) -> str | None:
    """The residual's id if ``current`` holds this very split, made in the caller's tenancy.

    A split whose reply was lost is retried with the same arguments, but the view may have
    folded the landed record meanwhile (the owner leads, and its listing or its poll of a split
    it asked read it): the retry's CAS would then win against the new revision and split the
    primary again, naming a second residual over the first one's items. The record already
    taking ``primary`` as its descriptor, its last residual being ``residual`` and named in
    this tenancy (the record is at ``epoch``, the caller's, which only it writes at; the id
    derives from it), is that split; a real new split cannot look so, since its residual lies inside
    the descriptor it splits, not beside it. (A successor's record is not this tenancy's,
    whatever it holds: a zombie that folded it is told nothing of it here.)
    """
    if current.epoch != epoch or not current.residuals or current.descriptor != primary:
        return None
    last = current.residuals[-1]
    if last.descriptor != residual or last.id != residual_id(
        split, current.epoch, current.splits - 1
    ):
        return None
    return last.id


def split_flow(
    tenancies: Tenancies,
    split: str,
    primary: bytes,
    residual: bytes,
    weight: int | None,
    fence: int | None = None,
) -> Flow[str | BaseException]:
    """The owner's split of ``split``: the residual's id, or the error for the caller.

    ``fence``: the tenancy the caller works for; the write happens only while it lasts.
    """
    host = tenancies.host
    key = host.keys.split(split)
    opened = yield from tenancies.hold_owned(split, "split", fence)
    if isinstance(opened, Fenced):
        return opened
    held, state = opened
    current = state.progress
    if current.completed or current.status is not Status.RUNNABLE:
        return ConfigError(f"split {split!r} is {current.status.value}; it cannot be split")
    done = _landed_already(split, held.epoch, current, primary, residual)
    if done is not None:
        tenancies.split_since.add(split)  # (its first try's reply was lost: tell the leader)
        return done
    spec = state.spec
    parent_weight = spec.weight if spec is not None else 1
    rid = residual_id(split, current.epoch, current.splits)
    entry = Residual(
        id=rid,
        descriptor=residual,
        weight=weight if weight is not None else max(1, math.ceil(parent_weight / 2)),
    )
    record = attrs.evolve(
        current,
        descriptor=primary,
        splits=current.splits + 1,
        residuals=(*current.residuals, entry),
        written_at_ms=host.wall_ms(),
    )
    data = encode(record)
    seed = SpecRecord(
        id=rid,
        generation=0,
        weight=entry.weight,
        descriptor=residual,
        locality=spec.locality if spec is not None else "",
        parent=split,
    )
    for stored in (data, encode(seed)):
        if len(stored) > host.max_value_size:
            # (The parent's record names every residual split off it, descriptor and all.)
            return ValueTooLarge(key, len(stored), host.max_value_size)
    try:
        result = yield Op(
            "update", DURABLE, key, data, expected=state.progress_rev,
            operation="split", split=split, epoch=held.epoch,
        )  # fmt: skip
    except StoreUnavailable as exc:
        return StoreUnavailable(
            f"splitting split {split!r} failed ({exc}); it may or may not have landed. "
            "Commit or split again: the coordinator reads the record back first."
        )
    if not isinstance(result, Won):
        try:
            landed = yield from tenancies._landed(split, record, unread_raises=True)
        except StoreUnavailable as exc:
            # Its CAS lost and the record cannot be read: an earlier try of this very split
            # may have landed (its reply lost), and only the record can tell. Fenced would
            # promise that no residual ever runs; the outcome is unknown, so say that.
            return StoreUnavailable(
                f"splitting split {split!r}: its write lost and the read-back failed ({exc}); "
                "it may or may not have landed. Split again: the record is read back first."
            )
        if landed is None:
            found = host.view.splits.get(split)
            named = found is not None and any(r.id == rid for r in found.progress.residuals)
            tenancies.drop(split, "fenced")
            if named:
                # Ours landed, and a successor has moved the record on since: the residual
                # runs (its id is unique), but this worker no longer holds the split.
                return rid
            return Fenced(split, "another worker took it over; nothing was written")
        result = landed
    host.fold(host.view.put_progress(split, record, result.revision))
    # The leader hears of it from this worker's next presence renewal (or, if it asked, from
    # its own reads of the record, or at once if it is this worker).
    tenancies.split_since.add(split)
    return rid
