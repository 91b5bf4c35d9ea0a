"""A worker SIGTERMed while a delivery's POST is on the wire finishes that POST, records it in the
ledger, settles the job and exits 0; the delivery queued behind it is never started (claiming
stops at the signal) and no request is made twice."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from processkit import job_state, spawner, wait_for

from webhookkit import Reply, serving
from workhorse import App
from workhorse.webhooks import WebhookPolicy

pytestmark = pytest.mark.process


def test_sigterm_during_a_slow_post_finishes_and_records_it(
    proc_env: dict[str, str], database_url: str, schema: str, tmp_path: Path
) -> None:
    app = App(database_url, schema=schema, webhooks=WebhookPolicy(allow_private=True, allow_http=True))
    with serving() as receiver:
        receiver.script = [Reply(200, body=b"took a while", delay=3)]

        async def setup() -> tuple[str, str, str]:
            try:
                endpoint = await app.webhooks.add_endpoint(receiver.url, tenant="o1")
                first = await app.webhooks.send(endpoint.id, "slow", {"n": 1})
                second = await app.webhooks.send(endpoint.id, "queued", {"n": 2}, key="behind")
                return endpoint.id, first.id, second.id
            finally:
                await app.close()

        endpoint_id, first, second = asyncio.run(setup())
        spawn = spawner("webhookapp:app", proc_env, tmp_path)
        start = next(spawn)
        worker = start("--concurrency", "1")
        try:
            wait_for(lambda: len(receiver.received) == 1, 60, "the first POST to reach the receiver")
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
        finally:
            spawn.close()
        log = (tmp_path / "worker-0.log").read_text()
        assert code == 0, log
        assert len(receiver.received) == 1, log  # finished once, never torn down and re-sent

    async def ledger() -> list[tuple[str, int | None, str | None]]:
        try:
            page = await app.webhooks.deliveries(endpoint_id)
            return [(d.status, d.response_code, d.response_excerpt) for d in page.deliveries]
        finally:
            await app.close()

    assert asyncio.run(ledger()) == [("delivered", 200, "took a while")]
    assert job_state(app, first) == ("done", 1)
    assert job_state(app, second) == ("ready", 0)  # never started: left for the next worker
