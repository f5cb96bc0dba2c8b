"""A read that fails never says "the operation may or may not have been applied".

An operator running a read-only command (``spate status``) was told its read "may or may not
have been applied", as if it could have changed something.
"""

from __future__ import annotations

from functools import partial

import httpx
import pytest
import trio

from spate import StoreUnavailable
from spate_stores import open_store
from spate_stores.etcd import _errors as etcd_errors
from spate_stores.nats import _errors as nats_errors

EP = "http://127.0.0.1:2379"


@pytest.mark.parametrize(
    "exc", [httpx.ReadError("reset"), httpx.ReadTimeout("slow")], ids=["broken", "timeout"]
)
def test_an_etcd_read_that_failed_says_it_changed_nothing(exc: Exception) -> None:
    read = etcd_errors.transport_error(EP, exc, doing="listing", read=True)
    assert isinstance(read, StoreUnavailable)
    assert "it changed nothing (a read); retry" in str(read)
    assert "may or may not" not in str(read)
    write = etcd_errors.transport_error(EP, exc, doing="updating 'k'")
    assert "may or may not have been applied" in str(write)


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.API.STREAM.INFO.KV_spate_durable_ns",
        "$JS.API.DIRECT.GET.KV_spate_durable_ns.$KV.spate_durable_ns.k",
        "$JS.API.STREAM.MSG.GET.KV_spate_durable_ns",
    ],
)
def test_a_nats_read_that_got_no_reply_says_it_changed_nothing(subject: str) -> None:
    url, write_subject = "nats://127.0.0.1:4222", "$KV.spate_durable_ns.k"
    for error in (
        nats_errors.reply_timeout(url, subject, 5),
        nats_errors.broke_while_waiting(url, OSError("reset"), subject),
        nats_errors.closed_while_waiting(url, subject),
    ):
        assert "it changed nothing (a read); retry" in str(error)
        assert "may or may not" not in str(error)
    for error in (
        nats_errors.reply_timeout(url, write_subject, 5),
        nats_errors.broke_while_waiting(url, OSError("reset"), write_subject),
        nats_errors.closed_while_waiting(url, write_subject),
    ):
        assert "may or may not have been applied" in str(error)


async def test_a_read_only_etcd_open_against_a_broken_server_says_nothing_was_changed() -> None:
    # A server that takes the connection and closes it at once: the range request breaks.
    async def slam(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, slam, 0, host="127.0.0.1"))
        (listener,) = listeners
        port = listener.socket.getsockname()[1]
        with pytest.raises(StoreUnavailable) as failed:
            async with open_store(f"etcd://127.0.0.1:{port}?timeout=2", read_only=True):
                pass
        nursery.cancel_scope.cancel()
    assert "it changed nothing (a read); retry" in str(failed.value)
    assert "may or may not" not in str(failed.value)
