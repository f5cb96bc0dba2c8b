"""A fleet spread over failure domains: split affinity, machine by machine."""

from __future__ import annotations

from spate import Plan, PlanContext, SplitSpec

from .world import Worker, World, config, cooperative

# Uneven on purpose: balancing workers alone would put half the job in zone-a.
LAYOUT = {"zone-a": 3, "zone-b": 2, "zone-c": 1}


def _owners(fleet: list[Worker]) -> dict[str, str]:
    return {split: w.instance for w in fleet if not w.stopped for split in w.owned}


def test_split_affinity_lands_on_matching_workers() -> None:
    def planner(ctx: PlanContext) -> Plan:
        near_b = [SplitSpec(f"b-data-{i}", locality="zone-b") for i in range(3)]
        return Plan([*near_b, *(SplitSpec(f"any-{i}") for i in range(9))], final=True)

    world = World()
    fleet = [
        world.start(
            f"{zone[-1]}{i}",
            planner=planner,
            cfg=config(max_in_flight=16),
            on_event=cooperative,
            locality=f"{zone}/host-{i}",
        )
        for zone, count in LAYOUT.items()
        for i in range(count)
    ]
    world.run_until(lambda: len(_owners(fleet)) == 12, within=120)
    world.run_for(20)
    owners = _owners(fleet)
    for i in range(3):
        assert owners[f"b-data-{i}"].startswith("b")
