"""``App(driver=PostgresDriver(...))``: the app's own calls use the caller's driver, and a worker
on that app is a full Postgres worker (its own role connections, woken by LISTEN), not an
in-process one. The caller owns the driver: ``app.close()`` leaves it open."""

from __future__ import annotations

import asyncio
import time

import pytest

from workhorse import App, ConfigurationError, JobContext
from workhorse.drivers.postgres import PostgresDriver


async def test_a_worker_on_a_given_postgres_driver_is_woken_by_listen(database_url: str, schema: str) -> None:
    given = PostgresDriver(database_url, schema=schema, role="mine", min_size=1, max_size=2)
    app = App(driver=given)
    assert (app.schema, app.database_url, app.is_memory) == (schema, database_url, False)
    await app.migrate()
    started = asyncio.Event()

    @app.job(tenant="none")
    async def ping(ctx: JobContext, payload: None) -> None:
        started.set()

    # Polling alone would take a minute; only the LISTEN wake can start the job within seconds.
    worker = app.worker(concurrency=1, poll_interval="60s", handle_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(100):
            if await app.list_workers():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the listener subscribes after the registry row lands
        sent = time.monotonic()
        await ping.enqueue(None)
        await asyncio.wait_for(started.wait(), 10)
        assert time.monotonic() - sent < 5, "the job waited for a poll: the worker did not LISTEN"
    finally:
        await worker.stop()
        await running
    assert app.driver is given
    await app.close()
    assert (await ping.enqueue(None)).id  # the caller's driver is still open after app.close()
    await given.close()


@pytest.mark.parametrize(
    ("url", "schema", "named"),
    [
        ("postgresql://postgres@127.0.0.1:1/elsewhere", None, "database_url"),
        (None, "another_schema", "schema="),
    ],
)
def test_a_given_driver_with_a_different_url_or_schema_is_refused(
    database_url: str, url: str | None, schema: str | None, named: str
) -> None:
    given = PostgresDriver(database_url, schema="given_schema", role="mine")
    with pytest.raises(ConfigurationError) as refused:
        App(url, driver=given, schema=schema)
    assert refused.value.code == "CONFIG_INVALID"
    assert named in refused.value.cause and refused.value.fix
    same = App(database_url, driver=given, schema="given_schema")  # agreeing with the driver is fine
    assert (same.schema, same.database_url) == ("given_schema", database_url)
