"""Records written before a field existed still read; a field at its default is not written."""

from __future__ import annotations

import json

import pytest

from spate.records import (
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    UnreadableRecord,
    decode,
    encode,
)

OLD_PROGRESS = (
    b'{"schema":1,"id":"s","epoch":2,"status":"runnable","owner":"w","attempts":1,'
    b'"watermark":5,"state":"","completed":false,"written_at_ms":0}'
)
OLD_SPEC = b'{"schema":1,"id":"s","generation":1,"weight":3,"descriptor":"YWI="}'
OLD_PRESENCE = b'{"schema":1,"nonce":"n","max_in_flight":4}'


def test_records_written_before_the_new_fields_read_with_their_defaults() -> None:
    progress = decode(ProgressRecord, "k", OLD_PROGRESS, split="s")
    assert not progress.advanced  # charges a takeover, as before
    assert progress.attempts == 1
    assert decode(SpecRecord, "k", OLD_SPEC, split="s").locality == ""
    assert decode(PresenceRecord, "k", OLD_PRESENCE).locality == ""


def test_new_fields_at_their_default_are_left_out_so_the_bytes_do_not_change() -> None:
    assert encode(decode(ProgressRecord, "k", OLD_PROGRESS, split="s")) == OLD_PROGRESS
    assert encode(decode(SpecRecord, "k", OLD_SPEC, split="s")) == OLD_SPEC
    assert encode(decode(PresenceRecord, "k", OLD_PRESENCE)) == OLD_PRESENCE


def test_new_fields_round_trip() -> None:
    progress = ProgressRecord(id="s", watermark=3, advanced=True)
    assert json.loads(encode(progress))["advanced"] is True
    assert decode(ProgressRecord, "k", encode(progress), split="s") == progress
    spec = SpecRecord(id="s", locality="zone-b")
    assert decode(SpecRecord, "k", encode(spec), split="s") == spec
    presence = PresenceRecord(nonce="n", max_in_flight=2, locality="zone-a/rack-1")
    assert decode(PresenceRecord, "k", encode(presence)) == presence


def test_a_mistyped_new_field_is_unreadable() -> None:
    with pytest.raises(UnreadableRecord, match="PresenceRecord"):
        decode(PresenceRecord, "k", b'{"schema":1,"nonce":"n","max_in_flight":4,"locality":7}')
    with pytest.raises(UnreadableRecord, match="ProgressRecord"):
        decode(ProgressRecord, "k", OLD_PROGRESS[:-1] + b',"advanced":"yes"}', split="s")
