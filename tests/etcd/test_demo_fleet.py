"""The demo fleet (kill, zombie, scale-down, join, poison split) on real etcd."""

from __future__ import annotations

import pytest

from spate.demo.fleet import DemoOptions, run_demo
from spate.demo.view import PlainView
from spate.events import AllComplete
from spate_testing.servers.etcd import EtcdServer

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("chaos", [False, True], ids=["calm", "chaos"])
async def test_the_demo_fleet_checks_out_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, chaos: bool
) -> None:
    lines: list[str] = []
    result = await run_demo(
        DemoOptions(
            store_url=etcd_session_server.store_url(namespace),
            workers=4,
            splits=16,
            seed=3,
            chaos=chaos,
            duration=8,
        ),
        PlainView(lines.append),
    )
    assert result.ok, (result.problems, lines)
    assert isinstance(result.verdict, AllComplete)
    assert result.splits_checked == 16
