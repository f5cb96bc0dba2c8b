"""The machine without an event loop: a dict for a store, a float for a clock, plain calls.

Nothing here runs Trio. A tiny synchronous driver performs the flows' requests against an
in-process table of revisions and feeds every write back to the machine as a watch event,
the way the runtime does, so each protocol step can be checked one call at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import outcome

from spate import (
    Config,
    Event,
    Gained,
    MetricsHooks,
    Plan,
    PlanContext,
    Planner,
    Progress,
    SplitSpec,
)
from spate._core.flows import Batch, Flow, Fork, Hold, Op
from spate._core.machine import Machine
from spate._core.records import PlanRecord, ProgressRecord, decode, encode
from spate.store import Conflict, Entry, Keyspace, Won

D, E = Keyspace.DURABLE, Keyspace.EPHEMERAL


@attrs.define
class _Call:
    planner: Planner
    ctx: PlanContext
    deliver: Callable[[outcome.Outcome[Any]], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class SyncWorld:
    """One machine, a revisioned key table, and a synchronous driver between them."""

    def __init__(self, planner: Planner, *, nonce: str = "n1") -> None:
        self.now = 0.0
        self.revision = 0
        self.table: dict[tuple[Keyspace, str], Entry] = {}
        self.flows: list[tuple[Flow[Any], Callable[[outcome.Outcome[Any]], None]]] = []
        self.planner_calls: list[_Call] = []
        self.events: list[Event] = []
        self.wakes: list[float] = []
        self.ops: list[Op] = []
        self.pending_echoes: list[tuple[Keyspace, Entry]] = []
        self.step_requests = 0
        config = Config(lease_duration=9.0, op_timeout=1.0, max_in_flight=4, rebalance_delay=0.0)
        self.machine = Machine(
            job="j",
            instance="w1",
            planner=planner,
            config=config.resolve(9.0),
            fingerprint="",
            metrics=MetricsHooks(),
            locality="",
            nonce=nonce,
            clock=lambda: self.now,
            wall_ms=lambda: int(self.now * 1000),
            max_value_size=1 << 20,
            session=_NoSession(),
            effects=self,
        )

    # -- Effects -----------------------------------------------------------------------------

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None],
        context: object = None,
    ) -> None:
        self.flows.append((flow, done))

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        return False  # one flow at a time runs to its end here: no key is ever held

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def wake_at(self, deadline: float) -> None:
        self.wakes.append(deadline)

    def request_step(self) -> None:
        self.step_requests += 1

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> _Call:
        call = _Call(planner, ctx, deliver)
        self.planner_calls.append(call)
        return call

    # -- the driver --------------------------------------------------------------------------

    def perform(self, op: Op) -> Any:
        self.ops.append(op)
        key = (op.keyspace, op.key)
        current = self.table.get(key)
        if op.kind == "get":
            return current
        if op.kind == "list":
            return self.listing(op.keyspace, op.key)
        if op.kind == "create" and current is not None:
            return Conflict()
        if (
            op.kind in ("update", "delete")
            and op.expected is not None
            and (current is None or current.revision != op.expected)
        ):
            return Conflict()
        self.revision += 1
        if op.kind == "delete":
            self.table.pop(key, None)
            self.machine.watch_delete(op.keyspace, op.key, self.revision)
        else:
            entry = Entry(op.key, op.value, self.revision)
            self.table[key] = entry
            self.pending_echoes.append((op.keyspace, entry))
        return Won(self.revision)

    def listing(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        found = [e for (ks, k), e in self.table.items() if ks is keyspace and k.startswith(prefix)]
        return sorted(found, key=lambda e: e.key)

    def run_flow(self, flow: Flow[Any]) -> outcome.Outcome[Any]:
        result: outcome.Outcome[Any] = outcome.Value(None)
        while True:
            try:
                request = result.send(flow)
            except StopIteration as stop:
                return outcome.Value(stop.value)
            except Exception as exc:
                return outcome.Error(exc)
            if isinstance(request, Hold):
                result = outcome.Value(None)
            elif isinstance(request, Op):
                result = outcome.Value(self.perform(request))
            elif isinstance(request, Batch):
                results = []
                for i, op in enumerate(request.ops):
                    results.append(self.perform(op))
                    if request.landed is not None:
                        request.landed(i, results[-1])
                result = outcome.Value(results)
            else:
                assert isinstance(request, Fork)
                result = outcome.Value([self.run_flow(sub) for sub in request.flows])

    def settle(self) -> None:
        """Run every flow, planner call and watch echo until the machine asks for nothing."""
        self.pending_echoes = []
        for _ in range(1000):
            if self.flows:
                flow, done = self.flows.pop(0)
                done(self.run_flow(flow))
            elif self.planner_calls:
                call = self.planner_calls.pop(0)
                if not call.cancelled:
                    call.deliver(outcome.capture(call.planner, call.ctx))  # type: ignore[arg-type]
            elif self.pending_echoes:
                keyspace, entry = self.pending_echoes.pop(0)
                self.machine.watch_put(keyspace, entry)
            else:
                self.machine.step()
                if not (self.flows or self.planner_calls or self.pending_echoes):
                    return
        raise AssertionError("the machine never settled")


@attrs.define
class _NoSession:
    generation: int = 1
    keeps_keys: bool = False

    def starved(self, generation: int, now: float, lease: float) -> bool:
        return False


def two_splits(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec("a", b""), SplitSpec("b", b"")], final=True)


def started_world() -> SyncWorld:
    world = SyncWorld(two_splits)
    machine = world.machine
    # What the runtime's startup writes before the loop starts: the plan record, presence.
    world.perform(Op("create", D, machine.keys.plan, encode(PlanRecord(fingerprint=""))))
    announced = world.perform(Op("create", E, machine.keys.worker("w1"), machine.presence_record()))
    machine.presence_rev = announced.revision
    for keyspace in (E, D):
        machine.watch_opening(keyspace)
        machine.watch_snapshot(
            keyspace, [e for (ks, _), e in world.table.items() if ks is keyspace]
        )
    assert machine.ready
    world.settle()
    return world


def test_a_lone_machine_elects_itself_plans_and_claims_every_split() -> None:
    world = started_world()
    machine = world.machine
    assert machine.leading
    assert machine.owned == {"a", "b"}
    assert sorted(e.split for e in world.events if isinstance(e, Gained)) == ["a", "b"]
    record = decode(ProgressRecord, "j.split.a", world.table[(D, "j.split.a")].value, split="a")
    assert (record.owner, record.owner_nonce, record.epoch) == ("w1", "n1", 1)


def test_a_commit_is_one_write_and_its_echo_changes_nothing() -> None:
    world = started_world()
    machine = world.machine
    before = len(world.ops)
    world.pending_echoes = []
    result = world.run_flow(machine.commit_flow("a", Progress(watermark=7)))
    assert result.unwrap() is None
    assert world.step_requests == 0  # nothing another rule reads changed
    assert [(op.kind, op.key) for op in world.ops[before:]] == [("update", "j.split.a")]
    # The echo of that write is known by its revision: nothing is decoded, nothing to do.
    ((keyspace, echo),) = world.pending_echoes
    assert machine.watch_put(keyspace, echo) is False
    # A write by someone else at a newer revision is news.
    newer = Entry(echo.key, echo.value, echo.revision + 1)
    assert machine.watch_put(keyspace, newer) is True


def test_time_is_the_injected_clock() -> None:
    world = started_world()
    machine = world.machine
    world.now = 1234.5
    assert machine.now() == 1234.5
    held = machine._claims.owned["a"]
    # The renewal cadence reads the same clock: nothing is due before a third of the lease
    # (gated at 0.7 of it), then every held lease is renewed.
    before = len(world.ops)
    world.now = held.last_ok + 1.0
    machine.heartbeat()
    world.settle()
    assert not [op for op in world.ops[before:] if op.operation == "renew"]
    world.now = held.last_ok + machine.lease / 3
    machine.heartbeat()
    world.settle()
    assert sorted(op.split for op in world.ops[before:] if op.operation == "renew") == ["a", "b"]


def test_a_completed_commit_frees_its_lane_and_asks_the_rules_to_look() -> None:
    world = started_world()
    machine = world.machine
    result = world.run_flow(machine.commit_flow("a", Progress(watermark=9, completed=True)))
    assert result.unwrap() is None
    assert not machine.holds("a")
    # Ran outside any input (as an API call does): without this the freed lane would wait
    # for the next unrelated input or heartbeat.
    assert world.step_requests >= 1
