"""Refusals that need a real server (or a missing one): each carries its code, cause and fix."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from workhorse import App, ConfigurationError, DatabaseError, JobCancelledError, JobContext, SchemaError
from workhorse._db.migrate import latest_version
from workhorse.leader.scheduler import Scheduler


async def test_an_unreachable_server_is_database_unavailable() -> None:
    app = App("postgresql://postgres@127.0.0.1:1/nowhere", schema="x")
    with pytest.raises(DatabaseError) as refused:
        await app.migrate()
    assert refused.value.code == "DATABASE_UNAVAILABLE"
    assert "WORKHORSE_DATABASE_URL" in refused.value.fix
    await app.close()


async def test_a_statement_postgres_refuses_is_translated(pg_app: App, database_url: str) -> None:
    @pg_app.job(name="task", tenant="none")
    async def task(ctx: JobContext, payload: None) -> None:
        return None

    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction(force_rollback=True):
            with pytest.raises(psycopg.errors.DivisionByZero):
                await conn.execute("select 1 / 0")
        await conn.execute("begin")
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("select 1 / 0")
        with pytest.raises(DatabaseError) as refused:  # the caller's transaction is already aborted
            await task.enqueue(None, conn=conn)
        await conn.execute("rollback")
    assert refused.value.code == "DATABASE_ERROR"
    assert "InFailedSqlTransaction" in refused.value.cause
    assert (await pg_app.list_jobs()).jobs == []


async def test_a_schema_behind_the_code_is_refused(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"delete from {pg_app.schema}.migrations where version = %s",  # type: ignore[arg-type]
            (latest_version(),),
        )

    @pg_app.job(tenant="none")
    async def job(ctx: JobContext, payload: None) -> None:
        return None

    with pytest.raises(SchemaError) as refused:
        await pg_app.worker().run(burst=True)
    assert refused.value.code == "SCHEMA_BEHIND"
    assert refused.value.fix.startswith("workhorse migrate")


async def test_a_worker_or_scheduler_runs_once_at_a_time(pg_app: App) -> None:
    @pg_app.job(tenant="none")
    async def job(ctx: JobContext, payload: None) -> None:
        return None

    @pg_app.task(name="hourly", cron="@hourly", tenant="none")
    async def hourly(ctx: JobContext, payload: dict[str, str]) -> None:
        return None

    worker = pg_app.worker(handle_signals=False)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.2)
    with pytest.raises(ConfigurationError) as twice:
        await worker.run()
    assert twice.value.code == "WORKER_RUNNING"
    await worker.stop()
    await running

    scheduler = Scheduler(pg_app, handle_signals=False)
    leading = asyncio.create_task(scheduler.run())
    await asyncio.sleep(0.2)
    with pytest.raises(ConfigurationError) as again:
        await scheduler.run()
    assert again.value.code == "SCHEDULER_RUNNING"
    await scheduler.stop()
    await leading


def test_raise_if_cancelled_carries_its_code() -> None:
    import logging

    ctx = JobContext(
        id="j", name="n", queue="q", tenant=None, attempt=1, max_attempts=1, worker_id="w",
        logger=logging.getLogger("test"),
    )  # fmt: skip
    ctx.raise_if_cancelled()  # not cancelled: nothing happens
    ctx.mark_cancelled("timeout")
    with pytest.raises(JobCancelledError) as stopped:
        ctx.raise_if_cancelled()
    assert stopped.value.code == "JOB_CANCELLED" and "timeout" in stopped.value.cause
    assert ctx.wait_cancelled(0) is True  # an event made after the cancel still answers it
