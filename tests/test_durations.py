"""Durations in messages are written by one helper: ``1.67 s``, never ``1.6666666666666667 s``.

:func:`spate._quote.seconds` writes a duration for a reader, :func:`spate._quote.number` a
number for the reader to type back (exact, and never ``1e+12``, whose ``+`` a URL's query
reads as a space). A scan of the sources keeps every f-string duration going through them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import spate
from spate._core.flows import Op
from spate._quote import number, seconds
from spate._runtime.driver import _timed_out
from spate.store import Keyspace

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (30, "30 s"),
        (5 / 3, "1.67 s"),
        (0.05, "0.05 s"),
        (2.5, "2.5 s"),
        (123.456, "123.5 s"),
        (9e9, "9000000000 s"),
        (1e12, "1000000000000 s"),
    ],
)
def test_seconds_writes_a_duration_for_a_reader(value: float, text: str) -> None:
    assert seconds(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(30, "30"), (2.5, "2.5"), (1e12, "1000000000000"), (5 / 3, "1.6666666666666667")],
)
def test_number_writes_what_a_reader_types_back_exactly(value: float, text: str) -> None:
    assert number(value) == text
    assert float(text) == value


def test_an_op_timeout_of_a_third_of_five_seconds_reads_1_67_s() -> None:
    op = Op("get", Keyspace.DURABLE, "job.plan")
    assert "took longer than 1.67 s (op_timeout)" in str(_timed_out(op, 5 / 3))


def test_a_config_refusal_writes_its_durations_for_a_reader() -> None:
    with pytest.raises(spate.ConfigError) as info:
        spate.Config(lease_duration=5, op_timeout=5 / 2 + 1 / 3)
    assert "Config.op_timeout (2.83 s) must be at most half the lease (5 s)" in str(info.value)


# An f-string field followed by " s" (a duration) that is not seconds(...). The demo's own
# narration formats its figures on purpose (columns, one decimal), so it is left out.
_RAW_DURATION = re.compile(r"\{(?!seconds\()[^{}]*\} s\b")
_NARRATION = ("spate/_cli/demo/", "spate/_quote.py")


def test_every_duration_in_a_message_goes_through_seconds() -> None:
    raw = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in ("spate", "spate_stores")
        for path in sorted((ROOT / package).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(_NARRATION)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _RAW_DURATION.search(line)
    ]
    assert raw == [], "write these durations with spate._quote.seconds: " + "; ".join(raw)
