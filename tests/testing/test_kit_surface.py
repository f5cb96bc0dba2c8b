"""The test kit's helpers offer what the docs teach and spate's tests use, nothing unused.

Adding a method to one of these is a decision, as adding a public name is: update the pin.
"""

from __future__ import annotations

import pytest

from spate_testing.blackhole import BlackholeProxy
from spate_testing.servers.clusters import EtcdCluster, NatsCluster

COMMON_CLUSTER = {"cleanup", "kill", "leader", "member", "pause", "restart", "stop", "store_url"}
SURFACES = {
    # A test that cuts the link knows it did: no is_cut.
    BlackholeProxy: {"cut", "heal", "url_for"},
    # The blocking variants serve session fixtures and scripts; no async current_leader, which
    # nothing used (await cluster.kill("leader") and friends pick the leader themselves).
    EtcdCluster: COMMON_CLUSTER
    | {
        "endpoints",
        "pause_sync",
        "restart_member_sync",
        "resume_sync",
        "start_sync",
        "stop_member_sync",
    },
    NatsCluster: COMMON_CLUSTER
    | {"restart_member_sync", "start_sync", "stop_member_sync", "stream_replicas"},
}


@pytest.mark.parametrize("cls", SURFACES, ids=lambda cls: cls.__name__)
def test_the_helper_offers_exactly_its_pinned_methods(cls: type) -> None:
    assert {name for name in dir(cls) if not name.startswith("_")} == SURFACES[cls]
