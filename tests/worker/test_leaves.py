"""On the memory store, a worker cancelled around its own store hands back (as on etcd and NATS)."""

from __future__ import annotations

import secrets

import pytest
import trio
import trio.testing

from tests.worker.leave_checks import TTL, cancelled_around_the_store_hands_back


async def test_a_worker_cancelled_around_its_own_store_hands_back_on_memory(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"memory://leave-{secrets.token_hex(4)}?ttl={TTL:g}"
    taken = await cancelled_around_the_store_hands_back(url, caplog)
    print(f"memory: every split committed elsewhere {taken:.2f} s after the cancel")
