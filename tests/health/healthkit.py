"""Helpers for the health tests: dead rows made on purpose, and the collector's count of them."""

from __future__ import annotations

from typing import Any

import psycopg

from workhorse import App


async def jobs_with_dead_rows(app: App, *, jobs: int, updates: int) -> None:
    """``jobs`` ready jobs, each row then updated ``updates`` times: ``jobs * updates`` dead rows
    (autovacuum is off on the tests' server), flushed to the statistics collector at once."""
    handle = app.jobs["health.noop"]
    for start in range(0, jobs, 1000):
        await handle.enqueue_many([{"i": i} for i in range(start, min(jobs, start + 1000))])
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        for _ in range(updates):
            conn.execute(f"update {app.schema}.jobs set priority = priority")  # type: ignore[arg-type]
        conn.execute("select pg_stat_force_next_flush()")


def declare(app: App) -> None:
    @app.job(name="health.noop", tenant="none")
    async def noop(ctx: Any, payload: Any) -> None:
        return None


def dead_rows(url: str, schema: str, table: str = "jobs") -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "select n_dead_tup from pg_stat_user_tables where schemaname = %s and relname = %s", (schema, table)
        ).fetchone()
    assert row is not None
    return int(row[0])
