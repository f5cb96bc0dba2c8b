"""The direct encode/decode of spec and progress records gives exactly what the converter gives.

A plan writes, and a join reads, one spec and one progress record per split, so both records
have a hand-written path beside the general (cattrs) one. These properties pin the two
together: the same bytes out, the same record (or the same error) back.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spate._core import records
from spate._core.records import ProgressRecord, SpecRecord, Status, UnreadableRecord, decode, encode

texts = st.text(max_size=12)  # any code point: escapes, non-ASCII, surrogates
ints = st.integers(min_value=-(2**70), max_value=2**70)

progress_records = st.builds(
    ProgressRecord,
    id=texts,
    epoch=ints,
    status=st.sampled_from(Status),
    owner=st.none() | texts,
    attempts=ints,
    watermark=st.none() | ints,
    state=st.binary(max_size=16),
    completed=st.booleans(),
    written_at_ms=ints,
    advanced=st.booleans(),
    owner_nonce=texts,
)
spec_records = st.builds(
    SpecRecord,
    id=texts,
    generation=ints,
    weight=ints,
    descriptor=st.binary(max_size=16),
    locality=texts,
)
PROGRESS_KEYS = [f.name for f in attrs.fields(ProgressRecord)] + ["extra"]
# Values of any JSON type, for fields that must reject the wrong one.
json_values = st.none() | st.booleans() | ints | st.floats(allow_nan=False) | texts


def outcome_of(cls: type[Any], data: bytes, split: str | None, *, general: bool) -> object:
    """The record read, or the problem reported (so two paths can be compared)."""
    try:
        if general:
            return records._decode_general(cls, "k", data, split=split)
        return decode(cls, "k", data, split=split)
    except UnreadableRecord as exc:
        return ("unreadable", exc.problem)


@given(progress_records)
def test_a_progress_record_encodes_to_the_converters_bytes_and_reads_back(
    record: ProgressRecord,
) -> None:
    data = encode(record)
    assert data == records._encode_general(record)
    assert decode(ProgressRecord, "k", data, split=record.id) == record
    assert records._fast_decode_progress(data, record.id) == record  # not the fallback


@given(spec_records)
def test_a_spec_record_encodes_to_the_converters_bytes_and_reads_back(record: SpecRecord) -> None:
    data = encode(record)
    assert data == records._encode_general(record)
    assert decode(SpecRecord, "k", data, split=record.id) == record
    assert records._fast_decode_spec(data, record.id) == record


@given(
    st.dictionaries(
        st.sampled_from(PROGRESS_KEYS),
        json_values | st.sampled_from(["runnable", "completed", "quarantined", "s", 2]),
    ),
    st.binary(max_size=8),
    st.none() | st.just("s"),
)
def test_any_progress_header_reads_as_the_converter_reads_it(
    header: dict[str, Any], state: bytes, split: str | None
) -> None:
    framed = (
        b'{"schema":2,' + json.dumps(header, separators=(",", ":")).encode()[1:] + b"\n" + state
    )
    for data in (framed, json.dumps(header).encode()):
        fast = outcome_of(ProgressRecord, data, split, general=False)
        assert fast == outcome_of(ProgressRecord, data, split, general=True)


@given(
    st.dictionaries(
        st.sampled_from(
            ["schema", "id", "generation", "weight", "descriptor", "locality", "extra"]
        ),
        json_values | st.sampled_from([1, "s", "YWI=", "YWI", "!!"]),
    ),
    st.none() | st.just("s"),
)
def test_any_spec_reads_as_the_converter_reads_it(
    header: dict[str, Any], split: str | None
) -> None:
    for data in (json.dumps(header, separators=(",", ":")).encode(), json.dumps(header).encode()):
        fast = outcome_of(SpecRecord, data, split, general=False)
        assert fast == outcome_of(SpecRecord, data, split, general=True)


@pytest.mark.parametrize(
    "record",
    [
        ProgressRecord(id="s", attempts=True),  # type: ignore[arg-type]
        ProgressRecord(id="s", state=bytearray(b"x")),  # type: ignore[arg-type]
        SpecRecord(id="s", weight=2.0),  # type: ignore[arg-type]
    ],
)
def test_a_record_holding_an_unexpected_type_takes_the_general_path(record: Any) -> None:
    assert encode(record) == records._encode_general(record)
