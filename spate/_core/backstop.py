"""The reconcile: the backstop for missed watch events, read as each worker's scope allows.

A follower re-reads its own keys (its three exact watches' keys and its assigned-but-unheld splits)
and never lists the job (docs/protocol.md, "Who reads what"). The leader lists both keyspaces in
pages of ``Config.list_page_size`` records, folding each page and letting it go, so it holds about a
page in flight whatever the job's size; keys no page brought are decided only once the last page is
in (:meth:`~spate._core.view.view.View.end_listing`). One reconcile runs at a time.
"""

from __future__ import annotations

import logging

from spate._core.flows import Flow, Op, Page
from spate._core.host import Host
from spate._core.tenancy.claims import Claims
from spate._core.view.scopes import Scopes
from spate._errors import StoreUnavailable
from spate._store import Keyspace

__all__ = ["Backstop"]

logger = logging.getLogger("spate.coordinator")


class Backstop:
    """The reconcile tick's listings (the leader's) or point reads (a follower's)."""

    def __init__(self, host: Host, scopes: Scopes, claims: Claims) -> None:
        self.host = host
        self._scopes = scopes
        self._claims = claims
        self._reconciling = False

    def reconcile(self) -> None:
        """Start the backstop reads, unless one is still running."""
        if not self._reconciling:
            self._reconciling = True
            self.host.start(self._reconcile_flow())

    def _reconcile_flow(self) -> Flow[None]:
        host = self.host
        started = host.now()
        if not host.sees_job:
            # A follower's backstop reads its own keys again, never the job.
            try:
                for scope in self._scopes.follower:
                    yield from host.reread(scope.keyspace, scope.key)
                self._claims.reread_share()
                host.metrics.reconcile_duration(host.now() - started)
            finally:
                self._reconciling = False
            return
        try:
            for keyspace in (Keyspace.EPHEMERAL, Keyspace.DURABLE):
                try:
                    if not (yield from self._list_in_pages(keyspace)):
                        return
                except StoreUnavailable as exc:
                    logger.warning("reconcile listing failed (%s); the next tick retries", exc)
                    return
            # Grace windows elapse with time, not events: let the leader re-decide.
            host.placement_changes.owe()
            host.metrics.reconcile_duration(host.now() - started)
        finally:
            self._reconciling = False

    def _list_in_pages(self, keyspace: Keyspace) -> Flow[bool]:
        """The leader's backstop listing of one keyspace, folded page by page.

        Each page is folded as it comes and let go, so the listing holds about one page of
        records whatever the job's size; what no page brought is decided at the
        end (:meth:`View.end_listing`). The set of keys seen is the one thing kept across
        pages: a key each, where the view already holds a record each.
        """
        host, view = self.host, self.host.view
        since = view.seq
        seen: set[str] = set()
        cursor: object = None
        size = host.config.list_page_size
        while True:
            page: Page = yield Op(
                "list-page", keyspace, host.keys.prefix, cursor=cursor, page_size=size
            )
            if not host.sees_job:
                return False  # it stopped leading meanwhile: the rest is not a follower's
            seen.update(entry.key for entry in page.entries)
            host.fold(view.apply_page(keyspace, page.entries))
            if page.cursor is None:
                break
            cursor = page.cursor
        host.fold(view.end_listing(keyspace, seen, since=since))
        return True
