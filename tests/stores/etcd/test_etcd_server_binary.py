"""Which etcd binary the test server runs, with no server started."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from spate_testing.servers.etcd import (
    ETCD_BINARY_ENV,
    EtcdServerError,
    find_etcd_binary,
    system_etcd_binary,
)


def _executable(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_system_etcd_skips_etcd_distros_python_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = _executable(tmp_path / "venv" / "etcd", "#!/usr/bin/python3\nimport sys\n")
    real = _executable(tmp_path / "system" / "etcd", "\x7fELF pretend binary\n")
    monkeypatch.setenv("PATH", f"{launcher.parent}:{real.parent}")
    assert system_etcd_binary() == real


def test_no_system_etcd_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert system_etcd_binary() is None


def test_the_environment_override_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = _executable(tmp_path / "my-etcd", "\x7fELF pretend binary\n")
    monkeypatch.setenv(ETCD_BINARY_ENV, str(chosen))
    assert find_etcd_binary() == chosen


def test_a_missing_override_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ETCD_BINARY_ENV, str(tmp_path / "nope"))
    with pytest.raises(EtcdServerError, match=ETCD_BINARY_ENV):
        find_etcd_binary()
