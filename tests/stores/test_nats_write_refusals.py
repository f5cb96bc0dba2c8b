"""How the NATS adapter reads JetStream's refusals of a conditional write (no server needed)."""

from __future__ import annotations

import json
import types

import pytest

from spate_stores.nats._jetstream import ApiError, JetStream, WrongLastSequence
from spate_stores.nats._protocol import Msg


class _OneReply:
    """A connection that answers every request with one canned JetStream reply."""

    def __init__(self, reply: dict[str, object]) -> None:
        self.options = types.SimpleNamespace(host="127.0.0.1", port=4222, url="nats://127.0.0.1")
        self.server_info: dict[str, object] = {}
        self._payload = json.dumps(reply).encode()

    async def request(self, subject: str, payload: bytes, headers: bytes | None = None) -> Msg:
        return Msg(subject="_INBOX.x", sid=1, reply=None, payload=self._payload)


def _refusal(err_code: int, description: str) -> dict[str, object]:
    return {"error": {"code": 400, "err_code": err_code, "description": description}}


@pytest.mark.parametrize(
    ("err_code", "description", "last"),
    [
        (10071, "wrong last sequence: 41", 41),
        # a clustered (R3) stream's leader reports the same conflict under its own code
        (10164, "wrong last sequence", None),
    ],
)
async def test_a_wrong_last_sequence_is_a_lost_compare_and_swap(
    err_code: int, description: str, last: int | None
) -> None:
    js = JetStream(_OneReply(_refusal(err_code, description)))  # type: ignore[arg-type]
    with pytest.raises(WrongLastSequence) as caught:
        await js.publish("$KV.b.k", b"v", b"NATS/1.0\r\n\r\n")
    assert caught.value.last == last


async def test_another_refusal_stays_an_error() -> None:
    js = JetStream(_OneReply(_refusal(10054, "maximum messages exceeded")))  # type: ignore[arg-type]
    with pytest.raises(ApiError) as caught:
        await js.publish("$KV.b.k", b"v")
    assert caught.value.err_code == 10054
