"""The gateway wire format, byte for byte, with no server: bodies, defaults, error replies.

The gateway ignores unknown fields and omits default values, so a typo in a body or a
missing default in a reader is a silent bug; these pin both to what etcd 3.4 and 3.5 send.
"""

from __future__ import annotations

import json

import pytest

from spate_stores.etcd._wire import (
    ErrorKind,
    EventKind,
    Kv,
    MalformedReply,
    b64,
    classify_error,
    delete_range,
    deleted_count,
    etcd_lease_grant,
    etcd_lease_id,
    etcd_lease_keepalive,
    etcd_lease_ttl,
    header_revision,
    parse_kvs,
    parse_stream_result,
    parse_watch_message,
    prefix_end,
    range_request,
    txn_create,
    txn_delete,
    txn_put_if,
    txn_succeeded,
    watch_create,
)

HEADER = {"cluster_id": "1", "member_id": "2", "revision": "14", "raft_term": "2"}


def test_bytes_fields_use_the_standard_base64_alphabet_with_padding() -> None:
    assert b64(b"\xfb\xff") == "+/8="
    assert b64(b"") == ""


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"dir/", b"dir0"), (b"a\xff", b"b"), (b"a\xff\xff", b"b"), (b"\xff", b"\x00")],
)
def test_prefix_end_is_the_prefix_with_its_last_byte_incremented(prefix: bytes, end: bytes) -> None:
    assert prefix_end(prefix) == end


def test_create_compares_create_revision_with_zero() -> None:
    assert txn_create(b"k", b"v") == {
        "compare": [{"key": "aw==", "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
        "success": [{"request_put": {"key": "aw==", "value": "dg=="}}],
    }


def test_an_ephemeral_put_names_its_lease() -> None:
    body = txn_create(b"k", b"v", etcd_lease=7587870000000000000)
    assert body["success"][0]["request_put"]["lease"] == "7587870000000000000"


def test_cas_compares_mod_revision() -> None:
    assert txn_put_if(b"k", b"v", 13) == {
        "compare": [{"key": "aw==", "target": "MOD", "result": "EQUAL", "mod_revision": "13"}],
        "success": [{"request_put": {"key": "aw==", "value": "dg=="}}],
    }


@pytest.mark.parametrize("expected", [0, -1])
def test_cas_refuses_revision_zero_which_matches_a_missing_key(expected: int) -> None:
    with pytest.raises(ValueError, match="revision > 0"):
        txn_put_if(b"k", b"v", expected)
    with pytest.raises(ValueError, match="revision > 0"):
        txn_delete(b"k", expected)


def test_guarded_delete_is_a_txn_with_a_delete_range() -> None:
    assert txn_delete(b"k", 5)["success"] == [{"request_delete_range": {"key": "aw=="}}]
    assert delete_range(b"k") == {"key": "aw=="}


def test_lease_fields_are_upper_case() -> None:
    assert etcd_lease_grant(5) == {"TTL": "5"}
    assert etcd_lease_keepalive(42) == {"ID": "42"}


def test_a_paged_range_pins_its_revision() -> None:
    assert range_request(b"a/", range_end=b"a0", limit=500, revision=9) == {
        "key": "YS8=",
        "range_end": "YTA=",
        "limit": "500",
        "revision": "9",
    }
    assert range_request(b"a") == {"key": "YQ=="}


def test_watch_create_starts_at_a_revision() -> None:
    assert watch_create(b"a/", b"a0", 15) == {
        "create_request": {"key": "YS8=", "range_end": "YTA=", "start_revision": "15"}
    }


def test_watch_create_without_range_end_watches_one_key() -> None:
    # etcd reads an absent range_end as "this key only"; an empty one would mean the same,
    # but a range_end of b"\x00" would mean every key after it.
    assert watch_create(b"a/k", None, 15) == {
        "create_request": {"key": "YS9r", "start_revision": "15"}
    }


def test_omitted_fields_read_as_protobuf_defaults() -> None:
    empty = {"header": HEADER}
    assert parse_kvs(empty) == ([], False)
    assert txn_succeeded(empty) is False
    assert deleted_count(empty) == 0
    assert etcd_lease_ttl({"header": HEADER, "ID": "5"}) == 0
    assert header_revision(empty) == 14
    kvs, more = parse_kvs(
        {"header": HEADER, "kvs": [{"key": "aw==", "mod_revision": "3"}], "more": True}
    )
    assert kvs == [Kv(b"k", b"", 3)]
    assert more


def test_grant_reply_fields() -> None:
    reply = {"header": HEADER, "ID": "2324035696679963693", "TTL": "5"}
    assert etcd_lease_id(reply) == 2324035696679963693
    assert etcd_lease_ttl(reply) == 5


def test_watch_messages_decode_with_defaults() -> None:
    created = parse_watch_message(json.dumps({"result": {"header": HEADER, "created": True}}))
    assert created.created
    assert not created.canceled
    assert created.events == ()
    events = parse_watch_message(
        json.dumps(
            {
                "result": {
                    "header": HEADER,
                    "events": [
                        {"kv": {"key": "aw==", "mod_revision": "12", "value": "dg=="}},
                        {"type": "DELETE", "kv": {"key": "aw==", "mod_revision": "13"}},
                    ],
                }
            }
        )
    )
    assert [(e.kind, e.kv) for e in events.events] == [
        (EventKind.PUT, Kv(b"k", b"v", 12)),
        (EventKind.DELETE, Kv(b"k", b"", 13)),
    ]


def test_a_compaction_cancel_carries_the_compact_revision() -> None:
    message = parse_watch_message(
        '{"result":{"header":{},"canceled":true,"compact_revision":"24"}}'
    )
    assert message.canceled
    assert message.compact_revision == 24


def test_an_in_stream_error_is_its_own_shape() -> None:
    message = parse_watch_message(
        '{"error":{"grpc_code":14,"http_code":503,"message":"transport is closing"}}'
    )
    assert message.error == "transport is closing"


@pytest.mark.parametrize("text", ["[]", '{"header":{}}', "{nope"])
def test_a_malformed_watch_message_is_rejected(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - json and MalformedReply are both ValueError
        parse_watch_message(text)


def test_keepalive_stream_lines_are_wrapped_in_result() -> None:
    assert parse_stream_result('{"result":{"ID":"5","TTL":"2"}}') == {"ID": "5", "TTL": "2"}
    with pytest.raises(MalformedReply):
        parse_stream_result('{"error":{"message":"boom"}}')


def _body(message: str, code: int) -> bytes:
    return json.dumps({"error": message, "code": code, "message": message}).encode()


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, _body("etcdserver: request is too large", 3), ErrorKind.TOO_LARGE),
        (429, _body("grpc: received message larger than max (2097253 vs. 2097152)", 8),
         ErrorKind.TOO_LARGE),
        (401, _body("etcdserver: invalid auth token", 16), ErrorKind.INVALID_TOKEN),
        (400, _body("etcdserver: authentication failed, invalid user ID or password", 3),
         ErrorKind.AUTH_FAILED),
        (400, _body("etcdserver: user name is empty", 3), ErrorKind.AUTH_REQUIRED),
        (412, _body("etcdserver: authentication is not enabled", 9), ErrorKind.AUTH_NOT_ENABLED),
        (403, _body("etcdserver: permission denied", 7), ErrorKind.PERMISSION_DENIED),
        (404, _body("etcdserver: requested lease not found", 5), ErrorKind.ETCD_LEASE_NOT_FOUND),
        (400, _body("etcdserver: mvcc: required revision has been compacted", 11),
         ErrorKind.COMPACTED),
        (503, _body("etcdserver: leader changed", 14), ErrorKind.UNAVAILABLE),
        (429, _body("etcdserver: too many requests", 8), ErrorKind.UNAVAILABLE),
        (400, _body("etcdserver: mvcc: required revision is a future revision", 11),
         ErrorKind.OTHER),
        (404, b"404 page not found\n", ErrorKind.NOT_GATEWAY),
        (405, b"Method Not Allowed\n", ErrorKind.NOT_GATEWAY),
        (502, b"bad gateway", ErrorKind.UNAVAILABLE),
        (400, b"CommonName of client sending a request against gateway will be ignored and not "
         b"used as expected\n", ErrorKind.CERT_COMMON_NAME),
    ],
)  # fmt: skip
def test_error_replies_are_classified_by_code_and_message(
    status: int, body: bytes, kind: ErrorKind
) -> None:
    assert classify_error(status, body).kind is kind
