"""The operator's checks (docs/operations.md), one body for the etcd and NATS suites (each
names its store).

``url(ttl)`` gives the suite's store URL for one fresh namespace (``ttl=None``: no ``ttl``
parameter); ``untouched()`` answers, on the store's own terms, that nothing was written to
that namespace since the last call (etcd: the cluster revision did not move; NATS: no bucket
of the namespace exists).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

import pytest
import trio

from spate import StoreError
from spate._cli.demo.display import PlainDisplay, print_result
from spate._cli.demo.fleet import DemoOptions, demo_store_url, run_demo
from spate._cli.main import main
from spate.ops import delete_job
from spate.store import Keyspace
from spate_stores import open_store
from tests.ops.test_ops import JOB, KEYS, seed_job

UrlOf = Callable[[float | None], str]


async def demo_twice_computes_each_result(url: str) -> None:
    """Two demos on one namespace: each runs its own job, folds its own records, cleans up."""
    jobs = []
    for _ in range(2):
        lines: list[str] = []
        options = DemoOptions(store_url=url, workers=2, splits=6, seed=3, chaos=False, duration=4)
        result = await run_demo(options, PlainDisplay(lines.append))
        print_result(result, lines.append)
        assert result.ok, (result.problems, lines)
        assert result.splits_checked == 6
        assert result.stats.processed > 0
        assert result.cleanup is not None
        assert re.fullmatch(r"its \d+ keys were removed from the store", result.cleanup), lines
        jobs.append(options.job)
    assert jobs[0] != jobs[1]
    async with open_store(url, read_only=True) as store:
        for keyspace in Keyspace:
            assert await store.list(keyspace, "spate-demo") == []


async def ttl_mismatch_says_how_to_resolve_it(url: UrlOf, system: str) -> None:
    """The same message on every store: the two TTLs, and the three ways out (each works)."""
    async with open_store(url(15)) as store:
        await seed_job(store)
    with pytest.raises(StoreError) as refused:
        async with open_store(url(3)):
            pass
    message = str(refused.value)
    assert re.match(
        rf"{system} namespace '[^']+' already uses an ephemeral TTL of 15 s, not 3 s ", message
    ), message
    assert "open the store with ttl=15 (or with no ttl, which adopts the namespace's)" in message
    assert "or use another namespace" in message
    assert "`spate delete --store URL --job NAME`" in message
    async with open_store(url(None)) as adopted:
        assert adopted.ephemeral_ttl == 15
        # Deleting the namespace's last job releases its TTL: then any TTL may open it.
        report = await delete_job(adopted, JOB, force=True)
        assert report.released
        assert report.describe().endswith("; the namespace is now empty, and its TTL was released")
    async with open_store(url(3)) as reopened:
        assert reopened.ephemeral_ttl == 3


def status_reads_whatever_ttl_and_refuses_a_missing_job(
    url: UrlOf, untouched: Callable[[], Awaitable[bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    """`spate status` of a namespace nobody used writes nothing; of one made with another TTL
    it reads (read-only, with or without a ttl in the URL); a missing job exits 2."""
    assert trio.run(untouched)
    assert main(["status", "--store", url(3), "--job", JOB]) == 2
    err = capsys.readouterr().err
    assert f"no job {JOB} in this store (jobs here: none)" in err
    assert "may or may not" not in err
    assert trio.run(untouched), "a read-only command wrote to the store"

    async def seed() -> None:
        async with open_store(url(15)) as store:
            await seed_job(store)

    trio.run(seed)
    for ttl in (3, None):
        assert main(["status", "--store", url(ttl), "--job", JOB, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["counts"]["quarantined"] == 1
    assert main(["status", "--store", url(3), "--job", "nope"]) == 2
    assert f"no job nope in this store (jobs here: {JOB})" in capsys.readouterr().err


def delete_and_requeue_all_work(
    url: str, capsys: pytest.CaptureFixture[str], *, sessions_end_with_the_client: bool
) -> None:
    """`requeue --all`, then `delete` removes the job and leaves the other one.

    The seeded workers' presence keys belong to the seeding client: on a store whose sessions
    end with their client (etcd) they are gone once it closes, so the workers are not live
    and the delete needs no --force; elsewhere (NATS) they live out their TTL, and only a
    forced delete goes ahead.
    """

    async def seed() -> None:
        async with open_store(url) as store:
            await seed_job(store)
            await store.create(Keyspace.DURABLE, "other-job.plan", b"x")

    trio.run(seed)
    assert main(["requeue", "--store", url, "--job", JOB, "--all"]) == 0
    assert "requeued 1 split(s): b" in capsys.readouterr().out
    if sessions_end_with_the_client:
        assert main(["delete", "--store", url, "--job", JOB]) == 0
        assert capsys.readouterr().out.strip() == (
            f"deleted job {JOB}: 7 key(s) (1 plan, 3 spec, 3 split)"
        )
    else:
        assert main(["delete", "--store", url, "--job", JOB]) == 2
        assert "live worker(s): w1, w2; nothing was removed" in capsys.readouterr().err
        assert main(["delete", "--store", url, "--job", JOB, "--force"]) == 0
        assert capsys.readouterr().out.startswith(f"deleted job {JOB}: 11 key(s) (")
    assert main(["status", "--store", url, "--job", JOB]) == 2
    assert "(jobs here: other-job)" in capsys.readouterr().err


async def demo_beside_a_job_of_another_ttl(root_url: UrlOf) -> None:
    """The tutorial's job (TTL 15 s) in a store's default namespace does not stop the demo
    (TTL 3 s) run against the same store URL: the demo runs in a namespace of its own."""
    async with open_store(root_url(15)) as store:
        await seed_job(store)
    lines: list[str] = []
    options = DemoOptions(
        store_url=root_url(None), workers=2, splits=6, seed=3, chaos=False, duration=4
    )
    assert "namespace=spate-demo" in demo_store_url(options)
    result = await run_demo(options, PlainDisplay(lines.append))
    print_result(result, lines.append)
    assert result.ok, (result.problems, lines)
    # The user's job is where it was, untouched, with its TTL.
    async with open_store(root_url(None), read_only=True) as store:
        assert store.ephemeral_ttl == 15
        assert await store.get(Keyspace.DURABLE, KEYS.plan) is not None
