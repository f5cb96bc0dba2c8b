"""Run the conformance suite against a store URL (what ``spate conformance --store URL`` does)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit

import trio
import trio.testing

if TYPE_CHECKING:
    from spate.store import Store

__all__ = ["clock_for_url", "run_conformance", "url_store_factory", "with_namespace"]

URL_VARIABLE = "SPATE_CONFORMANCE_URL"
"""Environment variable carrying the URL to the pytest process (never written to disk)."""

_TEST_MODULE = '''\
"""The store conformance suite against the URL given to run_conformance (SPATE_CONFORMANCE_URL)."""

from spate_testing.conformance.test_store_conformance import TestStoreConformance
'''


def with_namespace(url: str, namespace: str) -> str:
    """``url`` with its ``namespace=`` query parameter set to ``namespace``.

    A namespace already in the query becomes a prefix (``job`` + ``spate-conformance`` gives
    ``job-spate-conformance``), so a shared server's tenants stay apart.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    existing = next((v for k, v in reversed(query) if k == "namespace" and v), "")
    query = [(k, v) for k, v in query if k != "namespace"]
    query.append(("namespace", f"{existing}-{namespace}" if existing else namespace))
    # Keep everything before the query verbatim: urlunsplit would turn memory:// into memory:.
    head = url.split("#", 1)[0].split("?", 1)[0]
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{head}?{urlencode(query)}{fragment}"


def url_store_factory(url: str) -> Callable[[str], AbstractAsyncContextManager[Store]]:
    """A :data:`StoreFactory` opening a new client of ``url`` per call, via ``open_store``."""
    from spate_stores import open_store

    def factory(namespace: str) -> AbstractAsyncContextManager[Store]:
        return open_store(with_namespace(url, namespace))

    return factory


def clock_for_url(url: str) -> trio.abc.Clock | None:
    """The clock to test ``url``'s store on: virtual for ``memory://``, else the real one."""
    # memory:// measures TTLs on the Trio clock, so virtual time makes its TTL tests instant;
    # every other store expires on a server's real clock.
    if urlsplit(url).scheme.lower() == "memory":
        return trio.testing.MockClock(autojump_threshold=0)
    return None


def run_conformance(url: str, pytest_args: Sequence[str] = ()) -> int:
    """Run the whole conformance suite against the store ``url`` names; return pytest's exit code.

    The suite runs in a fresh ``python -m pytest`` process (so its assertions are rewritten
    and no pytest or Trio state is shared with the caller), printing its report to this
    process's stdout. Each test opens its clients with :func:`spate_stores.open_store`,
    setting the URL's ``namespace=`` (an existing namespace becomes a prefix). Give real
    servers a short TTL (``?ttl=2``) so the expiry tests finish in seconds; ``memory://`` runs
    on a virtual clock. ``pytest_args`` are passed through (``["-x", "-k", "watch"]``, say).

    Raises :class:`~spate.ConfigError` or :class:`~spate.StoreError` before
    running anything when the URL cannot name a store (unknown scheme, missing extra).
    """
    from spate_stores import store_from_url
    from spate_stores._redact import url_secrets

    store_from_url(url)  # fail fast, with open_store's own message, on a URL it cannot open
    with tempfile.TemporaryDirectory(prefix="spate-conformance-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_store_conformance.py").write_text(_TEST_MODULE)
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(root),
            "-c",
            str(root / "pytest.ini"),
            "--rootdir",
            str(root),
            "--confcutdir",
            str(root),
            "-p",
            "no:cacheprovider",
            *pytest_args,
        ]
        # The URL may carry credentials: hand it over in the environment, not on disk or argv.
        env = {**os.environ, URL_VARIABLE: url}
        return _run_scrubbed(command, root, env, url_secrets(url))


def _run_scrubbed(command: list[str], cwd: Path, env: dict[str, str], secrets: list[str]) -> int:
    """Run ``command``, copying its output to this process's stdout with ``secrets`` masked.

    pytest's long tracebacks show the arguments of every frame, and a store URL with its
    password is one of them: the report passes through here line by line, so it never
    reaches a terminal or a CI log.
    """
    from spate_stores._redact import scrub

    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = scrub(raw.decode("utf-8", errors="replace"), secrets)
            sys.stdout.write(line)
            sys.stdout.flush()
    return process.returncode
