"""The simulator and checker together catch a broken store: a suite that cannot fail proves
nothing. Each broken store below breaks one promise of the store contract; the same scripted
fleet runs clean on the real memory store and is flagged on the broken one."""

from __future__ import annotations

from typing import Any

from spate.config import Config
from spate.store import Keyspace, Revision, Store, Won, WriteResult
from spate_testing.faults import FaultRates
from spate_testing.sim.runner import run_checked
from spate_testing.sim.scenario import Scenario, Scripted
from spate_testing.sim.workload import Workload

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
    config=Config(lease_duration=LEASE, planner_thread=False, max_in_flight=4, rebalance_delay=0.0),
    rates=FaultRates(),
    chaos_seconds=20.0,
    # w0 stalls for two leases: its splits move to w1, then its queued commits land late.
    script=(Scripted(at=2.0, what="freeze", target="w0", duration=2 * LEASE),),
)


class _Delegate:
    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
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


def test_the_zombie_scenario_is_clean_on_the_memory_store() -> None:
    result = run_checked(ZOMBIE)
    assert result.ok, result.violations


def test_a_store_whose_cas_ignores_the_revision_is_caught() -> None:
    result = run_checked(ZOMBIE, wrap_store=lambda store: _LastWriterWins(store))
    flagged = {v.invariant for v in result.violations}
    assert flagged & {"stale-epoch", "two-owners", "watermark-regression", "lost-ack"}, flagged


def test_a_store_that_loses_acknowledged_writes_is_caught() -> None:
    result = run_checked(ZOMBIE, wrap_store=lambda store: _ForgetfulStore(store))
    flagged = {v.invariant for v in result.violations}
    assert "lost-ack" in flagged, flagged
