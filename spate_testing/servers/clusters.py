"""Start a 3-member etcd cluster or a 3-server NATS cluster on loopback, and break members by role.

::

    from spate_testing.servers.clusters import etcd_cluster, nats_cluster

    async def test_survives_leader_loss() -> None:
        async with etcd_cluster() as cluster:
            async with open_store(cluster.store_url("job", ttl=5)) as store:
                killed = await cluster.kill("leader")   # SIGKILL the raft leader
                ...                                      # the store fails over
                await cluster.restart(killed)

Members are picked by role: ``"leader"`` (etcd's raft leader; NATS's JetStream meta leader, or
with ``stream=`` that stream's raft leader), ``"follower"`` (any live member that is not that
leader) or an index. ``stop`` is SIGTERM, ``kill`` SIGKILL, ``pause`` SIGSTOP (``resume`` is
SIGCONT); ``restart`` starts a stopped or killed member again on its ports with its data, and
it rejoins. Each cluster's details are on its class: :class:`EtcdCluster`,
:class:`NatsCluster`. The ``*_sync`` forms start a cluster from a thread with no Trio loop
(the chaos run's).

Each half is imported on first use, as :mod:`spate_testing.servers` imports its servers: the
etcd cluster needs the etcd extra (httpx), the NATS cluster does not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spate._module_metadata import fixup_module_metadata as _fixup_module_metadata

if TYPE_CHECKING:
    from spate_testing.servers._etcd_cluster import EtcdCluster as EtcdCluster
    from spate_testing.servers._etcd_cluster import EtcdMember as EtcdMember
    from spate_testing.servers._etcd_cluster import etcd_cluster as etcd_cluster
    from spate_testing.servers._etcd_cluster import etcd_cluster_sync as etcd_cluster_sync
    from spate_testing.servers._nats_cluster import NatsCluster as NatsCluster
    from spate_testing.servers._nats_cluster import NatsClusterServer as NatsClusterServer
    from spate_testing.servers._nats_cluster import nats_cluster as nats_cluster
    from spate_testing.servers._nats_cluster import nats_cluster_sync as nats_cluster_sync

_HOMES = {
    "spate_testing.servers._etcd_cluster": (
        "EtcdCluster",
        "EtcdMember",
        "etcd_cluster",
        "etcd_cluster_sync",
    ),
    "spate_testing.servers._nats_cluster": (
        "NatsCluster",
        "NatsClusterServer",
        "nats_cluster",
        "nats_cluster_sync",
    ),
}

__all__ = [name for names in _HOMES.values() for name in names]


def __getattr__(name: str) -> Any:
    for home, names in _HOMES.items():
        if name in names:
            module = importlib.import_module(home)
            found = {n: getattr(module, n) for n in names}
            _fixup_module_metadata(__name__, found, names)
            globals().update(found)
            return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
