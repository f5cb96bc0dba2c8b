"""The command line's rough edges: help, the worker, logs, missing rich."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

import pytest

from spate._cli.main import build_parser, main
from spate_testing.servers.etcd import EtcdServer
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server


def _walk(
    parser: argparse.ArgumentParser, path: str = "spate"
) -> list[tuple[str, argparse.Action]]:
    """Every action of ``parser`` and of its subcommands' parsers, with the command's path."""
    found: list[tuple[str, argparse.Action]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                found.append((path, choice))
            for name, sub in action.choices.items():
                found.extend(_walk(sub, f"{path} {name}"))
        else:
            found.append((path, action))
    return found


def test_every_subcommand_and_option_has_help_text() -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in _walk(build_parser())
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS
    ]
    assert not missing, f"no help text: {missing}"
    # The walk saw every subcommand (a new one is walked the same way).
    paths = {path for path, _ in _walk(build_parser())}
    assert {"spate demo", "spate worker", "spate status", "spate requeue"} <= paths


def test_the_worker_says_plainly_that_it_runs_the_demos_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "demo's job" in help_text
    assert "not a job of yours" in help_text or "does not run a job of yours" in help_text
    args = ["worker", "--store", "memory://", "--job", "plain", "--splits", "1"]
    assert main([*args, "--batch-seconds", "0"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("spate worker: one worker of the demo's job 'plain'"), first
    assert "not a job of yours" in first


def _worker_log(server: EtcdServer, namespace: str, *extra: str) -> str:
    url = server.store_url(namespace)
    code = (
        "import sys\nfrom spate._cli.main import main\n"
        f"sys.exit(main(['worker', '--store', {url!r}, '--splits', '2', "
        f"'--batch-seconds', '0', *{list(extra)!r}]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.etcd
def test_the_worker_logs_no_line_per_http_request_unless_asked(
    etcd_session_server: EtcdServer,
) -> None:
    quiet = _worker_log(etcd_session_server, "cli-quiet-log")
    assert "HTTP Request" not in quiet
    loud = _worker_log(etcd_session_server, "cli-loud-log", "--log-http")
    assert loud.count("HTTP Request: POST") > 5


@pytest.mark.etcd
def test_no_command_logs_a_line_per_http_request(
    etcd_session_server: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = etcd_session_server.store_url("cli-status-log")
    # The job need not exist: reading the store to find out makes the HTTP requests.
    main(["status", "--store", url, "--job", "nothing-here", "--json"])
    assert not [r for r in caplog.records if r.name.startswith(("httpx", "httpcore"))]
    # The levels are the caller's again afterwards (main is called in-process here).
    assert logging.getLogger("httpx").level == logging.NOTSET


@pytest.mark.parametrize("argv", [[], ["--watch"]])
def test_status_without_rich_says_what_to_install(argv: list[str]) -> None:
    # An install without the cli extra: importing rich fails as it would there.
    code = (
        "import sys\nsys.modules['rich'] = None\nfrom spate._cli.main import main\n"
        f"sys.exit(main(['status', '--store', 'memory://', '--job', 'j', *{argv!r}]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "pip install 'trio-spate[cli]'" in result.stderr
    assert "--json" in result.stderr


def test_status_json_needs_no_rich() -> None:
    code = (
        "import sys\nsys.modules['rich'] = None\nfrom spate._cli.main import main\n"
        "sys.exit(main(['status', '--store', 'memory://', '--job', 'j', '--json']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    # The job need not exist: what matters is that nothing asked for rich.
    assert "Traceback" not in result.stderr, result.stderr
    assert "rich" not in result.stderr
