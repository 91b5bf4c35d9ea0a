"""Helpers for the health tests: dead rows made on purpose, and the collector's count of them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import psycopg

from workhorse import App


async def jobs_with_dead_rows(app: App, *, jobs: int, updates: int) -> datetime:
    """``jobs`` ready jobs, each row then updated ``updates`` times: ``jobs * updates`` dead rows
    (autovacuum is off on the tests' server), flushed to the statistics collector at once.
    Answers the server's clock once they are dead (for ``pinned_before``)."""
    handle = app.jobs["health.noop"]
    for start in range(0, jobs, 1000):
        await handle.enqueue_many([{"i": i} for i in range(start, min(jobs, start + 1000))])
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        for _ in range(updates):
            conn.execute(f"update {app.schema}.jobs set priority = priority")  # type: ignore[arg-type]
        conn.execute("select pg_stat_force_next_flush()")
        row = conn.execute("select clock_timestamp()").fetchone()
    assert row is not None
    return cast(datetime, row[0])


def pinned_before(url: str, when: datetime) -> bool:
    """Whether another session of the database holds a snapshot or a transaction id taken before
    ``when``: then rows that died before ``when`` may outlive a vacuum. On the shared test server
    another test (a million-row fill, a reader) may do so; check it BEFORE vacuuming (a holder that
    pins the vacuum is there before it starts)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity where datname = current_database() "
            "and pid <> pg_backend_pid() and coalesce(backend_xmin, backend_xid) is not null "
            "and xact_start < %s",
            (when,),
        ).fetchone()
    return row is not None and int(row[0]) > 0


def vacuum_count(url: str, schema: str, table: str = "jobs") -> int:
    """Vacuums (by anyone) of the table so far."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "select vacuum_count + autovacuum_count from pg_stat_user_tables where schemaname = %s and relname = %s",
            (schema, table),
        ).fetchone()
    assert row is not None
    return int(row[0])


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
