"""Coalesced writes on a real server: nothing is stranded, delayed forever, or reordered.

Requesters woken together by one batch of replies hold their next write back so the last of
them sends all of them at once (see ``NatsConnection._send``). These tests pin the two ways that
could go wrong: a held write that no woken requester sends must still go out (the writer task
sends it), and the count of woken requesters must return to zero (else every later write would
wait for the writer task).
"""

from __future__ import annotations

import pytest
import trio

from spate.store import Keyspace, Won
from spate_stores import open_store
from spate_testing.servers.nats import NatsServer

pytestmark = pytest.mark.nats

DURABLE = Keyspace.DURABLE


async def test_concurrent_writers_stay_exact_and_the_wake_count_settles(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        connection = store.connection  # type: ignore[attr-defined]
        revisions: dict[int, list[int]] = {}

        async def writer(n: int) -> None:
            won = await store.create(DURABLE, f"w.{n}", b"0")
            assert isinstance(won, Won)
            seen = [won.revision]
            for step in range(30):
                result = await store.update(DURABLE, f"w.{n}", b"%d" % step, seen[-1])
                assert isinstance(result, Won), result
                seen.append(result.revision)
            revisions[n] = seen

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for n in range(24):
                    nursery.start_soon(writer, n)
        assert connection._woken == 0
        for n, seen in revisions.items():
            assert seen == sorted(set(seen)), f"writer {n}: revisions not increasing: {seen}"
            entry = await store.get(DURABLE, f"w.{n}")
            assert entry is not None
            assert (entry.value, entry.revision) == (b"29", seen[-1])


async def test_a_held_write_goes_out_even_if_no_woken_requester_sends(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace) + "&timeout=3") as store:
        connection = store.connection  # type: ignore[attr-defined]
        # As if a requester woken by a reply had not run yet (and then never sent anything):
        # this write is held back, and only the writer task can send it.
        connection._woken += 1
        try:
            with trio.fail_after(2):
                won = await store.create(DURABLE, "held", b"v")
        finally:
            connection._woken -= 1
        assert isinstance(won, Won)
        entry = await store.get(DURABLE, "held")
        assert entry is not None
        assert entry.value == b"v"
