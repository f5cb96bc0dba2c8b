"""``python -m bench --profile``: where a commit's CPU goes, bucket by bucket.

Its figures are not judged (no timing assertion): these tests hold that every profiled part
lands in the bucket the table names, that the table accounts for the whole, and that the codec
it compares with writes the very bytes the records are stored as.
"""

from __future__ import annotations

import trio

from bench import profile
from spate._core import records
from spate._core.records import ProgressRecord, Status
from spate_stores.memory import MemoryServer, MemoryStore

TRIO_RUN = "/venv/lib/python3.11/site-packages/trio/_core/_run.py"


def test_each_part_of_a_commit_has_its_bucket() -> None:
    assert profile.bucket_of(("/x/spate/_runtime/driver.py", 1, "run_inline")) == (
        "driver: flow round trips, key holds"
    )
    assert profile.bucket_of((TRIO_RUN, 1, "__enter__")) == "cancel scopes"
    assert profile.bucket_of((TRIO_RUN, 1, "unrolled_run")) == "Trio: scheduling, checkpoints"
    assert profile.bucket_of(("/x/spate/_write_spans.py", 1, "write")) == (
        "span + metrics: spate's fenced write"
    )
    assert profile.bucket_of(("/x/opentelemetry/sdk/trace/__init__.py", 1, "start_span")) == (
        "span + metrics: OpenTelemetry"
    )
    assert profile.bucket_of(("/x/spate_stores/memory.py", 1, "update")) == (
        "store call (memory store)"
    )
    assert profile.bucket_of(("/x/spate/_core/records.py", 1, "encode")) == ("encoding, decoding")
    # The core's folders (spate/_core/tenancy/, spate/_core/view/): each its own part, not a
    # catch-all that a module moved into a folder would fall into unseen.
    assert profile.bucket_of(("/x/spate/_core/tenancy/commits.py", 1, "commit_flow")) == (
        "commit flow, tenancy"
    )
    assert profile.bucket_of(("/x/spate/_core/tenancy/tenancies.py", 1, "hold_owned")) == (
        "commit flow, tenancy"
    )
    assert profile.bucket_of(("/x/spate/_core/view/split_table.py", 1, "_fold")) == (
        "fold into the view"
    )
    assert profile.bucket_of(("/x/spate/_core/notice_router.py", 1, "fold")) == "notice routing"
    # A builtin's time, and an attrs constructor's, goes to whoever called it.
    assert profile.bucket_of(("~", 0, "<built-in method builtins.isinstance>")) is None
    assert (
        profile.bucket_of(("<attrs generated methods spate._core.flows.Op>", 1, "__init__")) is None
    )


def test_the_breakdown_of_a_commit_accounts_for_all_of_it() -> None:
    async def main() -> profile.Breakdown:
        async with MemoryStore(server=MemoryServer(), namespace="p", ephemeral_ttl=10) as store:
            breakdown, bare = await profile.profile_commit(store, ops=50, rounds=1)
        assert bare > 0
        return breakdown

    breakdown = trio.run(main)
    rows = breakdown.rows()
    parts = {label for label, _, _ in rows}
    assert {"store call (memory store)", "driver: flow round trips, key holds"} <= parts
    assert abs(sum(share for _, _, share in rows) - 1.0) < 1e-9
    assert abs(sum(us for _, us, _ in rows) - breakdown.per_unit_us) < 1e-6


def test_the_preconf_codec_it_measures_writes_the_stored_bytes() -> None:
    encode, decode = profile._preconf_codec()
    for record in (
        ProgressRecord(id="s1", epoch=2, owner="w", watermark=5, state=b"\x00\xffstate"),
        ProgressRecord(id="s2", status=Status.COMPLETED, completed=True, advanced=True),
    ):
        data = records.encode(record)
        assert encode(record) == data
        assert decode(data) == record
