"""A fleet spread over failure domains, end to end: the loss of a whole domain as ``spate status``
shows it, and the locality check of open_coordinator. Affinity is specified machine by machine in
``tests/core/test_split_affinity.py``.
"""

from __future__ import annotations

import pytest
import trio
from rich.console import Console

from spate import ConfigError, Planner, open_coordinator
from spate._cli.status_table import render_status
from spate.ops import read_status
from spate_stores.memory import MemoryServer

from .harness import JOB, Worker, client, config, cooperative, planner_of, spawn

# Uneven on purpose: balancing workers alone would put half the job in zone-a.
LAYOUT = {"zone-a": 3, "zone-b": 2, "zone-c": 1}


async def _fleet(nursery: trio.Nursery, server: MemoryServer, planner: Planner) -> list[Worker]:
    return [
        await spawn(
            nursery,
            client(server),
            f"{zone[-1]}{i}",
            planner=planner,
            cfg=config(max_in_flight=16),
            on_event=cooperative,
            locality=f"{zone}/host-{i}",
        )
        for zone, count in LAYOUT.items()
        for i in range(count)
    ]


def _owners(fleet: list[Worker]) -> dict[str, str]:
    return {split: w.instance for w in fleet if w.coord is not None for split in w.c.owned}


async def test_losing_a_whole_domain_moves_only_its_splits_spread_over_the_survivors(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        fleet = await _fleet(nursery, server, planner_of(30))
        await fleet[0].until(lambda: len(_owners(fleet)) == 30, within=120)
        await trio.sleep(30)  # let the placement settle
        before = _owners(fleet)
        per_zone = {z: sum(1 for o in before.values() if o[0] == z) for z in "abc"}
        assert per_zone == {"a": 10, "b": 10, "c": 10}
        status = await read_status(client(server), JOB)
        assert status.placement().blast_radius == pytest.approx(1 / 3)
        lost = [w for w in fleet if w.instance.startswith("b")]
        survivors = [w for w in fleet if w not in lost]
        for w in lost:
            w.kill()  # the whole zone at once: nothing handed back
        await fleet[0].until(lambda: len(_owners(survivors)) == 30, within=120)
        await trio.sleep(30)  # and it stays put
        after = _owners(survivors)
        assert len(after) == 30
        for split, owner in before.items():
            if owner[0] != "b":
                assert after[split] == owner  # nothing of a surviving domain moved
        moved = [s for s, o in before.items() if o[0] == "b"]
        per_zone = {z: sum(1 for s in moved if after[s][0] == z) for z in "ac"}
        assert per_zone == {"a": 5, "c": 5}  # spread evenly over the surviving domains
        status = await read_status(client(server), JOB)
        assert status.placement().blast_radius == pytest.approx(1 / 2)
        assert {d.domain: d.splits for d in status.placement().domains} == {
            "zone-a": 15, "zone-c": 15,
        }  # fmt: skip
        doc = status.to_json()
        assert doc["blast_radius"] == pytest.approx(1 / 2)
        assert [d["domain"] for d in doc["domains"]] == ["zone-a", "zone-c"]  # type: ignore[attr-defined]
        console = Console(width=120, record=True)
        console.print(render_status(status))
        assert "failure domains (tier 0) · blast radius 50%" in console.export_text()
        nursery.cancel_scope.cancel()


async def test_an_invalid_locality_is_refused_before_joining() -> None:
    with pytest.raises(ConfigError, match="locality"):
        async with open_coordinator(
            client(MemoryServer()), job=JOB, instance="x", planner=planner_of(1),
            locality="zone a",
        ):  # fmt: skip
            pass
