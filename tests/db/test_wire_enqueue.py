"""The single enqueue's wire statement (drivers/_wire.py): prepared once per connection under a
fixed name, prepared again when the server forgot it, and failing with the same errors as every
other statement."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from workhorse import App, JobContext, SchemaError
from workhorse.drivers.postgres import PostgresDriver


def one_connection_app(database_url: str, schema: str) -> App:
    """One pooled connection, so every call below lands on the same server session."""
    return App(driver=PostgresDriver(database_url, schema=schema, min_size=1, max_size=1))


async def test_a_session_that_forgot_the_statement_prepares_it_again(database_url: str, schema: str) -> None:
    app = one_connection_app(database_url, schema)
    await app.migrate()

    @app.job(name="wire.task", tenant="none")
    async def task(ctx: JobContext, payload: dict[str, int]) -> None:
        return None

    try:
        first = await task.enqueue({"n": 1})
        assert isinstance(app.driver, PostgresDriver)
        async with app.driver.connection() as conn:
            cur = await conn.execute("select name from pg_prepared_statements where name = 'workhorse_insert_ready'")
            assert await cur.fetchall() == [{"name": "workhorse_insert_ready"}]
            await conn.execute("deallocate all")  # what a pooler's reset (DISCARD ALL) does
        second = await task.enqueue({"n": 2})
        jobs = {j.id: j for j in (await app.list_jobs()).jobs}
        assert jobs[first.id].payload == {"n": 1} and jobs[second.id].payload == {"n": 2}
        assert jobs[second.id].state == "ready" and jobs[second.id].name == "wire.task"
    finally:
        await app.close()


async def test_a_missing_table_is_a_schema_error(database_url: str, schema: str) -> None:
    app = one_connection_app(database_url, schema)
    await app.migrate()

    @app.job(name="wire.task", tenant="none")
    async def task(ctx: JobContext, payload: None) -> None:
        return None

    try:
        await task.enqueue(None)  # prepared on this session
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]
        with pytest.raises(SchemaError) as refused:
            await task.enqueue(None)
        assert refused.value.fix.startswith("workhorse migrate")
        await app.migrate()
        ref = await task.enqueue(None)  # the same session, after the refusal: still usable
        assert (await app.get_job(ref.id)) is not None
    finally:
        await app.close()


async def test_a_cancelled_enqueue_leaves_the_pool_usable(database_url: str, schema: str) -> None:
    app = one_connection_app(database_url, schema)
    await app.migrate()

    @app.job(name="wire.task", tenant="none")
    async def task(ctx: JobContext, payload: dict[str, int]) -> None:
        return None

    try:
        with psycopg.connect(database_url, autocommit=True) as locker, locker.transaction():
            locker.execute(f"lock table {schema}.jobs in exclusive mode")  # type: ignore[arg-type]
            blocked = asyncio.create_task(task.enqueue({"n": 1}))
            await asyncio.sleep(0.3)
            assert not blocked.done()
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
        ref = await asyncio.wait_for(task.enqueue({"n": 2}), timeout=10)
        jobs = (await app.list_jobs()).jobs
        assert [j.id for j in jobs] == [ref.id]  # the cancelled insert never landed
    finally:
        await app.close()
