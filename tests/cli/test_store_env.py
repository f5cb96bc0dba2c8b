"""Every command reads its store URL from ``$SPATE_STORE`` when ``--store`` is not given.

A store URL on the command line, credentials and all, shows in ``ps`` and shell history; an
environment variable (set by a supervisor, or from a file only the service user reads) does
not. The subcommands are found by walking the parser, so one added later is covered too.
"""

from __future__ import annotations

import argparse
import socket

import pytest

from spate._cli import main as cli
from tests.cli.test_secrets import JOB, QUICK, subcommands

# An unknown scheme: each command fails on it at once, naming it, so the output shows which
# URL the command took without any store being opened.
ENV_URL = "nosuchscheme://from-the-environment/ns"


def _store_commands() -> dict[str, argparse.ArgumentParser]:
    return {
        name: parser
        for name, parser in sorted(subcommands().items())
        if any("--store" in action.option_strings for action in parser._actions)
    }


def _argv(name: str, parser: argparse.ArgumentParser, store: str | None) -> list[str]:
    """``spate NAME`` with its required arguments, and ``--store`` only when ``store``."""
    argv = [name]
    for action in parser._actions:
        flag = action.option_strings[0] if action.option_strings else None
        if flag == "--store":
            if store is not None:
                argv += [flag, store]
        elif flag == "--job":
            argv += [flag, JOB]
        elif flag is None and action.required and action.nargs not in ("*", "?"):
            argv.append("range-0000")
    return argv + QUICK.get(name, [])


def test_every_command_takes_a_store() -> None:
    # So that the tests below cover every command (a new one without --store would be odd).
    assert set(_store_commands()) == set(subcommands())


@pytest.mark.parametrize("command", sorted(_store_commands()))
def test_without_store_the_command_uses_spate_store(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPATE_STORE", ENV_URL)
    status = cli.main(_argv(command, _store_commands()[command], None))
    out, err = capsys.readouterr()
    assert status != 0
    assert "nosuchscheme" in out + err, (out, err)


@pytest.mark.parametrize("command", sorted(_store_commands()))
def test_store_wins_over_spate_store(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPATE_STORE", "memory://")
    cli.main(_argv(command, _store_commands()[command], ENV_URL))
    out, err = capsys.readouterr()
    assert "nosuchscheme" in out + err, (out, err)


@pytest.mark.parametrize("command", sorted(set(_store_commands()) - {"demo"}))
def test_no_store_at_all_is_a_usage_error_naming_both_ways(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SPATE_STORE", raising=False)
    status = cli.main(_argv(command, _store_commands()[command], None))
    err = capsys.readouterr().err
    assert status == cli.EXIT_USAGE
    assert f"spate {command}: error: no store given: pass --store URL or set the SPATE_STORE" in (
        err
    )


def test_the_demo_without_either_runs_on_its_memory_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SPATE_STORE", raising=False)
    status = cli.main(["demo", *QUICK["demo"]])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "store memory://" in out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_password_from_spate_store_is_scrubbed_from_output(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = "Env-S3cret-pa55"
    url = f"nats://spate:{secret}@127.0.0.1:{_closed_port()}/ns?timeout=1"
    monkeypatch.setenv("SPATE_STORE", url)
    status = cli.main(["status", "--job", JOB, "--json"])
    out, err = capfd.readouterr()
    assert status != 0
    assert "127.0.0.1" in out + err
    assert secret not in out + err


def test_help_names_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["status", "--help"])
    assert "$SPATE_STORE" in capsys.readouterr().out
