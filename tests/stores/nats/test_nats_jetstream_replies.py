"""How a conditional publish's refusals map onto the contract (no server: canned replies)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from spate import StoreUnavailable
from spate_stores.nats._jetstream import ApiError, JetStream, WrongLastSequence, expect_sequence
from spate_stores.nats._protocol import Msg


@attrs.define
class _Options:
    host: str = "127.0.0.1"
    port: int = 4222
    url: str = "nats://127.0.0.1:4222"


@attrs.define
class _Replies:
    """Stands in for a NatsConnection: answers every request with one canned JSON reply."""

    reply: dict[str, Any]
    options: _Options = attrs.Factory(_Options)
    server_info: dict[str, Any] = attrs.Factory(dict)

    async def request(self, subject: str, payload: bytes, *, headers: bytes | None) -> Msg:
        return Msg("_INBOX.x", 1, None, json.dumps(self.reply).encode())


def _refusal(code: int, err_code: int, description: str) -> dict[str, Any]:
    return {
        "type": "io.nats.jetstream.api.v1.pub_ack",
        "error": {"code": code, "err_code": err_code, "description": description},
    }


async def _publish(reply: dict[str, Any]) -> int:
    js = JetStream(_Replies(reply))  # type: ignore[arg-type]
    return await js.publish("$KV.b.k", b"v", expect_sequence(7))


async def test_a_plain_ack_is_the_new_sequence() -> None:
    assert await _publish({"stream": "KV_b", "seq": 8, "domain": "d"}) == 8


async def test_wrong_last_sequence_with_a_number_is_a_lost_race() -> None:
    with pytest.raises(WrongLastSequence) as caught:
        await _publish(_refusal(400, 10071, "wrong last sequence: 9"))
    assert caught.value.last == 9


async def test_wrong_last_sequence_while_another_write_is_in_flight_is_transient() -> None:
    # A clustered stream's leader says this (err_code 10164, no number) when another write
    # to the key is still being replicated, e.g. two workers electing themselves just after
    # a new stream leader took over. It is neither a lost race yet (that write may be this
    # client's own earlier attempt) nor a permanent refusal: retry.
    with pytest.raises(StoreUnavailable, match="still being replicated"):
        await _publish(_refusal(400, 10164, "wrong last sequence"))


async def test_other_refusals_stay_refusals() -> None:
    with pytest.raises(ApiError) as caught:
        await _publish(_refusal(400, 10054, "maximum messages per subject exceeded"))
    assert caught.value.err_code == 10054
