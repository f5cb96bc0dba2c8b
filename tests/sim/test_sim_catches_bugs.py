"""The simulator and checker together catch a broken store: a suite that cannot fail proves
nothing. Each broken store below breaks one promise of the store contract; the same scripted
fleet runs clean on the real memory store (and the machine engine's model) and is flagged on
the broken one, on both engines."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from spate import Config
from spate._core.flows import Op
from spate.store import Keyspace, Revision, Store, Won, WriteResult
from spate_testing.faults import FaultRates
from spate_testing.sim._checker import check
from spate_testing.sim._machines import simulate_machines
from spate_testing.sim._model import ModelStore
from spate_testing.sim._runner import ENGINES, Engine, run_checked
from spate_testing.sim._scenario import Scenario, Scripted
from spate_testing.sim._workload import Workload

LEASE = 3.0
ZOMBIE = Scenario(
    seed=7,
    workload=Workload(
        batches=(tuple((f"s{i:02d}", 12, 1) for i in range(4)),),
        step_seconds=0.5,
    ),
    initial_workers=2,
    max_workers=3,
    lease=LEASE,
    config=Config(
        lease_duration=LEASE,
        planner_thread=False,
        max_in_flight=4,
        rebalance_delay=0.0,
        membership_debounce=0.0,  # the scenario this test was tuned on places the job at once
    ),
    rates=FaultRates(),
    chaos_seconds=20.0,
    # w0 stalls for two leases: its splits move to w1, then its queued commits land late.
    script=(Scripted(at=4.0, what="freeze", target="w0", duration=2 * LEASE),),
)


class _Delegate:
    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("write_many", "max_batch"):
            # No writes sent together: every write must meet the broken single call.
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class _LastWriterWins(_Delegate):
    """Compare-and-swap on progress records ignores the expected revision."""

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        if keyspace is Keyspace.DURABLE and ".split." in key:
            current = await self.inner.get(keyspace, key)
            if current is not None:
                expected = current.revision
        result: WriteResult = await self.inner.update(keyspace, key, value, expected, **named)
        return result


class _ForgetfulStore(_Delegate):
    """Every fifth progress-record update is acknowledged, then silently rolled back (as a
    store that lost acknowledged writes on a crash would)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.updates = 0

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        before = await self.inner.get(keyspace, key)
        result: WriteResult = await self.inner.update(keyspace, key, value, expected, **named)
        if keyspace is Keyspace.DURABLE and ".split." in key and isinstance(result, Won):
            self.updates += 1
            if self.updates % 5 == 0 and before is not None and b'"completed":true' not in value:
                await self.inner.update(keyspace, key, before.value, result.revision)
        return result


@pytest.mark.parametrize("engine", ENGINES)
def test_the_zombie_scenario_is_clean(engine: Engine) -> None:
    result = run_checked(ZOMBIE, engine=engine)
    assert result.ok, result.violations


def test_a_store_whose_cas_ignores_the_revision_is_caught() -> None:
    result = run_checked(ZOMBIE, engine="trio", wrap_store=lambda store: _LastWriterWins(store))
    flagged = {v.invariant for v in result.violations}
    assert flagged & {"stale-epoch", "two-owners", "watermark-regression", "lost-ack"}, flagged


def test_a_store_that_loses_acknowledged_writes_is_caught() -> None:
    # The protocol heals most rolled-back commits (the owner's next CAS loses, a successor
    # resumes and passes the lost watermark), so a run shows the fault only where the history
    # keeps a trace: a write lowering the watermark, or a final record below an acknowledged
    # commit. The Trio engine's interleaving decides where that falls, so two runs are judged.
    flagged: set[str] = set()
    for scenario in (ZOMBIE, Scenario.from_seed(1)):
        result = run_checked(scenario, engine="trio", wrap_store=lambda s: _ForgetfulStore(s))
        flagged |= {v.invariant for v in result.violations}
    assert flagged & {"lost-ack", "watermark-regression"}, flagged


class _LastWriterWinsModel(ModelStore):
    """The machine engine's store model, with compare-and-swap on progress records broken."""

    def write(self, actor: str, op: Op, *, lease: int | None = None) -> WriteResult:
        if op.method == "update" and op.keyspace is Keyspace.DURABLE and ".split." in op.key:
            current = self.get(op.keyspace, op.key)
            if current is not None:
                op = attrs.evolve(op, expected=current.revision)
        return super().write(actor, op, lease=lease)


class _ForgetfulModel(ModelStore):
    """Every fifth progress-record update is acknowledged, then silently rolled back."""

    updates = 0

    def write(self, actor: str, op: Op, *, lease: int | None = None) -> WriteResult:
        before = self.get(op.keyspace, op.key)
        result = super().write(actor, op, lease=lease)
        if op.method == "update" and ".split." in op.key and isinstance(result, Won):
            self.updates += 1
            if self.updates % 5 == 0 and before is not None and b'"completed":true' not in op.value:
                # Beneath the history (as a wrapper beneath the recorder would): the old
                # value comes back under a new revision.
                self._put(op.keyspace, self._tables[op.keyspace], op.key, before.value)
        return result


def flagged_by(model: type[ModelStore]) -> set[str]:
    return {v.invariant for v in check(simulate_machines(ZOMBIE, model=model).history)}


def test_the_machine_engine_catches_a_cas_that_ignores_the_revision() -> None:
    flagged = flagged_by(_LastWriterWinsModel)
    assert flagged & {"stale-epoch", "two-owners", "watermark-regression", "lost-ack"}, flagged


def test_the_machine_engine_catches_a_store_that_loses_acknowledged_writes() -> None:
    # The lost write shows either way: as an acknowledged commit the final record lacks, or
    # as the next write built on the rolled-back record moving the watermark back.
    flagged = flagged_by(_ForgetfulModel)
    assert flagged & {"lost-ack", "watermark-regression"}, flagged
