"""A worker's start against a database that just lost its sessions, or has no schema: it starts
on a fresh connection, or fails with the error; either way ``stop()`` returns."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from workhorse import App, JobContext, SchemaError
from workhorse.drivers.postgres import PostgresDriver


async def test_a_worker_that_failed_to_start_can_be_stopped(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)  # never migrated

    @app.job(name="never", tenant="none")
    async def never(ctx: JobContext, payload: object) -> None:
        return None

    worker = app.worker()
    with pytest.raises(SchemaError):
        await worker.run()
    await asyncio.wait_for(worker.stop(), 5)  # it waited forever for a run that never began
    await app.close()


async def test_a_worker_starts_after_its_apps_sessions_were_terminated(database_url: str, schema: str) -> None:
    """The App's pooled sessions were ended (a restart, an operator) just before the worker starts:
    its schema check meets a dead one, and runs again on a live one instead of failing the start."""
    role = f"start{uuid.uuid4().hex[:8]}"
    app = App(driver=PostgresDriver(database_url, schema=schema, role=role, min_size=1, max_size=4))
    await app.migrate()
    ran: list[int] = []

    @app.job(name="starter", tenant="none")
    async def starter(ctx: JobContext, payload: int) -> None:
        ran.append(payload)

    await starter.enqueue(1)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity where application_name = %s",
            (f"workhorse:{role}",),
        )
    try:
        await asyncio.wait_for(app.worker().run(burst=True), 30)
        assert ran == [1]
    finally:
        assert isinstance(app.driver, PostgresDriver)
        await app.driver.close()
