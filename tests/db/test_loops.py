"""A loop that ends does not strand its connections (issue 16, defect 4): `asyncio.run(job.enqueue(...))`
called again and again keeps one loop's worth of connections open, not one pool per call."""

from __future__ import annotations

import asyncio
import time

import psycopg

from workhorse import App, JobContext


def app_connections(database_url: str, name: str, *, at_most: int) -> int:
    """The app's connections to ``name``, waited for (up to 10 s) to fall to ``at_most``: a
    backend whose client closed leaves pg_stat_activity a moment later."""
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from pg_stat_activity where datname = %s and application_name = 'workhorse:app'",
                (name,),
            ).fetchone()
        assert row is not None
        if int(row[0]) <= at_most or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.05)


def test_short_lived_loops_do_not_strand_their_pools(database_url: str, dedicated_database: str) -> None:
    name = str(psycopg.conninfo.conninfo_to_dict(dedicated_database)["dbname"])
    app = App(dedicated_database)

    @app.job(name="hello", tenant="none")
    async def hello(ctx: JobContext, payload: int) -> int:
        return payload

    asyncio.run(app.migrate())
    for i in range(6):
        asyncio.run(hello.enqueue(i))
    # the last loop's pool is the only one left open (its loop ended too: the next call closes it)
    assert app_connections(database_url, name, at_most=3) <= 3
    with psycopg.connect(dedicated_database, autocommit=True) as conn:
        row = conn.execute("select count(*) from workhorse.jobs").fetchone()
    assert row == (6,)

    async def closed_with_the_app() -> None:
        async with app:  # the documented lifecycle: this loop's connections close at the end
            await hello.enqueue(99)

    asyncio.run(closed_with_the_app())
    assert app_connections(database_url, name, at_most=0) == 0
