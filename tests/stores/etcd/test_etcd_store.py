"""EtcdStore on a real etcd: what the conformance suite cannot see from outside.

Namespaces and the TTL record, the value limit against the server's request limit, the
session lease (revoked on close, lost and replaced, dead with its process), watches across
compaction, a restart and a frozen server, and errors naming the endpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from functools import partial

import pytest
import trio

from spate import StoreError, StoreUnavailable, ValueTooLarge
from spate._runtime.probe import probe_store
from spate.store import Conflict, Delete, Entry, Keyspace, Put, SnapshotDone, Swap, WatchEvent, Won
from spate_stores import open_store
from spate_stores.etcd import EtcdStore
from spate_stores.etcd import _watch as watch_module
from spate_testing.servers._ports import free_port
from spate_testing.servers.etcd import EtcdServer, etcd_server

pytestmark = pytest.mark.etcd

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL
TTL = 2


def store(server: EtcdServer, namespace: str, **params: str) -> EtcdStore:
    ttl = params.pop("ttl", str(TTL))
    return EtcdStore.from_url(
        server.store_url(namespace, ttl=float(ttl), credentials=True, **params)
    )


async def next_event(events: object, within: float = 10.0) -> WatchEvent:
    with trio.fail_after(within):
        return await events.__anext__()  # type: ignore[attr-defined,no-any-return]


# -- namespaces and the TTL record ---------------------------------------------------------


async def test_namespaces_never_see_each_other(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    names = [namespace, f"{namespace}/b", f"{namespace}b"]
    async with (
        store(etcd_session_server, names[0]) as a,
        store(etcd_session_server, names[1]) as b,
        store(etcd_session_server, names[2]) as c,
    ):
        for client, name in zip((a, b, c), names, strict=True):
            for keyspace in Keyspace:
                assert isinstance(await client.create(keyspace, "k", name.encode()), Won)
        for client, name in zip((a, b, c), names, strict=True):
            for keyspace in Keyspace:
                assert [(e.key, e.value) for e in await client.list(keyspace, "")] == [
                    ("k", name.encode())
                ]
            async with client.watch(DURABLE, "") as events:
                first = await next_event(events)
                assert isinstance(first, Put)
                assert first.entry.value == name.encode()
                assert await next_event(events) == SnapshotDone()


async def test_the_same_key_in_both_keyspaces_is_two_entries(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as client:
        durable = await client.create(DURABLE, "k", b"d")
        ephemeral = await client.create(EPHEMERAL, "k", b"e")
        assert isinstance(durable, Won)
        assert isinstance(ephemeral, Won)
        assert await client.delete(EPHEMERAL, "k", durable.revision) == Conflict()
        assert await client.get(DURABLE, "k") == Entry("k", b"d", durable.revision)


async def test_a_namespace_keeps_its_first_ttl(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace, ttl="4") as first:
        assert first.ephemeral_ttl == 4
    with pytest.raises(StoreError, match="already uses an ephemeral TTL of 4 s, not 6 s"):
        async with store(etcd_session_server, namespace, ttl="6"):
            pass
    async with open_store(etcd_session_server.store_url(namespace)) as adopted:
        assert adopted.ephemeral_ttl == 4


async def test_a_new_namespace_without_ttl_gets_the_default(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with open_store(etcd_session_server.store_url(namespace)) as client:
        assert client.ephemeral_ttl == 30


# -- values and limits ---------------------------------------------------------------------


async def test_a_value_of_exactly_max_value_size_fits_with_the_longest_key(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    long_namespace = (namespace + "-" + "n" * 200)[:200]
    key = "k" * 512
    async with store(etcd_session_server, long_namespace) as client:
        limit = client.capabilities.max_value_size
        for keyspace in Keyspace:
            won = await client.create(keyspace, key, b"x" * limit)
            assert isinstance(won, Won)
            again = await client.update(keyspace, key, b"y" * limit, won.revision)
            assert isinstance(again, Won)
            with pytest.raises(ValueTooLarge) as info:
                await client.update(keyspace, key, b"z" * (limit + 1), again.revision)
            assert info.value.limit == limit
            entry = await client.get(keyspace, key)
            assert entry is not None
            assert entry.value == b"y" * limit


async def test_a_server_with_a_smaller_request_limit_is_a_clear_error() -> None:
    async with etcd_server(extra_args=["--max-request-bytes=100000"]) as server:
        async with store(server, "small") as client:
            with pytest.raises(StoreError, match="max_request_bytes") as info:
                await client.create(DURABLE, "big", b"x" * 200_000)
            assert not isinstance(info.value, ValueTooLarge)
        async with store(server, "small", max_request_bytes="100000") as client:
            with pytest.raises(ValueTooLarge):
                await client.create(DURABLE, "big", b"x" * 200_000)
            assert isinstance(await client.create(DURABLE, "fits", b"x" * 90_000), Won)


# -- errors ---------------------------------------------------------------------------------


async def test_an_unreachable_server_is_store_unavailable_naming_the_endpoint() -> None:
    port = free_port()
    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
        async with open_store(f"etcd://127.0.0.1:{port}/ns?ttl=2&timeout=1"):
            pass


async def test_a_server_that_is_not_an_etcd_gateway_is_a_store_error() -> None:
    async def not_etcd(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        await stream.send_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\nContent-Type: text/plain\r\n\r\n"
            b"404 page not found\n"
        )

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), not_etcd, 0)
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(StoreError, match="does not answer like an etcd v3 JSON gateway"):
            async with open_store(f"etcd://127.0.0.1:{port}?ttl=2"):
                pass
        nursery.cancel_scope.cancel()


async def test_a_closed_store_refuses_calls(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    client = store(etcd_session_server, namespace)
    with pytest.raises(StoreError, match="not open yet"):
        await client.get(DURABLE, "k")
    async with client:
        pass
    with pytest.raises(StoreError, match="closed"):
        await client.get(DURABLE, "k")


# -- the session lease ------------------------------------------------------------------------


async def test_closing_a_client_revokes_its_session_at_once(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as observer:
        async with store(etcd_session_server, namespace) as writer:
            assert isinstance(await writer.create(EPHEMERAL, "lease", b"v"), Won)
        # No TTL wait: the revoke deleted the key before the writer's close returned.
        assert await observer.get(EPHEMERAL, "lease") is None


async def test_a_write_on_a_revoked_lease_retries_on_a_new_one(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as client:
        assert isinstance(await client.create(EPHEMERAL, "first", b"1"), Won)
        lost = client.lease_id
        assert lost is not None
        await etcd_session_server.call("/v3/lease/revoke", {"ID": str(lost)})
        assert await client.get(EPHEMERAL, "first") is None
        assert isinstance(await client.create(EPHEMERAL, "second", b"2"), Won)
        assert client.lease_id not in (None, lost)
        assert client.lease_losses == 1
        # The new lease is kept alive like the first one was.
        await trio.sleep(TTL * 1.5)
        assert await client.get(EPHEMERAL, "second") is not None


async def test_keepalive_notices_a_lost_lease_without_any_write(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as client:
        assert isinstance(await client.create(EPHEMERAL, "k", b"1"), Won)
        lost = client.lease_id
        await etcd_session_server.call("/v3/lease/revoke", {"ID": str(lost)})
        # The next keepalive is due within a third of the TTL; its answer has no TTL.
        await trio.sleep(TTL / 3 + 0.5)
        assert client.lease_id is None
        assert client.lease_losses == 1


_DYING_WRITER = textwrap.dedent(
    """
    import sys, trio
    from spate.store import Keyspace
    from spate_stores import open_store

    async def main():
        async with open_store(sys.argv[1]) as store:
            await store.create(Keyspace.EPHEMERAL, "lease", b"held")
            print("ready", flush=True)
            await trio.sleep_forever()

    trio.run(main)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
async def test_a_killed_writers_keys_are_deleted_within_the_ttl_and_watchers_told(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    url = etcd_session_server.store_url(namespace, ttl=TTL)
    async with store(etcd_session_server, namespace) as observer:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", _DYING_WRITER, url], stdout=subprocess.PIPE
        )
        try:
            assert process.stdout is not None
            output = b""
            with trio.fail_after(20):
                while b"\n" not in output:
                    chunk = await process.stdout.receive_some()
                    assert chunk, "the writer process exited before it was ready"
                    output += chunk
            assert output.startswith(b"ready")
            async with observer.watch(EPHEMERAL, "") as events:
                assert isinstance(await next_event(events), Put)
                assert await next_event(events) == SnapshotDone()
                os.kill(process.pid, signal.SIGKILL)
                killed = trio.current_time()
                deleted = await next_event(events, within=TTL + observer.capabilities.expiry_slack)
                assert isinstance(deleted, Delete)
                assert deleted.key == "lease"
                assert trio.current_time() - killed <= TTL + observer.capabilities.expiry_slack
        finally:
            process.kill()
            await process.wait()


# -- watches that break ----------------------------------------------------------------------


async def test_a_watch_behind_compaction_raises_and_a_rewatch_sees_every_write(
    etcd_session_server: EtcdServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with store(etcd_session_server, namespace) as client:
        assert isinstance(await client.create(DURABLE, "a", b"1"), Won)
        listed = client._range_all

        async def list_then_race(keyspace: Keyspace, prefix: str) -> tuple[list[Entry], int]:
            # Writes and a compaction land between the listing and the watch's start.
            result = await listed(keyspace, prefix)
            await client.create(DURABLE, "b", b"2")
            await client.delete(DURABLE, "a")
            await trio.to_thread.run_sync(etcd_session_server.compact_sync)
            return result

        monkeypatch.setattr(client, "_range_all", list_then_race)
        seen: list[WatchEvent] = []

        async def watch_until_it_breaks() -> None:
            async with client.watch(DURABLE, "") as events:
                async for event in events:
                    seen.append(event)

        with pytest.raises(StoreUnavailable, match="compact"):
            await watch_until_it_breaks()
        assert [type(e) for e in seen] in ([], [Put, SnapshotDone])
        monkeypatch.undo()
        async with client.watch(DURABLE, "") as events:
            first = await next_event(events)
            assert isinstance(first, Put)
            assert (first.entry.key, first.entry.value) == ("b", b"2")
            assert await next_event(events) == SnapshotDone()


# -- paged listings ---------------------------------------------------------------------------


async def test_a_paged_listing_is_one_snapshot_in_range_requests_of_page_size(
    etcd_session_server: EtcdServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with store(etcd_session_server, namespace) as client:
        for key in ("b", "c", "d", "e", "f"):
            assert isinstance(await client.create(DURABLE, key, b"old"), Won)
        listed = await client.list(DURABLE, "")
        ranges: list[dict[str, object]] = []
        call = client._gateway.call

        async def recording(path: str, body: dict[str, object], *, doing: str) -> object:
            if path == "/v3/kv/range" and doing == "listing":
                ranges.append(body)
            return await call(path, body, doing=doing)

        monkeypatch.setattr(client._gateway, "call", recording)
        pages = []
        async with client.list_pages(DURABLE, "", page_size=2) as iterator:
            async for page in iterator:
                pages.append(page)
                # Writes between pages: none shows, every page reads the first one's revision.
                await client.create(DURABLE, "a", b"new")
                await client.delete(DURABLE, "f")
                entry = await client.get(DURABLE, "d")
                if entry is not None and entry.value == b"old":
                    await client.update(DURABLE, "d", b"new", entry.revision)
        assert pages == [listed[0:2], listed[2:4], listed[4:5]]
        assert [body["limit"] for body in ranges] == ["2", "2", "2"]
        pinned = {body.get("revision") for body in ranges[1:]}
        assert "revision" not in ranges[0]
        assert len(pinned) == 1
        assert None not in pinned

        # A full last page is the last: etcd says no `more`, so no request follows it.
        ranges.clear()
        async with client.list_pages(DURABLE, "", page_size=5) as iterator:
            sizes = [len(page) async for page in iterator]
        assert sizes == [5]  # a b c d e
        assert len(ranges) == 1


async def test_compaction_during_a_paged_listing_raises_and_says_list_again(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as client:
        for key in ("a", "b", "c"):
            assert isinstance(await client.create(DURABLE, key, b"v"), Won)
        taken = []

        async def list_while_compacting() -> None:
            async with client.list_pages(DURABLE, "", page_size=1) as pages:
                async for page in pages:
                    taken.append(page)
                    # Compact past the listing's revision before its next page.
                    await client.create(DURABLE, f"later-{len(taken)}", b"v")
                    await trio.to_thread.run_sync(etcd_session_server.compact_sync)

        with pytest.raises(StoreUnavailable, match="list again") as info:
            await list_while_compacting()
        assert len(taken) == 1
        assert "after 1 pages were handed out" in str(info.value)
        # A new listing starts from now and completes.
        async with client.list_pages(DURABLE, "", page_size=2) as pages:
            keys = [entry.key async for page in pages for entry in page]
        assert keys == ["a", "b", "c", "later-1"]


class Follower:
    """A caller that folds a prefix's watch into a view, re-watching whenever it breaks."""

    def __init__(self, client: EtcdStore) -> None:
        self.client = client
        self.view: dict[str, Entry] = {}
        self.breaks = 0
        self.changed = trio.Event()

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except StoreUnavailable:
                self.breaks += 1
                await trio.sleep(0.1)

    async def _follow(self) -> None:
        async with self.client.watch(DURABLE, "") as events:
            snapshot: dict[str, Entry] | None = {}
            async for event in events:
                if isinstance(event, SnapshotDone):
                    self.view, snapshot = snapshot or {}, None
                elif snapshot is not None:
                    assert isinstance(event, Put)
                    snapshot[event.entry.key] = event.entry
                elif isinstance(event, Put):
                    # A live event never repeats (or goes back to) a revision already seen.
                    previous = self.view.get(event.entry.key)
                    assert previous is None or previous.revision < event.entry.revision
                    self.view[event.entry.key] = event.entry
                else:
                    assert isinstance(event, Delete)
                    assert self.view.pop(event.key).revision < event.revision
                self.changed.set()
                self.changed = trio.Event()

    async def wait_for(self, expected: dict[str, bytes], within: float = 20.0) -> None:
        with trio.fail_after(within):
            while {k: e.value for k, e in self.view.items()} != expected:
                await self.changed.wait()


async def test_a_watch_survives_a_server_restart_through_a_rewatch(
    etcd_fresh_server: EtcdServer,
) -> None:
    server = etcd_fresh_server
    async with store(server, "restart") as client:
        assert isinstance(await client.create(DURABLE, "a", b"1"), Won)
        assert isinstance(await client.create(DURABLE, "b", b"2"), Won)
        follower = Follower(client)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follower.run)
            await follower.wait_for({"a": b"1", "b": b"2"})
            await server.restart()
            with trio.fail_after(20):
                while True:
                    try:
                        await client.create(DURABLE, "c", b"3")
                        await client.delete(DURABLE, "a")
                        break
                    except StoreUnavailable:
                        await trio.sleep(0.1)
            await follower.wait_for({"b": b"2", "c": b"3"})
            assert follower.breaks >= 1
            assert follower.view == {e.key: e for e in await client.list(DURABLE, "")}
            nursery.cancel_scope.cancel()


async def test_a_quiet_watch_answers_progress_probes_and_stays_open(
    etcd_session_server: EtcdServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "IDLE_PROBE", 0.2)
    async with (
        store(etcd_session_server, namespace, timeout="0.5") as client,
        client.watch(DURABLE, "") as events,
    ):
        assert await next_event(events) == SnapshotDone()
        # An unanswered probe would break the watch 0.7 s into this quiet spell.
        with trio.move_on_after(2) as quiet:
            await events.__anext__()  # several probes go out and are answered meanwhile
        assert quiet.cancelled_caught
        won = await client.create(DURABLE, "k", b"v")
        assert isinstance(won, Won)
        event = await next_event(events)
        assert isinstance(event, Put)
        assert event.entry.revision == won.revision


async def test_a_frozen_server_breaks_calls_and_watches_with_store_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if sys.platform == "win32":
        pytest.skip("needs SIGSTOP")
    monkeypatch.setattr(watch_module, "IDLE_PROBE", 0.3)
    async with etcd_server() as server, store(server, "frozen", timeout="1") as client:
        async with client.watch(DURABLE, "") as events:
            assert await next_event(events) == SnapshotDone()
            server.pause_sync()
            try:
                with pytest.raises(StoreUnavailable, match=f"{server.client_port}.*in time"):
                    await client.get(DURABLE, "k")
                with pytest.raises(StoreUnavailable, match="went silent"):
                    await next_event(events)
            finally:
                server.resume_sync()
        await probe_store(client)


async def test_a_store_shared_by_many_tasks_keeps_cas_exact(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with store(etcd_session_server, namespace) as client:
        won = await client.create(DURABLE, "counter", b"0")
        assert isinstance(won, Won)
        wins: list[int] = []

        async def bump(worker: int) -> None:
            for _ in range(20):
                entry = await client.get(DURABLE, "counter")
                assert entry is not None
                result = await client.update(
                    DURABLE, "counter", b"%d" % (int(entry.value) + 1), entry.revision
                )
                if isinstance(result, Won):
                    wins.append(result.revision)

        async with trio.open_nursery() as nursery:
            for worker in range(8):
                nursery.start_soon(bump, worker)
        final = await client.get(DURABLE, "counter")
        assert final is not None
        assert int(final.value) == len(wins) == len(set(wins))


# -- compare-and-swaps sent together ----------------------------------------------------------


async def test_more_swaps_than_one_txn_carries_go_in_several(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    # etcd refuses a txn of more than --max-txn-ops (128) operations: 130 swaps, one of them
    # with the largest value the store takes, go in txns of at most max_batch, and all land.
    async with store(etcd_session_server, namespace) as client:
        revisions = {}
        for n in range(130):
            won = await client.create(DURABLE, f"k{n:03d}", b"v0")
            assert isinstance(won, Won)
            revisions[f"k{n:03d}"] = won.revision
        big = b"x" * client.capabilities.max_value_size
        swaps = [Swap(key, big if key == "k000" else b"v1", rev) for key, rev in revisions.items()]
        results = await client.write_many(swaps)
        assert all(isinstance(r, Won) for r in results), [
            r for r in results if not isinstance(r, Won)
        ]
        # One revision per txn: at least three (130 swaps, at most 64 a txn).
        assert len({r.revision for r in results if isinstance(r, Won)}) >= 3
        entry = await client.get(DURABLE, "k129")
        assert entry is not None
        assert entry.value == b"v1"
