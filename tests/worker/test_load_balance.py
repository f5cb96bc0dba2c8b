"""The leader moves running splits by measured load (docs/balancing.md), end to end."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable
from typing import Any

import trio
import trio.testing

import spate
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, client, config, planner

SPLITS = 32


class Fleet:
    """Workers whose handlers report each split's load, and who holds what when."""

    def __init__(self, load_of: dict[str, float] | None = None) -> None:
        self.server = MemoryServer()
        self.holder: dict[str, str] = {}
        self.gains: dict[str, list[tuple[float, str]]] = {}
        self.load_of = load_of if load_of is not None else {}
        self.rounds = Rounds()

    def handler(self, instance: str, heavy: float) -> spate.Handler:
        async def handle(split: spate.SplitHandle) -> None:
            # A split's load is fixed the first time it runs: heavy on the first worker.
            load = self.load_of.setdefault(split.id, heavy)
            self.holder[split.id] = instance
            self.gains.setdefault(split.id, []).append((trio.current_time(), instance))
            watermark = split.progress.watermark or 0
            while not split.revoke_requested.is_set():
                await trio.sleep(1)
                split.report_load(load)
                watermark += 1
                await split.commit(watermark)
            # drain-then-commit: everything done was committed, nothing replays

        return handle

    def loads(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for split, instance in self.holder.items():
            out[instance] = out.get(instance, 0.0) + self.load_of[split]
        return out

    def start(self, nursery: trio.Nursery, instance: str, heavy: float, **overrides: Any) -> None:
        cfg = config(max_in_flight=SPLITS, **overrides)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(self.server), job=JOB, instance=instance, planner=planner(SPLITS),
                handler=self.handler(instance, heavy), config=cfg, metrics=self.rounds,
            )
        )  # fmt: skip


class Rounds(spate.MetricsHooks):
    """The balance rounds the leader reported."""

    def __init__(self) -> None:
        self.reports: list[spate.BalanceReport] = []

    def balance(self, report: spate.BalanceReport | None) -> None:
        if report is not None:
            self.reports.append(report)


def within_band(
    loads: dict[str, float], band: float = 0.10, capacity: dict[str, float] | None = None
) -> bool:
    capacity = capacity or {}
    total_capacity = sum(capacity.get(w, 1.0) for w in loads)
    mean = sum(loads.values()) / total_capacity
    return all(abs(load / capacity.get(w, 1.0) / mean - 1) <= band for w, load in loads.items())


async def test_a_skewed_fleet_converges_within_the_band_in_three_rounds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fleet = Fleet()
    async with trio.open_nursery() as nursery:
        # Started together (a join window): each split is placed once, 16 and 16, and a
        # split is heavy on a, light on b.
        fleet.start(nursery, "a", heavy=3.0, membership_debounce=2.0)
        fleet.start(nursery, "b", heavy=1.0, membership_debounce=2.0)
        await trio.sleep(30)
        before = fleet.loads()
        assert not within_band(before), before  # count-balanced, load-skewed
        # Loads are trusted after a minute; the first round that may act is at 60 s of
        # leadership, then one a minute.
        await trio.sleep(60 + 3 * 60)
        after = fleet.loads()
        await trio.sleep(10 * 60)  # ten more rounds with stable loads: nothing moves
        later = fleet.loads()
        nursery.cancel_scope.cancel()
    assert within_band(after), after
    assert later == after
    moves = sorted((t, s) for s, gains in fleet.gains.items() for t, _ in gains[1:])
    assert moves  # it moved
    # No split moved twice within its cooldown (3 rounds of 60 s).
    for split, gains in fleet.gains.items():
        times = [t for t, _ in gains]
        assert all(b - a >= 180 for a, b in itertools.pairwise(times[1:])), split
    # No round moved more than max_moved_load (10%) of the job's load: a round's moves land
    # within a drain of each other.
    total = sum(fleet.load_of.values())
    rounds: list[list[str]] = []
    last = -1e9
    for t, split in moves:
        if t - last > 30:
            rounds.append([])
        rounds[-1].append(split)
        last = t
    assert len(rounds) <= 3
    for moved in rounds:
        assert sum(fleet.load_of[s] for s in moved) <= 0.10 * total + 1e-9, moved
    # The leader's own account of its rounds: each within its budget, the imbalance falling.
    reports = fleet.rounds.reports
    acted = [r for r in reports if r.moves]
    assert 1 <= len(acted) <= 3
    assert all(r.moved_load <= 0.10 * r.job_load + 1e-9 for r in reports)
    assert acted[0].imbalance_after < acted[0].imbalance_before
    assert acted[-1].imbalance_after <= 1.10 + 1e-9
    assert all(r.reason == "within band" for r in reports[-10:])


async def test_capacity_two_takes_twice_the_load(autojump_clock: trio.testing.MockClock) -> None:
    fleet = Fleet()
    async with trio.open_nursery() as nursery:
        fleet.start(nursery, "a", heavy=1.0, membership_debounce=2.0, capacity=2.0)
        fleet.start(nursery, "b", heavy=1.0, membership_debounce=2.0)
        await trio.sleep(60 + 5 * 60)
        after = fleet.loads()
        nursery.cancel_scope.cancel()
    assert within_band(after, capacity={"a": 2.0, "b": 1.0}), after
    assert after["a"] > 1.7 * after["b"]


async def test_an_idle_job_never_moves(autojump_clock: trio.testing.MockClock) -> None:
    fleet = Fleet()
    async with trio.open_nursery() as nursery:
        fleet.start(nursery, "a", heavy=0.0, membership_debounce=2.0)
        fleet.start(nursery, "b", heavy=0.0, membership_debounce=2.0)
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert all(len(gains) == 1 for gains in fleet.gains.values())


async def test_balance_interval_zero_turns_it_off(autojump_clock: trio.testing.MockClock) -> None:
    fleet = Fleet()
    async with trio.open_nursery() as nursery:
        fleet.start(nursery, "a", heavy=3.0, membership_debounce=2.0, balance_interval=0)
        fleet.start(nursery, "b", heavy=1.0, membership_debounce=2.0, balance_interval=0)
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert all(len(gains) == 1 for gains in fleet.gains.values())


async def test_no_load_reported_nothing_moves(autojump_clock: trio.testing.MockClock) -> None:
    fleet = Fleet()

    async def quiet(split: spate.SplitHandle) -> None:
        fleet.gains.setdefault(split.id, []).append((trio.current_time(), "?"))
        await split.revoke_requested.wait()

    def worker(instance: str) -> Awaitable[object]:
        return spate.run_worker(
            client(fleet.server), job=JOB, instance=instance, planner=planner(8), handler=quiet,
            config=config(max_in_flight=8),
        )  # fmt: skip

    async with trio.open_nursery() as nursery:
        for instance in ("a", "b"):
            nursery.start_soon(worker, instance)
        await trio.sleep(30)
        gains = {s: len(g) for s, g in fleet.gains.items()}
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert {s: len(g) for s, g in fleet.gains.items()} == gains


async def test_a_graceful_move_of_one_split_costs_at_most_ten_round_trips(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # bench/balance_move.py on the memory store, 1 ms injected on every call: in virtual time
    # the move's duration over one round trip is exactly the round trips it waits for.
    from bench.balance_move import TARGET, _memory_move

    move = await _memory_move()
    assert move.round_trips <= TARGET
    assert move.took / move.rtt <= TARGET


async def test_a_splittable_skewed_job_ends_with_its_hottest_worker_near_the_mean(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The balancing page's figure, end to end at the default balance settings: 8 splits, one 16x the
    # others, on 4 workers. A descriptor is the split's load; a handler asked to split halves
    # it (the recipe of docs/splitting.md). Halves of 8 are under twice the mean (11.5) but
    # over any worker's band (6.325): the leader asks them again, and the quarters it leaves
    # to the moves.
    holder: dict[str, str] = {}
    load_of: dict[str, float] = {}
    residuals: list[tuple[float, str, str]] = []

    def plan(ctx: spate.PlanContext) -> spate.Plan:
        loads = [16.0] + [1.0] * 7
        return spate.Plan(
            [spate.SplitSpec(f"s{i:02d}", repr(x).encode(), 1) for i, x in enumerate(loads)],
            final=True,
        )

    def handler(instance: str) -> spate.Handler:
        async def handle(split: spate.SplitHandle) -> None:
            load = float(split.descriptor)
            holder[split.id] = instance
            load_of[split.id] = load
            watermark = split.progress.watermark or 0
            while not split.revoke_requested.is_set():
                await trio.sleep(1)
                split.report_load(load)
                watermark += 1
                await split.commit(watermark)
                if split.split_requested.is_set():
                    load /= 2
                    half = repr(load).encode()
                    rid = await split.split(primary=half, residual=half)
                    load_of[split.id] = load
                    residuals.append((trio.current_time(), split.id, rid))

        return handle

    server = MemoryServer()
    rounds = Rounds()

    def worker(instance: str, cfg: spate.Config) -> Awaitable[object]:
        return spate.run_worker(
            client(server), job=JOB, instance=instance, planner=plan, handler=handler(instance),
            config=cfg, metrics=rounds,
        )  # fmt: skip

    async with trio.open_nursery() as nursery:
        for instance in "abcd":
            # Idle lanes' requests (the end of a bounded job's rule) would cut every split
            # until the lanes fill: a long debounce leaves the balance's own requests alone.
            cfg = config(
                max_in_flight=8, membership_debounce=2.0, split_requests=True,
                split_request_delay=1e9,
            )  # fmt: skip
            nursery.start_soon(worker, instance, cfg)
        await trio.sleep(30)
        assert len(holder) == 8
        await trio.sleep(15 * 60)
        loads: dict[str, float] = {}
        for split, instance in holder.items():
            loads[instance] = loads.get(instance, 0.0) + load_of[split]
        nursery.cancel_scope.cancel()
    assert sum(loads.values()) == 23.0
    mean = 23.0 / 4
    assert max(loads.values()) / mean <= 1.15, loads
    # the 16 was cut into four 4s (three splits), and no light split was ever asked
    assert sorted(load_of[s] for s in load_of if s.startswith("s00")) == [4.0] * 4
    assert len(residuals) == 3
    assert all(parent.startswith("s00") for _, parent, _ in residuals)
    assert rounds.reports[-1].imbalance_after <= 1.10 + 1e-9
