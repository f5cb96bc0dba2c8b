"""The sans-IO NATS protocol core, byte for byte, on wire captures from nats-server 2.9-2.15."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spate_stores.nats._protocol import (
    Err,
    Event,
    Headers,
    Info,
    Msg,
    Ok,
    Parser,
    Ping,
    Pong,
    ProtocolError,
    encode_connect,
    encode_headers,
    encode_ping,
    encode_pong,
    encode_pub,
    encode_sub,
    encode_unsub,
    parse_headers,
)

# Captured from real servers (see docs/stores/nats.md); note the space before CRLF after INFO,
# the double space of 2.9's MSG without reply, and several operations in one chunk.
INFO_2_15 = (
    b'INFO {"server_id":"NA3O","version":"2.15.1","proto":1,"headers":true,'
    b'"max_payload":1048576,"jetstream":true} \r\n'
)
PUB_ACK_2_9 = b'MSG _I.r 1  26\r\n{"stream":"KV_t", "seq":1}\r\n'
NO_RESPONDERS = b"HMSG _I.r 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
NOT_FOUND = b"HMSG _I.r 1 34 34\r\nNATS/1.0 404 Message Not Found\r\n\r\n\r\n"
DIRECT_GET = (
    b"HMSG _I.r 1  140 140\r\nNATS/1.0\r\nKV-Operation: DEL\r\nNats-Stream: KV_t\r\n"
    b"Nats-Subject: $KV.t.k1\r\nNats-Sequence: 2\r\n"
    b"Nats-Time-Stamp: 2026-11-29T12:31:36.04714978Z\r\n\r\n\r\n"
)
DELIVERY = b"MSG $KV.t.k1 2 $JS.ACK.KV_t.9XgXoGbE.1.1.1.1795955458217786203.1 2\r\nv1\r\n"
MARKER = (
    b"HMSG $KV.t.k1 2 $JS.ACK.KV_t.9XgXoGbE.1.4.3.1795955460469434053.0 72 72\r\n"
    b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n\r\n"
)
HEARTBEAT = (
    b"HMSG _D.1 2 75 75\r\nNATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 4\r\n"
    b"Nats-Last-Stream: 5\r\n\r\n\r\n"
)
FLOW_CONTROL = (
    b"HMSG _D.1 2 $JS.FC.KV_t.abc.1 36 36\r\nNATS/1.0 100 FlowControl Request\r\n\r\n\r\n"
)
CONVERSATION = (
    INFO_2_15
    + b"PING\r\n"
    + PUB_ACK_2_9
    + NO_RESPONDERS
    + NOT_FOUND
    + DIRECT_GET
    + DELIVERY
    + MARKER
    + HEARTBEAT
    + FLOW_CONTROL
    + b"PONG\r\n+OK\r\n-ERR 'Invalid Subject'\r\n"
)


def parse_all(*chunks: bytes) -> list[Event]:
    parser = Parser()
    events: list[Event] = []
    for chunk in chunks:
        events += parser.receive_data(chunk)
    assert parser.buffered == 0
    return events


def test_info_is_parsed_with_its_trailing_space() -> None:
    [event] = parse_all(INFO_2_15)
    assert isinstance(event, Info)
    assert event.data["version"] == "2.15.1"
    assert event.data["max_payload"] == 1048576


def test_msg_with_double_space_and_no_reply() -> None:
    assert parse_all(PUB_ACK_2_9) == [Msg("_I.r", 1, None, b'{"stream":"KV_t", "seq":1}', None)]


def test_msg_with_reply_subject() -> None:
    [msg] = parse_all(DELIVERY)
    assert msg == Msg(
        "$KV.t.k1", 2, "$JS.ACK.KV_t.9XgXoGbE.1.1.1.1795955458217786203.1", b"v1", None
    )


def test_no_responders_status() -> None:
    [msg] = parse_all(NO_RESPONDERS)
    assert isinstance(msg, Msg)
    assert msg.status == 503
    assert msg.payload == b""
    assert msg.headers == Headers((), 503, "")


def test_status_with_description() -> None:
    [msg] = parse_all(NOT_FOUND)
    assert isinstance(msg, Msg)
    assert msg.headers is not None
    assert (msg.status, msg.headers.description) == (404, "Message Not Found")


def test_headers_keep_order_and_lookup_is_case_insensitive() -> None:
    [msg] = parse_all(DIRECT_GET)
    assert isinstance(msg, Msg)
    assert msg.headers is not None
    assert msg.status is None
    assert msg.headers.items[0] == ("KV-Operation", "DEL")
    assert msg.headers.get("nats-sequence") == "2"
    assert msg.headers.get("Missing") is None


def test_heartbeat_and_flow_control() -> None:
    heartbeat, flow = parse_all(HEARTBEAT + FLOW_CONTROL)
    assert isinstance(heartbeat, Msg)
    assert heartbeat.headers is not None
    assert heartbeat.headers.description == "Idle Heartbeat"
    assert heartbeat.headers.get("Nats-Last-Consumer") == "4"
    assert isinstance(flow, Msg)
    assert flow.headers is not None
    assert (flow.status, flow.reply) == (100, "$JS.FC.KV_t.abc.1")


def test_control_operations() -> None:
    assert parse_all(b"PING\r\nPONG\r\n+OK\r\n") == [Ping(), Pong(), Ok()]


def test_errors_distinguish_fatal_from_recoverable() -> None:
    assert parse_all(
        b"-ERR 'Invalid Subject'\r\n"
        b"-ERR 'Permissions Violation for Publish to \"$KV.x.y\"'\r\n"
        b"-ERR 'Maximum Payload Violation'\r\n"
        b"-ERR 'Authorization Violation'\r\n"
    ) == [
        Err("Invalid Subject", fatal=False),
        Err('Permissions Violation for Publish to "$KV.x.y"', fatal=False),
        Err("Maximum Payload Violation", fatal=True),
        Err("Authorization Violation", fatal=True),
    ]


def test_operations_are_case_insensitive_and_tolerate_tabs() -> None:
    assert parse_all(b"ping\r\nmsg\tsub\t 7 \t3\r\nabc\r\n") == [
        Ping(),
        Msg("sub", 7, None, b"abc"),
    ]


def test_payload_may_contain_crlf_and_protocol_words() -> None:
    payload = b"PING\r\nMSG x 1 2\r\n"
    [msg] = parse_all(b"MSG s 1 %d\r\n" % len(payload) + payload + b"\r\n")
    assert isinstance(msg, Msg)
    assert msg.payload == payload


def test_byte_at_a_time_parses_the_same() -> None:
    assert parse_all(*[CONVERSATION[i : i + 1] for i in range(len(CONVERSATION))]) == parse_all(
        CONVERSATION
    )


def test_partial_operation_is_buffered_until_complete() -> None:
    parser = Parser()
    assert parser.receive_data(DELIVERY[:-3]) == []
    assert parser.buffered > 0
    assert len(parser.receive_data(DELIVERY[-3:])) == 1
    assert parser.buffered == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"HELLO world\r\n",
        b"MSG subject\r\n",
        b"MSG s x 3\r\nabc\r\n",
        b"MSG s 1 3\r\nabcd\r\n",
        b"HMSG s 1 9 3\r\nNATS/1.0\r\n\r\n",
        b"HMSG s 1 6 6\r\nHTTP/1\r\n\r\n",
        b"HMSG s 1 22 22\r\nNATS/1.0\r\nno-colon\r\n\r\n\r\n",
        b"INFO {not json}\r\n",
        b"INFO [1, 2]\r\n",
        b"\r\n",
        b"MSG \xff 1 0\r\n\r\n",
        b"GET / HTTP/1.1\r\n",
        b"x" * 70_000,
    ],
)
def test_garbage_is_a_protocol_error(garbage: bytes) -> None:
    parser = Parser()
    with pytest.raises(ProtocolError):
        parser.receive_data(garbage)
    with pytest.raises(ProtocolError):
        parser.receive_data(b"PING\r\n")  # a failed parser stays failed


def test_message_size_is_bounded() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        Parser().receive_data(b"MSG s 1 999999999999\r\n")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CONVERSATION)), max_size=30))
def test_any_chunking_parses_to_the_same_events(cuts: list[int]) -> None:
    bounds = sorted({0, len(CONVERSATION), *cuts})
    chunks = [CONVERSATION[a:b] for a, b in itertools.pairwise(bounds)]
    assert parse_all(*chunks) == parse_all(CONVERSATION)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=8))
def test_arbitrary_bytes_give_events_or_protocol_error_only(data: bytes, cuts: list[int]) -> None:
    parser = Parser()
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    try:
        for a, b in itertools.pairwise(bounds):
            parser.receive_data(data[a:b])
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    subject=st.from_regex(r"[A-Za-z0-9_$.>*-]{1,40}", fullmatch=True),
    reply=st.none() | st.from_regex(r"[A-Za-z0-9_.]{1,30}", fullmatch=True),
    payload=st.binary(max_size=200),
    headers=st.none()
    | st.lists(
        st.tuples(
            st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True),
            st.from_regex(r"[ -~]{0,30}", fullmatch=True).map(str.strip),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_published_messages_parse_back_as_delivered(
    subject: str, reply: str | None, payload: bytes, headers: list[tuple[str, str]] | None
) -> None:
    """What we encode as PUB/HPUB, echoed back as MSG/HMSG by a server, parses to itself."""
    block = encode_headers(headers) if headers else None
    wire = encode_pub(subject, payload, reply=reply, headers=block)
    # A server turns "PUB subj [reply] n" into "MSG subj sid [reply] n": same framing.
    op, _, rest = wire.partition(b" ")
    delivered = (b"HMSG " if op == b"HPUB" else b"MSG ") + rest.replace(
        subject.encode(), subject.encode() + b" 9", 1
    )
    [msg] = parse_all(delivered)
    assert msg == Msg(subject, 9, reply, payload, Headers(tuple(headers)) if headers else None)


def test_encoders_are_byte_exact() -> None:
    assert encode_ping() == b"PING\r\n"
    assert encode_pong() == b"PONG\r\n"
    assert encode_sub("_INBOX.x.*", 1) == b"SUB _INBOX.x.* 1\r\n"
    assert encode_sub("jobs", 4, queue="workers") == b"SUB jobs workers 4\r\n"
    assert encode_unsub(3) == b"UNSUB 3\r\n"
    assert encode_unsub(3, max_messages=1) == b"UNSUB 3 1\r\n"
    assert encode_pub("$KV.b.k1", b"v1", reply="_I.r") == b"PUB $KV.b.k1 _I.r 2\r\nv1\r\n"
    assert encode_pub("$JS.FC.x", b"") == b"PUB $JS.FC.x 0\r\n\r\n"
    headers = encode_headers([("Nats-Expected-Last-Subject-Sequence", "0")])
    assert headers == b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 0\r\n\r\n"
    assert encode_pub("$KV.b.k", b"v", reply="_I.1", headers=headers) == (
        b"HPUB $KV.b.k _I.1 52 53\r\n"
        b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 0\r\n\r\nv\r\n"
    )
    assert encode_connect({"verbose": False, "headers": True}) == (
        b'CONNECT {"verbose":false,"headers":true}\r\n'
    )


def test_encoders_refuse_what_would_corrupt_the_stream() -> None:
    with pytest.raises(ValueError, match="whitespace"):
        encode_pub("a b", b"")
    with pytest.raises(ValueError, match="whitespace"):
        encode_sub("", 1)
    with pytest.raises(ValueError, match="invalid header"):
        encode_headers([("Bad: name", "v")])
    with pytest.raises(ValueError, match="invalid header"):
        encode_headers([("Name", "line\r\nbreak")])


def test_status_header_blocks_round_trip() -> None:
    block = encode_headers([("Nats-Last-Consumer", "4")], status=100, description="Idle Heartbeat")
    assert parse_headers(block) == Headers((("Nats-Last-Consumer", "4"),), 100, "Idle Heartbeat")
