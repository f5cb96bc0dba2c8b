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
from hypothesis import given, settings
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
        ProgressRecord(id="s", attempts=True),  # a bool: an int to mypy, not to the codec
        ProgressRecord(id="s", state=bytearray(b"x")),  # type: ignore[arg-type]
        SpecRecord(id="s", weight=2.0),  # type: ignore[arg-type]
    ],
)
def test_a_record_holding_an_unexpected_type_takes_the_general_path(record: Any) -> None:
    assert encode(record) == records._encode_general(record)


@given(progress_records)
def test_a_progress_record_in_its_canonical_form_reads_as_the_direct_path_reads_it(
    record: ProgressRecord,
) -> None:
    data = encode(record)
    canonical = records.canonical_progress(data, record.id)
    # Matched whenever its strings are plain printable ASCII and its integers short.
    plain = all(
        s is None or (s.isascii() and s.isprintable() and '"' not in s and "\\" not in s)
        for s in (record.id, record.owner, record.owner_nonce)
    ) and all(
        n is None or abs(n) < 10**18
        for n in (record.epoch, record.attempts, record.watermark, record.written_at_ms)
    )
    assert (canonical is not None) == plain
    if canonical is not None:
        assert canonical == record == records._fast_decode_progress(data, record.id)
    assert records.canonical_progress(data, record.id + "x") is None


@given(spec_records)
def test_a_spec_in_its_canonical_form_reads_as_the_direct_path_reads_it(
    record: SpecRecord,
) -> None:
    data = encode(record)
    canonical = records.canonical_spec(data, record.id)
    plain = all(
        s.isascii() and s.isprintable() and '"' not in s and "\\" not in s
        for s in (record.id, record.locality)
    ) and all(abs(n) < 10**18 for n in (record.generation, record.weight))
    assert (canonical is not None) == plain
    if canonical is not None:
        assert canonical == record == records._fast_decode_spec(data, record.id)
    assert records.canonical_spec(data, record.id + "x") is None


# Headers in the encoder's key order, each value mostly of its field's type, else of any JSON
# type (or a spelling the encoder never writes): what the canonical pattern accepts, the direct
# path reads alike.
def mostly(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    wrong = json_values | st.sampled_from(["", 0, "runnable"])
    return st.one_of(right, right, right, right, right, right, right, wrong)


plain = st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\')
ascii_texts = st.text(plain, max_size=8) | st.text(
    st.characters(min_codepoint=0x1F, max_codepoint=0x80), max_size=8
)
small_ints = st.integers(-1000, 1000) | st.integers(min_value=-(10**19), max_value=10**19)


@settings(max_examples=500)  # (about one example in ten is canonical)
@given(
    st.fixed_dictionaries(
        {
            "id": mostly(ascii_texts),
            "epoch": mostly(small_ints),
            "status": mostly(st.sampled_from(["runnable", "completed", "quarantined"])),
            "owner": mostly(st.none() | ascii_texts),
            "attempts": mostly(small_ints),
            "watermark": mostly(st.none() | small_ints),
            "completed": mostly(st.booleans()),
            "written_at_ms": mostly(small_ints),
        },
        optional={"advanced": mostly(st.booleans()), "owner_nonce": mostly(ascii_texts)},
    ),
    st.binary(max_size=8),
)
def test_any_header_in_the_canonical_order_reads_as_the_direct_path_reads_it(
    header: dict[str, Any], state: bytes
) -> None:
    data = b'{"schema":2,' + json.dumps(header, separators=(",", ":")).encode()[1:] + b"\n" + state
    for split in (None, header["id"] if isinstance(header["id"], str) else None, "s"):
        canonical = records.canonical_progress(data, split)
        if canonical is not None:
            assert canonical == records._fast_decode_progress(data, split)


@settings(max_examples=500)  # (about one example in ten is canonical)
@given(
    st.fixed_dictionaries(
        {
            "id": mostly(ascii_texts),
            "generation": mostly(small_ints),
            "weight": mostly(small_ints),
            "descriptor": mostly(st.sampled_from(["", "YWI=", "YWI", "YQ==", "!!", "YQ=a"])),
        },
        optional={"locality": mostly(ascii_texts)},
    ),
)
def test_any_spec_in_the_canonical_order_reads_as_the_direct_path_reads_it(
    header: dict[str, Any],
) -> None:
    data = b'{"schema":1,' + json.dumps(header, separators=(",", ":")).encode()[1:]
    for split in (None, header["id"] if isinstance(header["id"], str) else None, "s"):
        canonical = records.canonical_spec(data, split)
        if canonical is not None:
            assert canonical == records._fast_decode_spec(data, split)
