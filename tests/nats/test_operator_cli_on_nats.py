"""`spate status` and `spate requeue` against a job on a real NATS JetStream KV."""

from __future__ import annotations

import json

import pytest
import trio

from spate.cli import main
from spate_stores import open_store
from spate_testing.servers.nats import NatsServer
from tests.runner.test_ops import JOB, seed_job

pytestmark = pytest.mark.nats


def test_status_and_requeue_on_nats(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = spate_nats_server.store_url(namespace)

    async def seed() -> None:
        async with open_store(url) as store:
            await seed_job(store)

    trio.run(seed)
    assert main(["status", "--store", url, "--job", JOB, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["counts"]["quarantined"] == 1
    assert [s["id"] for s in document["splits"]] == ["b", "c", "a"]  # quarantined first
    assert main(["requeue", "--store", url, "--job", JOB, "b"]) == 0
    assert main(["requeue", "--store", url, "--job", JOB, "b"]) == 2
    assert "not quarantined" in capsys.readouterr().err
