"""How the view folds a listing: a watch's snapshot, a new leader's listing, a backstop's pages.

A listing is authoritative for the keys it speaks for: a tracked key learned before it began
and absent from it was deleted meanwhile (in the durable keyspace only assignment records and
leases are pruned this way: the protocol deletes nothing else). A paged listing folds its puts
page by page and decides what no page brought only once its last page is in. A new leader's
listing brings two records a split, so those are folded by their prefix without the general
classification, when nothing can make them stale, and each run of progress records of splits
never folded is folded in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from spate._core.records import (
    KeyKind,
    Keys,
    ProgressRecord,
    SpecRecord,
    canonical_progress,
    canonical_spec,
)
from spate._core.view.revisions import Revisions
from spate._store import Entry, Keyspace

__all__ = ["ListingFold"]

Notices = list[Any]
"""The view's notices (:data:`spate._core.view.view.Notice`; named loosely here, since the view
imports this module)."""


class ListingFold:
    """Folds listings into the view through the view's own folds (given at construction)."""

    def __init__(
        self,
        keys: Keys,
        revisions: Revisions,
        *,
        apply_put: Callable[[Keyspace, Entry], Notices],
        apply_delete: Callable[[Keyspace, str, int | None], Notices],
        fold_first_run: Callable[[list[str], list[str], list[ProgressRecord], list[int]], Notices],
        fold_spec: Callable[[str, str, SpecRecord, int], Notices],
    ) -> None:
        self._keys = keys
        self._revisions = revisions
        self._apply_put = apply_put
        self._apply_delete = apply_delete
        self._fold_first_run = fold_first_run
        self._fold_spec = fold_spec

    def apply_listing(
        self,
        keyspace: Keyspace,
        entries: Iterable[Entry],
        *,
        since: int,
        covers: Callable[[str], bool] | None = None,
        prefix: str | None = None,
    ) -> Notices:
        """Fold an authoritative listing (or watch snapshot) of the job's keys in ``keyspace``.

        ``since`` is the view's ``seq`` when the listing started: tracked keys learned before it and
        absent from the listing are deleted. ``covers`` says which keys the listing speaks for
        (an exact-key watch's snapshot speaks for its one key; by default, for all of them);
        ``prefix``, when given, says so of the keys under it (a prefix watch's snapshot).
        In the durable keyspace only assignment records are pruned this way (nothing else is
        ever deleted by the protocol).
        """
        listed = list(entries)
        notices = self._deletes(
            keyspace, {e.key for e in listed}, since=since, covers=covers, prefix=prefix
        )
        notices.extend(self._puts(keyspace, listed))
        self._revisions.prune_tombs(keyspace, since=since, covers=covers, prefix=prefix)
        return notices

    def apply_page(self, keyspace: Keyspace, entries: Iterable[Entry]) -> Notices:
        """Fold one page of a paged listing of the job's keys (its puts; see end_listing).

        A page speaks for the keys it holds only: what the listing did not bring is decided
        once its last page is in (:meth:`end_listing`).
        """
        return self._puts(keyspace, list(entries))

    def end_listing(self, keyspace: Keyspace, seen: set[str], *, since: int) -> Notices:
        """A paged listing's last page is in: tracked keys it never brought are deleted.

        ``seen`` holds every key its pages brought; ``since`` is the view's ``seq`` when it began
        (keys learned since outlive it, as with :meth:`apply_listing`). A key that existed
        throughout the listing is in some page (the store contract), so a key learned before
        it and in no page did not exist at some moment during it: it was deleted, and any
        later life of it is a put the watches bring.
        """
        notices = self._deletes(keyspace, seen, since=since, covers=None, prefix=None)
        self._revisions.prune_tombs(keyspace, since=since, covers=None, prefix=None)
        return notices

    def _deletes(
        self,
        keyspace: Keyspace,
        present: set[str],
        *,
        since: int,
        covers: Callable[[str], bool] | None,
        prefix: str | None,
    ) -> Notices:
        # Asked of every key folded in the keyspace (a new leader's lease-prefix snapshot comes
        # after its listing: 200,000 keys), so the tests of the folded revisions and the
        # prefix, which nearly every key fails, run in one comprehension, over the keys as
        # they stood before the first deletion is applied.
        candidates = [
            key
            for key, known in self._revisions.known[keyspace].items()
            if key not in present
            and known[1] <= since
            and (prefix is None or key.startswith(prefix))
        ]
        notices: Notices = []
        for key in candidates:
            if covers is not None and not covers(key):
                continue
            found = self._keys.classify(key)
            if keyspace is Keyspace.DURABLE and (
                found is None or found[0] not in (KeyKind.ASSIGN, KeyKind.LEASE)
            ):
                continue
            notices.extend(self._apply_delete(keyspace, key, None))
        return notices

    def _puts(self, keyspace: Keyspace, listed: list[Entry]) -> Notices:
        notices: Notices = []
        extend = notices.extend
        apply_put = self._apply_put
        known_get = self._revisions.known[keyspace].get
        durable = keyspace is Keyspace.DURABLE
        tombs_durable = self._revisions.tombs_durable
        split_prefix, spec_prefix = self._keys.split_prefix, self._keys.spec_prefix
        split_at, spec_at = len(split_prefix), len(spec_prefix)
        fold_first_run, fold_spec = self._fold_first_run, self._fold_spec
        # A run of progress records of splits never folded, folded together when it ends (at
        # any other entry, or the listing's end), so every entry is still folded in order.
        names: list[str] = []
        keys: list[str] = []
        records: list[ProgressRecord] = []
        revisions: list[int] = []

        def flush() -> None:
            nonlocal names, keys, records, revisions
            extend(fold_first_run(names, keys, records, revisions))
            names, keys, records, revisions = [], [], [], []

        for entry in listed:
            key = entry.key
            folded = known_get(key)
            if folded is not None:
                if entry.revision <= folded[0]:
                    continue  # folded already (a backstop's common case): nothing to classify
            elif durable and not tombs_durable:
                # A key never folded, with no deletion to weigh it against: not stale. A new
                # leader's listing is two of these a split, spec and progress record, so those
                # two are read here by their prefix, not through apply_put's classification
                # by parts and stale checks (what apply_put would do with them, at less cost),
                # and a progress record is folded as a split's first, with the rest of its run.
                # (decode() tries the canonical form first too; asked here directly.)
                if key.startswith(split_prefix) and len(key) > split_at:
                    name = key[split_at:]
                    record = canonical_progress(entry.value, name)
                    if record is not None:
                        names.append(name)
                        keys.append(key)
                        records.append(record)
                        revisions.append(entry.revision)
                        continue
                elif key.startswith(spec_prefix) and len(key) > spec_at:
                    name = key[spec_at:]
                    spec = canonical_spec(entry.value, name)
                    if spec is not None:
                        if names:
                            flush()
                        extend(fold_spec(name, key, spec, entry.revision))
                        continue
                # Not in the canonical form: apply_put decodes it in full (and holds its
                # split aside if it cannot be read).
            if names:
                flush()
            extend(apply_put(keyspace, entry))
        if names:
            flush()
        return notices
