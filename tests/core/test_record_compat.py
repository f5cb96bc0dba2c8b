"""Records written before a field existed still read; a field at its default is not written."""

from __future__ import annotations

import json

import attrs
import pytest

from spate._core.records import (
    PlanRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    UnreadableRecord,
    VerdictRecord,
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
    # (A progress record is rewritten in schema 2, but its header leaves `advanced` out too.)
    assert encode(decode(ProgressRecord, "k", OLD_PROGRESS, split="s")) == (
        OLD_PROGRESS.replace(b'"schema":1', b'"schema":2').replace(b',"state":""', b"") + b"\n"
    )
    assert encode(decode(SpecRecord, "k", OLD_SPEC, split="s")) == OLD_SPEC
    assert encode(decode(PresenceRecord, "k", OLD_PRESENCE)) == OLD_PRESENCE


def test_new_fields_round_trip() -> None:
    progress = ProgressRecord(id="s", watermark=3, advanced=True)
    assert json.loads(encode(progress).partition(b"\n")[0])["advanced"] is True
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


# -- schema 2: the progress record's framing -------------------------------------------------

OLD_PROGRESS_WITH_STATE = (
    b'{"schema":1,"id":"s","epoch":2,"status":"runnable","owner":"w","attempts":0,'
    b'"watermark":5,"state":"AAoBew==","completed":false,"written_at_ms":7}'
)


def test_a_progress_record_is_a_json_header_line_then_the_raw_state() -> None:
    state = b"\x00\n\x01{"  # a newline and a brace inside the state: only the first one counts
    record = ProgressRecord(id="s", epoch=2, owner="w", watermark=5, state=state, written_at_ms=7)
    data = encode(record)
    header, _, rest = data.partition(b"\n")
    assert rest == state  # raw, not base64
    assert json.loads(header) == {
        "schema": 2, "id": "s", "epoch": 2, "status": "runnable", "owner": "w",
        "attempts": 0, "watermark": 5, "completed": False, "written_at_ms": 7,
    }  # fmt: skip
    assert decode(ProgressRecord, "k", data, split="s") == record
    assert decode(ProgressRecord, "k", encode(attrs.evolve(record, state=b"")), split="s") == (
        attrs.evolve(record, state=b"")
    )


def test_a_schema_1_progress_record_reads_equal_to_its_schema_2_rewrite() -> None:
    old = decode(ProgressRecord, "k", OLD_PROGRESS_WITH_STATE, split="s")
    assert old.state == b"\x00\n\x01{"
    assert old.schema == 2  # what it will be written as
    new = encode(old)
    assert new.startswith(b'{"schema":2,')
    assert decode(ProgressRecord, "k", new, split="s") == old


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"schema":2,"id":"s","epoch":0}', "without its state line"),
        (b'{"schema":2,"id":"s","state":"","epoch":0}\nxx', "with a state field"),
        (b'{"schema":2,"id":"s","epoch":"x"}\nxx', "not a valid ProgressRecord"),
        (b'{"schema":2,"id":"s"\nxx', "not JSON"),
        (b'{"schema":3,"id":"s"}\nxx', "schema 3 \\(framed\\), this spate reads schema 1 and 2"),
        (b'{"id":"s","schema":2}', "schema 2, this spate reads schema 1 and 2"),
    ],
)
def test_a_malformed_schema_2_progress_record_is_unreadable(data: bytes, problem: str) -> None:
    with pytest.raises(UnreadableRecord, match=problem):
        decode(ProgressRecord, "k", data, split="s")


def test_only_the_progress_record_is_framed() -> None:
    spec = SpecRecord(id="s", descriptor=b"\n")
    assert json.loads(encode(spec))["schema"] == 1
    with pytest.raises(UnreadableRecord, match="schema 2, this spate reads schema 1"):
        decode(SpecRecord, "k", encode(ProgressRecord(id="s")), split="s")


# -- the plan record's verdict -----------------------------------------------------------------

OLD_PLAN = (
    b'{"schema":1,"fingerprint":"fp","generation":3,"finality":"final","planned":2,'
    b'"cursor":null,"updated_at_ms":5}'
)


def test_a_plan_record_of_the_previous_layout_reads_with_no_verdict() -> None:
    plan = decode(PlanRecord, "k", OLD_PLAN)
    assert plan.verdict is None
    assert (plan.generation, plan.planned) == (3, 2)
    assert encode(plan) == OLD_PLAN  # no verdict yet: the bytes an older worker reads


def test_a_published_verdict_round_trips_and_a_mistyped_one_is_unreadable() -> None:
    plan = attrs.evolve(
        decode(PlanRecord, "k", OLD_PLAN),
        verdict=VerdictRecord(all_complete=False, completed=1, quarantined=1),
    )
    data = encode(plan)
    assert json.loads(data)["verdict"] == {"all_complete": False, "completed": 1, "quarantined": 1}
    assert decode(PlanRecord, "k", data) == plan
    with pytest.raises(UnreadableRecord, match="PlanRecord"):
        decode(PlanRecord, "k", OLD_PLAN[:-1] + b',"verdict":{"all_complete":true}}')


@pytest.mark.parametrize(
    ("verdict", "says"),
    [
        ({"all_complete": True, "completed": 4, "quarantined": 1}, "all-complete verdict with 1"),
        ({"all_complete": False, "completed": -1, "quarantined": 0}, "negative counts"),
        ({"all_complete": False, "completed": 3, "quarantined": -2}, "negative counts"),
    ],
)
def test_a_plan_record_whose_verdict_contradicts_itself_is_refused(
    verdict: dict[str, object], says: str
) -> None:
    # Every worker returns the published verdict: a corrupt one is refused, never reported.
    raw = json.loads(encode(PlanRecord(fingerprint="f", generation=1)))
    raw["verdict"] = verdict
    with pytest.raises(UnreadableRecord, match=says):
        decode(PlanRecord, "job.plan", json.dumps(raw).encode())
    consistent = {"all_complete": False, "completed": 3, "quarantined": 1}
    raw["verdict"] = consistent
    assert decode(PlanRecord, "job.plan", json.dumps(raw).encode()).verdict == VerdictRecord(
        all_complete=False, completed=3, quarantined=1
    )


# -- the failure reason ---------------------------------------------------------------------------


def test_a_progress_record_without_a_reason_reads_with_none_and_is_written_without_one() -> None:
    assert decode(ProgressRecord, "k", OLD_PROGRESS, split="s").reason == ""
    assert b"reason" not in encode(ProgressRecord(id="s", watermark=3))


def test_a_failure_reason_round_trips_through_either_encoder() -> None:
    record = ProgressRecord(id="s", watermark=3, attempts=2, reason='bad row 7: "x"\n', state=b"z")
    data = encode(record)
    assert json.loads(data.partition(b"\n")[0])["reason"] == 'bad row 7: "x"\n'
    assert decode(ProgressRecord, "k", data, split="s") == record


# -- the load summary on a presence record (load-aware balancing) ---------------------------------


def test_a_presence_record_with_loads_round_trips_and_an_old_one_reads_without() -> None:
    from spate._core.records import SplitLoad

    record = PresenceRecord(
        nonce="n", max_in_flight=4, capacity=2.0, loads=(SplitLoad(split="s", rate=1.5),),
        other_splits=3, other_load=0.25, untrusted=1,
    )  # fmt: skip
    assert decode(PresenceRecord, "k", encode(record)) == record
    old = decode(PresenceRecord, "k", OLD_PRESENCE)
    assert (old.capacity, old.loads, old.other_splits, old.untrusted) == (1.0, (), 0, 0)
    assert not old.reports_load
    assert record.reports_load


def test_a_presence_record_that_declines_split_requests_says_so_and_an_old_one_does_not() -> None:
    declines = PresenceRecord(nonce="n", max_in_flight=4, split_requests=False)
    assert b'"split_requests":false' in encode(declines)
    assert decode(PresenceRecord, "k", encode(declines)) == declines
    # Left out while true: a worker that may be asked writes the bytes it wrote before.
    assert decode(PresenceRecord, "k", OLD_PRESENCE).split_requests is True
    assert encode(decode(PresenceRecord, "k", OLD_PRESENCE)) == OLD_PRESENCE
    with pytest.raises(UnreadableRecord, match="PresenceRecord"):
        decode(PresenceRecord, "k", OLD_PRESENCE[:-1] + b',"split_requests":0}')


def test_a_negative_or_mistyped_load_is_unreadable() -> None:
    for bad in (b'"capacity":-1', b'"capacity":"2"', b'"other_load":true'):
        with pytest.raises(UnreadableRecord, match="PresenceRecord"):
            decode(PresenceRecord, "k", OLD_PRESENCE[:-1] + b"," + bad + b"}")


def test_the_summary_of_1000_splits_stays_small() -> None:
    from spate._core.tenancy.load_reports import SUMMARY_SPLITS, LoadReports

    held = {f"job-part-{i:05d}": (i, 0.0) for i in range(1000)}
    reports = LoadReports(60.0, held.get)
    for i, split in enumerate(held):
        reports.report(split, 1000.0 * (1 + i % 97) / 7, 1.0 + i / 1000)
    summary = reports.summary(120.0)
    assert len(summary.loads) == SUMMARY_SPLITS
    assert summary.other_splits == 1000 - SUMMARY_SPLITS
    assert summary.untrusted == 0
    assert summary.loads[0].rate >= summary.loads[-1].rate  # the heaviest, by name
    record = PresenceRecord(
        nonce="0123456789abcdef", max_in_flight=1000, loads=summary.loads,
        other_splits=summary.other_splits, other_load=summary.other_load,
    )  # fmt: skip
    assert len(encode(record)) <= 3_000
