"""Enqueue inside the caller's own transaction: the job exists if and only if it commits."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from workhorse import App, ConfigurationError, JobContext, PayloadError


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="task", tenant="none")
    async def task(ctx: JobContext, payload: object) -> None:
        return None

    return task


async def test_async_connection_rollback_and_commit(pg_app: App, database_url: str) -> None:
    task = declare(pg_app)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction(force_rollback=True):
            gone = await task.enqueue({"n": 1}, conn=conn)
            inside = await conn.execute(f"select count(*) from {pg_app.schema}.jobs")  # type: ignore[arg-type]
            assert (await inside.fetchone()) == (1,)  # visible inside the transaction
        assert await pg_app.get_job(gone.id) is None
        async with conn.transaction():
            kept = await task.enqueue({"n": 2}, conn=conn)
            assert await pg_app.get_job(kept.id) is None  # never visible before commit
    assert await pg_app.get_job(kept.id) is not None


async def test_sync_connection_with_enqueue_sync(pg_app: App, database_url: str) -> None:
    task = declare(pg_app)

    def work() -> tuple[str, str]:
        with psycopg.connect(database_url) as conn:
            with conn.transaction(force_rollback=True):
                gone = task.enqueue_sync({"n": 1}, conn=conn)
            with conn.transaction():
                kept = task.enqueue_sync({"n": 2}, conn=conn)
        return gone.id, kept.id

    gone, kept = await asyncio.to_thread(work)
    assert await pg_app.get_job(gone) is None
    assert await pg_app.get_job(kept) is not None


async def test_concurrent_duplicate_keys_half_rolled_back_leave_exactly_one_job(pg_app: App, database_url: str) -> None:
    task = declare(pg_app)

    async def attempt(i: int) -> bool:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            try:
                async with conn.transaction(force_rollback=i % 2 == 0):
                    ref = await task.enqueue({"i": i}, key="same", conn=conn)
                    await asyncio.sleep(0.01)
                    return not ref.duplicate and i % 2 == 1
            except psycopg.Error:
                return False

    committed_inserts = await asyncio.gather(*(attempt(i) for i in range(20)))
    jobs = (await pg_app.list_jobs()).jobs
    assert len(jobs) == 1
    assert sum(committed_inserts) == 1


async def test_conn_of_the_wrong_kind_is_refused(pg_app: App) -> None:
    task = declare(pg_app)
    with pytest.raises(ConfigurationError) as refused:
        await task.enqueue({"n": 1}, conn=object())
    assert refused.value.code == "CONN_INVALID"


async def test_memory_driver_refuses_conn() -> None:
    app = App(driver="memory")
    task = declare(app)
    with pytest.raises(ConfigurationError) as refused:
        await task.enqueue({"n": 1}, conn=object())
    assert refused.value.code == "CONN_UNSUPPORTED"


async def test_a_copied_batch_joins_the_callers_transaction(pg_app: App, database_url: str) -> None:
    task = declare(pg_app)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction(force_rollback=True):
            gone = await task.enqueue_many([{"n": i} for i in range(100)], conn=conn)
        async with conn.transaction():
            kept = await task.enqueue_many([{"n": i} for i in range(100)], conn=conn)
    assert await pg_app.get_job(gone[0].id) is None
    assert len((await pg_app.list_jobs(limit=200)).jobs) == 100
    assert await pg_app.get_job(kept[-1].id) is not None


async def test_a_refused_streamed_batch_leaves_the_callers_transaction_usable(pg_app: App, database_url: str) -> None:
    task = declare(pg_app)
    bad: list[object] = [{"n": i} for i in range(500)]
    bad[400] = {"n": float("nan")}
    async with await psycopg.AsyncConnection.connect(database_url) as conn, conn.transaction():
        kept = await task.enqueue({"n": -1}, conn=conn)
        with pytest.raises(PayloadError):
            await task.enqueue_many(bad, conn=conn)
        after = await task.enqueue_many([{"n": i} for i in range(100)], conn=conn)
    assert await pg_app.get_job(kept.id) is not None
    assert len((await pg_app.list_jobs(limit=200)).jobs) == 101
    assert await pg_app.get_job(after[0].id) is not None
