"""``python -m bench --only kazoo``'s pure parts: the figure's arithmetic, finding ZooKeeper,
the skip when something is missing, and the kazoo process's writers on a stand-in client.

Nothing here starts ZooKeeper or needs kazoo (CI installs neither), and nothing is timed.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from bench import kazoo
from bench._harness import Options
from bench._kazoo_worker import KazooItems


def test_cpu_per_commit_is_the_fleets_cpu_over_its_commits() -> None:
    windows = [kazoo.Window(0.5, 1000), kazoo.Window(0.3, 600), kazoo.Window(0.2, 400)]
    assert kazoo.cpu_per_commit(windows) == pytest.approx(1.0 / 2000)


def test_cpu_per_commit_of_a_window_with_no_commit_is_nan() -> None:
    assert math.isnan(kazoo.cpu_per_commit([kazoo.Window(0.5, 0)]))
    assert math.isnan(kazoo.cpu_per_commit([]))


def test_a_window_line_is_parsed_and_anything_else_refused() -> None:
    assert kazoo.Window.parse("window 0.612345 2048") == kazoo.Window(0.612345, 2048)
    with pytest.raises(ValueError, match="not a window line"):
        kazoo.Window.parse("held 8 x")


def test_the_rows_put_spate_beside_kazoo_and_judge_the_threads_baseline() -> None:
    per_commit = {"spate": [4e-4, 3e-4, 5e-4], "kazoo threads": [2e-4], "kazoo async": [4e-4]}
    rates = {"spate": [3000.0], "kazoo threads": [6000.0], "kazoo async": [5000.0]}
    cost, cost_async, rate = kazoo._rows(per_commit, rates, size=212, window=5.0, load=1.5)
    assert cost.ratio == pytest.approx(2.0)
    assert cost.met is False
    assert cost.target == "≤ 1.0x"
    assert cost_async.ratio == pytest.approx(1.0)
    assert cost_async.met is None
    assert rate.ratio == pytest.approx(0.5)
    assert "212 B" in cost.note
    assert "load 1.50" in cost.note


def _jar(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_debians_zookeeper_jar_is_found_with_a_quiet_logger(tmp_path: Path) -> None:
    main = _jar(tmp_path / "zookeeper.jar")
    quiet = _jar(tmp_path / "slf4j-nop.jar")
    assert kazoo.zookeeper_classpath({}, tmp_path) == f"{main}:{quiet}"


def test_a_zookeeper_home_names_its_lib_jars(tmp_path: Path) -> None:
    home = tmp_path / "apache-zookeeper-3.9.2-bin"
    jars = [_jar(home / "lib" / "slf4j-api-1.7.30.jar"), _jar(home / "lib" / "zookeeper-3.9.2.jar")]
    found = kazoo.zookeeper_classpath({kazoo.ZOOKEEPER_HOME_ENV: str(home)}, tmp_path)
    assert found == ":".join(str(jar) for jar in jars)


def test_no_zookeeper_is_none(tmp_path: Path) -> None:
    assert kazoo.zookeeper_classpath({}, tmp_path) is None
    empty = tmp_path / "empty-home"
    empty.mkdir()
    assert kazoo.zookeeper_classpath({kazoo.ZOOKEEPER_HOME_ENV: str(empty)}, tmp_path) is None


def _java_on_path(tmp_path: Path) -> dict[str, str]:
    java = _jar(tmp_path / "bin" / "java")
    java.chmod(0o755)
    return {"PATH": str(java.parent)}


def test_what_is_missing_says_what_to_install(tmp_path: Path) -> None:
    reason = kazoo.missing(Options(), {"PATH": ""}, has_kazoo=lambda: False, debian=tmp_path)
    assert reason is not None
    assert "pip install kazoo" in reason
    assert "apt-get install zookeeper" in reason
    assert kazoo.ZOOKEEPER_HOME_ENV in reason
    assert "no java" in reason


def test_a_store_list_without_etcd_is_a_reason_to_skip(tmp_path: Path) -> None:
    _jar(tmp_path / "zookeeper.jar")
    env = _java_on_path(tmp_path)
    only_memory = Options(stores=("memory",))
    reason = kazoo.missing(only_memory, env, has_kazoo=lambda: True, debian=tmp_path)
    assert reason is not None
    assert "etcd" in reason


def test_nothing_is_missing_when_all_is_there(tmp_path: Path) -> None:
    _jar(tmp_path / "zookeeper.jar")
    env = _java_on_path(tmp_path)
    assert kazoo.missing(Options(), env, has_kazoo=lambda: True, debian=tmp_path) is None


def test_the_suite_skips_with_a_line_and_no_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kazoo, "missing", lambda options: "no kazoo (pip install kazoo)")
    assert kazoo.run(Options(quick=True)) == []
    assert "skipped: no kazoo (pip install kazoo)" in capsys.readouterr().out


@attrs.define
class _Stat:
    version: int


class _Result:
    def __init__(self, stat: _Stat) -> None:
        self.stat = stat

    def get(self) -> _Stat:
        return self.stat

    def rawlink(self, callback: Any) -> None:
        # As kazoo's threading handler does: the callback runs on another thread.
        threading.Thread(target=callback, args=(self,), daemon=True).start()


class _Client:
    """A stand-in KazooClient: a dict of znodes whose set is a CAS on their version."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self.lock = threading.Lock()

    def ensure_path(self, path: str) -> None:
        self.versions.setdefault(path, 0)

    def get(self, path: str) -> tuple[bytes, _Stat]:
        return b"", _Stat(self.versions[path])

    def set(self, path: str, value: bytes, version: int) -> _Stat:
        time.sleep(0.001)  # a round trip: writes are in flight when a window closes
        with self.lock:
            assert self.versions[path] == version, "a write without the current version"
            self.versions[path] += 1
            return _Stat(self.versions[path])

    def set_async(self, path: str, value: bytes, version: int) -> _Result:
        return _Result(self.set(path, value, version))


@pytest.mark.parametrize("mode", ["threads", "async"])
def test_a_kazoo_process_writes_each_item_only_while_a_window_is_open(mode: str) -> None:
    # The writer reads kazoo's BadVersionError: the suite's own dependency (nox's bench
    # session installs it), not the test session's.
    pytest.importorskip("kazoo")
    client = _Client()
    items = KazooItems(client, "/ns")
    items.take(["s000000", "s000001"])
    assert items.commits == 0
    items.open(mode, 212)
    deadline = time.monotonic() + 30
    while items.commits < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    items.close()
    items.drop()
    landed = items.commits
    assert landed >= 20
    # Every write carried the version the one before it returned: the znodes' versions are
    # the writes counted, and nothing more lands once the window has closed.
    assert sum(client.versions.values()) == landed
    time.sleep(0.05)
    assert items.commits == landed


def test_a_window_closes_once_its_writes_have_landed_so_the_next_way_has_the_versions() -> None:
    client = _Client()
    items = KazooItems(client, "/ns")
    items.take([f"s{n:06d}" for n in range(8)])
    for mode in ("threads", "async", "threads", "async"):
        before = items.commits
        items.open(mode, 212)
        deadline = time.monotonic() + 30
        while items.commits < before + 16 and time.monotonic() < deadline:
            time.sleep(0.005)
        items.close()
        assert not any(items.writing)
        # No write went out with a stale version (the stand-in would have refused it).
        assert sum(client.versions.values()) == items.commits
    items.drop()
