"""A suite that cannot fail proves nothing: run it against broken stores and watch it fail.

Each broken store (see ``broken_stores.py``) breaks one rule of the contract. The suite runs
against it in-process (pytester, MockClock) and must fail, and in particular the test written
for that rule must be among the failures. The control, a wrapper that breaks nothing, must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.broken_stores import BROKEN

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent

# broken store -> the test written to catch it (others may fail too)
CATCHERS = {
    "duplicate-create-wins": "test_create_wins_once_then_loses",
    "stale-update-wins": "test_update_at_stale_revision_loses",
    "update-of-missing-key-wins": "test_update_of_missing_key_loses",
    "guarded-delete-ignores-revision": "test_guarded_delete_at_stale_revision_loses",
    "revision-never-increases": "test_update_at_current_revision_wins",
    "revision-resets-on-recreate": "test_revisions_strictly_increase_per_key",
    "list-ignores-prefix": "test_list_filters_by_prefix_and_sorts_by_key",
    "list-unsorted": "test_list_filters_by_prefix_and_sorts_by_key",
    "pages-drop-last-of-full-page": "test_list_pages_together_equal_list",
    "pages-ignore-page-size": "test_list_pages_shape",
    "pages-unsorted": "test_list_pages_shape",
    "pages-end-with-an-empty-page": "test_list_pages_shape",
    "watch-omits-snapshot-done": "test_watch_starts_with_snapshot_then_snapshot_done",
    "watch-reorders-events": "test_watch_delivers_live_puts_and_deletes_in_order",
    "watch-has-gap": "test_watch_has_no_gap_between_snapshot_and_live_events",
    "exact-watch-is-a-prefix-watch": "test_exact_watch_sees_only_its_key",
    "exact-watch-takes-any-prefix": "test_exact_watch_refuses_an_invalid_key",
    "silent-expiry-declared-loud": "test_watch_reports_per_key_expiry_as_delete",
    "expiry-never-happens": "test_per_key_entry_is_gone_within_slack_after_ttl",
    "expiry-happens-early": "test_ephemeral_entry_lives_at_least_ttl_after_create",
    "create-not-atomic": "test_concurrent_creates_exactly_one_wins",
    "update-not-atomic": "test_concurrent_updates_from_one_revision_exactly_one_wins",
    "values-mangled": "test_values_round_trip_byte_exact",
    "oversize-value-lands": "test_value_over_max_size_raises_and_writes_nothing",
    "keyspaces-shared": "test_keyspaces_are_isolated",
    "namespaces-shared": "test_namespaces_are_isolated",
    "session-outlives-coordinator": "test_ended_session_entries_vanish_while_the_client_stays_open",
}

MODULE = """
import pytest
import trio.testing

from broken_stores import broken_factory
from spate_testing.conformance import StoreConformance


class TestBrokenStore(StoreConformance):
    @pytest.fixture
    def store_factory(self):
        return broken_factory({name!r})

    @pytest.fixture
    def spate_clock(self):
        return trio.testing.MockClock(autojump_threshold=0)
"""


def run_suite(pytester: pytest.Pytester, name: str) -> tuple[set[str], set[str], int]:
    """Run the suite on broken store ``name``: (failed test names, failed nodeids, passed)."""
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_broken=MODULE.format(name=name))
    result = pytester.inline_run("-p", "no:cacheprovider")
    passed, _, failed = result.listoutcomes()
    assert all(report.when == "call" for report in failed), "a failure outside a test body"
    nodeids = {report.nodeid for report in failed}
    return {nodeid.split("::")[-1].split("[")[0] for nodeid in nodeids}, nodeids, len(passed)


def test_every_broken_store_has_a_catcher() -> None:
    assert set(CATCHERS) == set(BROKEN) - {"none"}


def test_suite_passes_on_the_unbroken_wrapper(pytester: pytest.Pytester) -> None:
    failed, nodeids, passed = run_suite(pytester, "none")
    assert not failed, nodeids
    assert passed > 50


@pytest.mark.parametrize("name", sorted(CATCHERS))
def test_suite_catches_broken_store(pytester: pytest.Pytester, name: str) -> None:
    failed, nodeids, _ = run_suite(pytester, name)
    assert CATCHERS[name] in failed, (
        f"{name}: {CATCHERS[name]} passed; the suite failed only {sorted(nodeids)}"
    )
