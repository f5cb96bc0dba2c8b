"""The spate command line: the demo's exit status and result, status, requeue, bad arguments."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from spate._cli.main import main
from spate_stores.memory import MemoryStore
from tests.ops.test_ops import JOB, seed_job


def test_demo_without_chaos_exits_zero_with_a_checked_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(
        ["demo", "--no-chaos", "--seed", "2", "--workers", "2", "--splits", "6", "--duration", "2"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "verdict: AllComplete" in out
    assert "check: 6 splits match a single-pass computation" in out
    # The straggler was split for the idle lanes, and the closing lines say what it saved.
    assert re.search(
        r"^splitting: straggler range-\d{4} was split (once|twice|\d+ times)(; .*)?; the job "
        r"took \d+\.\d s instead of at least ~\d+ s without splitting$",
        out,
        re.MULTILINE,
    ), out
    assert "  (without splitting: range-" in out


def test_demo_with_chaos_exits_zero_with_a_checked_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["demo", "--seed", "4", "--workers", "3", "--splits", "8", "--duration", "3"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "verdict: AllComplete (after requeueing" in out
    assert "check: 8 splits match a single-pass computation" in out
    assert "killed without warning" in out
    assert "wakes up as a zombie" in out
    # So short a job under so much chaos may end after the unsplit straggler would have: the
    # line then says the faults set its length, and claims no saving.
    assert re.search(
        r"^splitting: straggler range-\d{4} was split (once|twice|\d+ times)", out, re.MULTILINE
    ), out
    assert "  (without splitting: range-" in out


@pytest.fixture
def seeded_memory_job() -> object:
    """A job seeded in the process-wide memory store that memory:// URLs open.

    Each CLI call is its own trio.run with its own clock, so only the durable records are
    meaningful across calls (ephemeral deadlines are measured on one run's clock).
    """
    store = MemoryStore.process_shared()

    async def seed() -> None:
        await store.__aenter__()
        await seed_job(store)

    trio.run(seed)
    yield store
    trio.run(store.aclose)


def test_status_json_shows_the_job(
    seeded_memory_job: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--store", "memory://", "--job", JOB, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["generation"] == 3
    assert document["finality"] == "final"
    assert document["counts"]["quarantined"] == 1
    assert [s["id"] for s in document["splits"]] == ["b", "c", "a"]


def test_status_table_lists_quarantined_splits_first(
    seeded_memory_job: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--store", "memory://", "--job", JOB]) == 0
    out = capsys.readouterr().out
    assert "1 quarantined" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["a"], ["b"], ["c"])]
    assert [row[0] for row in rows] == ["b", "c", "a"]
    assert (rows[0][1], rows[2][1]) == ("quarantined", "completed")


def test_requeue_returns_a_quarantined_split_and_refuses_others(
    seeded_memory_job: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["requeue", "--store", "memory://", "--job", JOB, "b"]) == 0
    assert "requeued 1 split(s): b" in capsys.readouterr().out
    assert main(["requeue", "--store", "memory://", "--job", JOB, "a"]) == 2
    assert "it is completed, not quarantined" in capsys.readouterr().err


def test_an_unknown_store_scheme_is_a_clear_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--store", "redis://127.0.0.1", "--job", JOB]) == 2
    err = capsys.readouterr().err
    assert "unsupported store URL" in err
    assert "etcd://" in err


def test_a_missing_job_is_refused_by_the_argument_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["status", "--store", "memory://"])
    assert exit_info.value.code == 2
    assert "--job" in capsys.readouterr().err


def test_an_invalid_job_name_is_a_clear_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--store", "memory://", "--job", "no.dots"]) == 2
    assert "job" in capsys.readouterr().err


def test_the_worker_command_finishes_the_demo_job_and_records_its_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history.jsonl"
    args = ["worker", "--store", "memory://", "--job", "solo", "--instance", "w1"]
    args += ["--splits", "3", "--batch-seconds", "0", "--history", str(history)]
    assert main(args) == 0
    assert "verdict: AllComplete()" in capsys.readouterr().out
    commits = [json.loads(line) for line in history.read_text().splitlines()]
    assert {c["split"] for c in commits if c["completed"]} == {
        "range-0000",
        "range-0001",
        "range-0002",
    }
    assert all(c["instance"] == "w1" for c in commits)


def test_the_conformance_command_passes_on_the_memory_store(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert main(["conformance", "--store", "memory://"]) == 0
    assert "81 passed" in capfd.readouterr().out


@pytest.mark.parametrize("hidden", [["pytest", "pytest_trio"], ["pytest_trio"]])
def test_the_conformance_command_without_pytest_says_which_extra_to_install(
    hidden: list[str],
) -> None:
    # An install without the test tools: importing them fails as it would there.
    code = (
        "import sys\n"
        f"for name in {hidden!r}: sys.modules[name] = None\n"
        "from spate._cli.main import main\n"
        "sys.exit(main(['conformance', '--store', 'memory://']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "pip install 'trio-spate[conformance]'" in result.stderr
    assert "pytest-trio" in result.stderr


def test_repair_shows_what_is_lost_asks_and_writes_only_when_told(
    seeded_memory_job: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    from spate._core.records import Keys, ProgressRecord, decode
    from spate.store import Keyspace

    keys = Keys(JOB)

    async def corrupt() -> int:
        entry = await seeded_memory_job.get(Keyspace.DURABLE, keys.split("c"))
        assert entry is not None
        result = await seeded_memory_job.update(
            Keyspace.DURABLE, keys.split("c"), b"garbage", entry.revision
        )
        return result.revision  # type: ignore[union-attr]

    revision = trio.run(corrupt)
    assert main(["status", "--store", "memory://", "--job", JOB, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    held = next(s for s in document["splits"] if s["id"] == "c")
    assert held["status"] == "quarantined"
    assert held["reason"].startswith(f"unreadable record {JOB}.split.c: ")
    # No terminal to ask on: it shows what it would write, and writes nothing.
    assert main(["repair", "--store", "memory://", "--job", JOB, "c"]) == 2
    captured = capsys.readouterr()
    assert "lost: its watermark" in captured.out
    assert "--yes" in captured.err
    assert main(["repair", "--store", "memory://", "--job", JOB, "c", "--yes"]) == 0
    assert "repaired 1 split(s): c" in capsys.readouterr().out

    async def read() -> ProgressRecord:
        entry = await seeded_memory_job.get(Keyspace.DURABLE, keys.split("c"))
        assert entry is not None
        return decode(ProgressRecord, entry.key, entry.value, split="c")

    assert trio.run(read) == ProgressRecord(
        id="c", epoch=revision, written_at_ms=trio.run(read).written_at_ms
    )
