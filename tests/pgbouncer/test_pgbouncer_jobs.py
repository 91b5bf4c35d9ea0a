"""Enqueue and workers through a transaction-mode PgBouncer (``WORKHORSE_POOLER=transaction``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from workhorse import App, JobContext


@pytest.fixture
async def bounced(bouncer_url: str, migrated_schema: str, pooled: None) -> AsyncIterator[App]:
    """An App whose every connection goes through the bouncer, on a migrated schema."""
    app = App(bouncer_url, schema=migrated_schema)
    yield app
    await app.close()


def declare(app: App) -> Any:
    @app.job(name="echo", tenant="none")
    async def echo(ctx: JobContext, payload: dict[str, Any]) -> object:
        return payload["n"]

    return echo


def count(app: App, state: str) -> int:
    """Jobs in ``state``, read on a direct connection (not the bouncer)."""
    with psycopg.connect(DIRECT[0]) as conn:
        row = conn.execute(f"select count(*) from {app.schema}.jobs where state = %s", (state,)).fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row else 0


DIRECT: list[str] = []


@pytest.fixture(autouse=True)
def _direct(database_url: str) -> None:
    DIRECT[:] = [database_url]


async def test_connects_through_the_bouncer(bounced: App) -> None:
    # workhorse sent `options=-c TimeZone=UTC`, which PgBouncer refuses at startup
    echo = declare(bounced)
    ref = await echo.enqueue({"n": 1})
    job = await bounced.get_job(ref.id)
    assert job is not None and job.state == "ready"


async def test_many_enqueues_never_collide_on_prepared_statements(bounced: App) -> None:
    # psycopg prepares a statement after 5 runs, and the single enqueue prepares its own at once:
    # through a transaction pooler the next run meets another server connection
    echo = declare(bounced)
    results = await asyncio.gather(*(echo.enqueue({"n": i}) for i in range(200)), return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert count(bounced, "ready") == 200


async def test_enqueue_in_the_callers_transaction(bounced: App, bouncer_url: str) -> None:
    echo = declare(bounced)
    async with await psycopg.AsyncConnection.connect(bouncer_url, prepare_threshold=None) as conn:
        async with conn.transaction():
            kept = [(await echo.enqueue({"n": i}, conn=conn)).id for i in range(12)]
        async with conn.transaction(force_rollback=True):
            await echo.enqueue({"n": 99}, conn=conn)
    assert all(await asyncio.gather(*(bounced.get_job(i) for i in kept)))
    assert count(bounced, "ready") == 12


def test_two_workers_drain_every_job(bouncer_url: str, migrated_schema: str, pooled: None) -> None:
    app = App(bouncer_url, schema=migrated_schema)
    echo = declare(app)
    asyncio.run(_enqueue(echo, 300))
    workers = [app.worker(concurrency=10) for _ in range(2)]
    threads = [threading.Thread(target=lambda w=w: asyncio.run(w.run(burst=True))) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    asyncio.run(app.close())
    assert count(app, "done") == 300


async def _enqueue(echo: Any, n: int) -> None:
    await echo.enqueue_many([{"n": i} for i in range(n)])
    await echo.app.close()
