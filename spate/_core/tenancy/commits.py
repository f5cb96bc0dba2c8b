"""A commit: the owner's one fenced write of its progress, and what a lost one reads back.

The rules, each with the race it prevents:

- **Commit is one CAS** on the progress record, by the revision the owner holds. A watermark
  never regresses (fatal: a bug in the work source). A completed commit hands the lease back.
- **A lost CAS reads the record back**, and only the record decides. It holds this very write:
  an earlier try of it landed with its reply lost, adopted as a win. It holds another write
  (or is gone): this write did not land, the split is dropped, and ``Fenced`` is returned.
- **A lost CAS over the owner's own earlier write builds on it.** The record holds a write of
  this very tenancy (same epoch, owner and process, still running) that the view has not
  seen, at or past the watermark the view knows: an earlier commit or split of this owner
  whose reply was lost, which landed. Only this tenancy writes such a record, so it is not
  another's: it is folded, the commit is rebuilt on it and its CAS retried once. (A record
  *below* what the view knows is not an unseen write but a store that lost an acknowledged
  one: that stays ``Fenced``.)
- **An unknown outcome is never Fenced.** A write whose reply is lost, or a read-back that
  fails, returns ``StoreUnavailable`` saying the write may have landed, and keeps the split:
  a handler that undoes its side effects on ``Fenced`` must not undo a write that landed. The
  caller retries the same commit; a store away for longer than the lease ends the tenancy
  through the session (Lost "starved").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from spate._core.flows import Flow, Op
from spate._core.records import ProgressRecord, Status, UnreadableRecord, decode, encode
from spate._core.tenancy.tenancies import committed
from spate._errors import FatalCoordinationError, Fenced, StoreUnavailable, ValueTooLarge
from spate._events import Progress
from spate._store import Entry, Keyspace, Won

if TYPE_CHECKING:
    from spate._core.tenancy.tenancies import Tenancies

__all__ = ["commit_flow"]

DURABLE = Keyspace.DURABLE


def commit_flow(
    tenancies: Tenancies, split: str, progress: Progress, fence: int | None = None
) -> Flow[BaseException | None]:
    """One fenced CAS on the progress record; returns the error for the caller, if any.

    ``fence``: the tenancy the caller works for; the write happens only while it lasts.
    A lost CAS reads the record back: the write is adopted if the record holds it (an
    earlier try whose reply was lost), and reported ``Fenced`` only when the record holds
    another write. A read-back that fails leaves the outcome unknown: ``StoreUnavailable``.
    """
    host = tenancies.host
    key = host.keys.split(split)
    opened = yield from tenancies.hold_owned(split, "commit", fence)
    if isinstance(opened, Fenced):
        return opened
    held, state = opened
    _check_no_regression(split, state.progress, progress)
    record = committed(state.progress, progress, host.wall_ms())
    data = encode(record)
    if len(data) > host.max_value_size:
        # The caller's mistake, not the coordinator's: refused before anything is sent (a
        # store's own refusal would reach the loop as fatal and stop the worker).
        return ValueTooLarge(key, len(data), host.max_value_size)
    # What the view held when the commit was built (its state may fold newer records while the
    # CAS is away: a lost CAS is judged against what it was built on).
    known, expected = state.progress, state.progress_rev
    for builds_on_own in (True, False):
        try:
            result = yield Op(
                "update", DURABLE, key, data, expected=expected,
                operation="commit", split=split, epoch=held.epoch,
            )  # fmt: skip
        except ValueTooLarge as exc:
            return exc  # a store stricter than it declared: still nothing written
        except StoreUnavailable as exc:
            return StoreUnavailable(
                f"committing split {split!r} failed ({exc}); it may or may not have landed. "
                "Retry the same commit: a landed one is recognised and adopted."
            )
        if isinstance(result, Won):
            break
        # The record moved since the view read it: read it to find out by whom.
        found = yield from _commit_lost(tenancies, split, record, known, builds_on_own)
        if not isinstance(found, _Unseen):
            if not isinstance(found, Won):
                return found
            result = found
            break
        # An earlier write of this tenancy landed unseen (its reply lost): build on it, once.
        host.fold(host.view.put_progress(split, found.record, found.revision))
        _check_no_regression(split, found.record, progress)
        record = committed(found.record, progress, host.wall_ms())
        data = encode(record)
        if len(data) > host.max_value_size:
            return ValueTooLarge(key, len(data), host.max_value_size)
        expected = found.revision
    tenancies.drains.note_progress(split)
    host.fold(host.view.put_progress(split, record, result.revision))
    if progress.completed and tenancies.owned.get(split) is held:
        tenancies.phases.end(split)
        # Finishing mid-revocation is the cooperative outcome: nothing replays.
        tenancies._ended(split, "drained")
        yield from tenancies._drop_lease_of(split, held)
    return None


def _commit_lost(
    tenancies: Tenancies,
    split: str,
    record: ProgressRecord,
    known: ProgressRecord,
    builds_on_own: bool,
) -> Flow[Won | Fenced | StoreUnavailable | _Unseen]:
    """After a lost commit CAS: what the record says of ``record``'s write.

    Won: the record holds it (an earlier try of this commit landed, its reply lost).
    ``_Unseen`` (when ``builds_on_own``): it holds an earlier write of this same
    tenancy, newer than ``known`` (what the view held), whose reply was lost: the caller
    builds on it.
    Fenced (the split dropped): the record holds another write, so this one did not land. And
    StoreUnavailable when the record cannot be read: then nothing is known, and nothing
    is dropped (the retry, or the session's lease, settles it).
    """
    host = tenancies.host
    key = host.keys.split(split)
    try:
        entry: Entry | None = yield Op("get", DURABLE, key)
    except StoreUnavailable as exc:
        return StoreUnavailable(
            f"committing split {split!r}: its compare-and-swap lost and reading the record "
            f"back failed ({exc}), so the write may have landed (an earlier try of it whose "
            "reply was lost). Retry the same commit: a landed one is recognised and adopted."
        )
    if entry is None:
        tenancies.drop(split, "fenced")
        return Fenced(
            split, "its progress record is gone (the job was deleted); nothing was written"
        )
    try:
        stored = decode(ProgressRecord, entry.key, entry.value, split=split)
    except UnreadableRecord as exc:
        # Not our write (ours would read): folded, which holds the split aside.
        host.fold(host.view.apply_put(DURABLE, entry))
        tenancies.drop(split, "fenced")
        return Fenced(
            split,
            f"its progress record cannot be read ({exc}); the split is held aside until "
            "`spate repair` rewrites it; this commit did not land, nothing was written",
        )
    if attrs.evolve(stored, written_at_ms=0) == attrs.evolve(record, written_at_ms=0):
        return Won(entry.revision)
    if builds_on_own and _own_unseen_write(stored, known):
        return _Unseen(stored, entry.revision)
    host.fold(host.view.apply_put(DURABLE, entry))
    tenancies.drop(split, "fenced")
    return Fenced(
        split,
        f"another worker took it over (its record is at epoch {stored.epoch}, owner "
        f"{stored.owner or 'none'}, {stored.status.value}); this commit did not land, nothing "
        "was written",
    )


@attrs.frozen
class _Unseen:
    """A write of the committing tenancy that landed with its reply lost, read back."""

    record: ProgressRecord
    revision: int


def _own_unseen_write(stored: ProgressRecord, known: ProgressRecord) -> bool:
    """Whether ``stored`` is a write of ``known``'s tenancy that the view has not seen.

    Same epoch, owner and process nonce, still running: only this tenancy writes such a
    record. At or past ``known``'s watermark and not ``known`` itself: a record that went back
    to (or below) what the view held is a store that lost an acknowledged write, not an
    unseen one.
    """
    return (
        stored.epoch == known.epoch
        and stored.owner == known.owner
        and stored.owner is not None
        and stored.owner_nonce == known.owner_nonce
        and stored.status is Status.RUNNABLE
        and not stored.completed
        and stored != known
        and (
            known.watermark is None
            or (stored.watermark is not None and stored.watermark >= known.watermark)
        )
    )


def _check_no_regression(split: str, stored: ProgressRecord, progress: Progress) -> None:
    """Stop the worker if ``progress`` would move ``stored``'s watermark back (a source bug)."""
    previous = stored.watermark
    if previous is not None and (progress.watermark is None or progress.watermark < previous):
        raise FatalCoordinationError(
            f"split {split!r}: a commit would move the watermark back from {previous} to "
            f"{progress.watermark}. Watermarks never move backwards; this is a bug in the "
            "work source (commit positions must only grow). The worker stopped so that no "
            "progress is lost."
        )
