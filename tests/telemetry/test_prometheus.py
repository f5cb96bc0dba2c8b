"""Prometheus: ``spate worker --metrics-port`` serves spate's series, scraped over HTTP.

configure() installs global providers (once per process), so the worker runs in a process of
its own, on its embedded memory store; the test scrapes it on 127.0.0.1. Real clock.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import httpx
import trio

from ._catalogue import exported_names

WANTED = {
    "spate_coordination_writes_total",
    "spate_coordination_acquisitions_total",
    "spate_coordination_splits_owned",
    "spate_coordination_leader",
    "spate_coordination_write_duration_seconds_bucket",
}


async def scrape_until(url: str, wanted: set[str]) -> str:
    async with httpx.AsyncClient() as client:
        while True:
            response = await client.get(url)
            assert response.status_code == 200
            text = response.text
            if wanted <= series_names(text):
                return text
            await trio.sleep(0.2)


def series_names(text: str) -> set[str]:
    return set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.MULTILINE))


async def test_spate_worker_serves_its_coordination_series_to_prometheus() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    command = [sys.executable, "-m", "spate", "worker", "--store", "memory://", "--job", "prom"]
    command += ["--instance", "w1", "--splits", "4", "--batch-seconds", "0.5"]
    command += ["--metrics-port", "127.0.0.1:0"]
    process = await trio.lowlevel.open_process(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(60):
            assert process.stdout is not None
            # The worker's first line says whose job it runs; the metrics line follows.
            line = ""
            while not line.startswith("metrics: "):
                read = b""
                while not read.endswith(b"\n"):
                    chunk = await process.stdout.receive_some(1)
                    assert chunk, "the worker exited before serving metrics"
                    read += chunk
                line = read.decode().strip()
            assert line.startswith("metrics: http://127.0.0.1:"), line
            text = await scrape_until(line.removeprefix("metrics: "), WANTED)
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    names = series_names(text)
    # Every spate series the worker serves is one the catalogue knows (same translation).
    assert {n for n in names if n.startswith("spate_")} <= exported_names()
    writes = [ln for ln in text.splitlines() if ln.startswith("spate_coordination_writes_total{")]
    assert any('spate_job="prom"' in ln and 'spate_instance="w1"' in ln for ln in writes)
    assert any('spate_operation="claim"' in ln and 'spate_outcome="won"' in ln for ln in writes)


def test_a_metrics_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "spate", "worker", "--store", "memory://",
             "--metrics-port", f"127.0.0.1:{port}"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_malformed_metrics_port_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spate", "worker", "--store", "memory://",
         "--metrics-port", "localhost:http"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--metrics-port takes [HOST:]PORT" in result.stderr
