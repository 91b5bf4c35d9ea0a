"""The retention purge beside itself and beside an operator, on PostgreSQL: two (or four) purges
at once on one schema, each App its own pool, remove each row exactly once and never error; a
requeue of a finished job racing the purge either lands (and the job is live and kept) or finds
the job already purged, never both and never neither."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from workhorse import App, JobContext, Retention
from workhorse.errors import JobNotFoundError

OLD = 3_000


@pytest.fixture
async def apps(pg_app: App) -> AsyncIterator[list[App]]:
    """Two more Apps on pg_app's schema, each with a pool of its own."""
    others = [App(pg_app.database_url, schema=pg_app.schema) for _ in range(2)]
    try:
        yield others
    finally:
        for app in others:
            await app.close()


def declare(app: App) -> None:
    @app.job(name="old", tenant="none")
    async def old(ctx: JobContext, payload: int) -> int:
        return payload


async def old_done_rows(app: App, n: int, *, steps: bool) -> list[str]:
    """``n`` jobs enqueued, then finished ``done`` two days ago, one second apart (oldest first:
    the order the purge walks), each with one step when ``steps``. Answers their ids, oldest first."""
    declare(app)
    handle = app.jobs["old"]
    for start in range(0, n, 1_000):
        await handle.enqueue_many(list(range(start, min(n, start + 1_000))))
    s = app.schema
    async with await psycopg.AsyncConnection.connect(app.database_url, autocommit=True) as conn:
        await conn.execute(
            f"update {s}.jobs set state = 'done', attempt = 1, "
            "finished_at = now() - interval '2 days' - (payload::text::int) * interval '-1 second'"
        )
        if steps:
            await conn.execute(
                f"insert into {s}.steps (job_id, name, seq, state, attempt, result) "
                f"select id, 'only', 1, 'done', 1, '1'::jsonb from {s}.jobs"
            )
        cursor = await conn.execute(f"select id::text from {s}.jobs order by finished_at")
        return [row[0] for row in await cursor.fetchall()]


async def counts(app: App) -> tuple[int, int]:
    s = app.schema
    async with await psycopg.AsyncConnection.connect(app.database_url, autocommit=True) as conn:
        cursor = await conn.execute(f"select (select count(*) from {s}.jobs), (select count(*) from {s}.steps)")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("purgers", [2, 4])
async def test_purges_at_once_remove_each_row_exactly_once(pg_app: App, apps: list[App], purgers: int) -> None:
    await old_done_rows(pg_app, OLD, steps=True)
    assert await counts(pg_app) == (OLD, OLD)
    policy = Retention(done="1d", batch=100)
    for app in apps:
        app.retention = policy
    reports = await asyncio.gather(*(apps[i % 2].admin.purge() for i in range(purgers)))
    print(f"{purgers} purgers removed {[r.removed['done'] for r in reports]}")
    assert sum(r.removed["done"] for r in reports) == OLD, [r.removed["done"] for r in reports]
    assert sum(r.steps for r in reports) == OLD, [r.steps for r in reports]
    assert all(r.removed["cancelled"] == r.removed["failed"] == r.removed["dead"] == 0 for r in reports)
    assert await counts(pg_app) == (0, 0)
    again = await asyncio.gather(*(app.admin.purge() for app in apps))
    assert [r.total for r in again] == [0, 0]


async def test_a_dry_run_beside_a_purge_removes_nothing_and_does_not_block_it(pg_app: App, apps: list[App]) -> None:
    await old_done_rows(pg_app, OLD, steps=False)
    policy = Retention(done="1d", batch=100)
    for app in apps:
        app.retention = policy
    real, dry = await asyncio.gather(apps[0].admin.purge(), apps[1].admin.purge(dry_run=True))
    assert real.removed["done"] == OLD
    assert dry.dry_run is True and 0 <= dry.removed["done"] <= OLD
    assert await counts(pg_app) == (0, 0)


async def requeue_all(app: App, ids: list[str]) -> dict[str, bool]:
    """Requeue each id in turn: True when the requeue landed, False when the job was gone."""
    outcome: dict[str, bool] = {}
    for job_id in ids:
        try:
            job = await app.admin.requeue(job_id)
        except JobNotFoundError:
            outcome[job_id] = False
        else:
            assert job.state == "ready" and job.id == job_id
            outcome[job_id] = True
    return outcome


@pytest.mark.parametrize("round_", range(3))
async def test_a_requeue_racing_the_purge_never_loses_the_job(pg_app: App, apps: list[App], round_: int) -> None:
    rows = 1_000
    ids = await old_done_rows(pg_app, rows, steps=True)
    purger, operator = apps
    purger.retention = Retention(done="1d", batch=10)
    # The purge walks oldest first; four requeuers walk newest first, interleaved, so the two
    # meet somewhere in the middle and race over the same rows.
    newest_first = ids[::-1]
    slices = [newest_first[i::4] for i in range(4)]
    purging = asyncio.create_task(purger.admin.purge())
    outcomes = await asyncio.gather(*(requeue_all(operator, part) for part in slices))
    purged = await purging
    outcome = {k: v for part in outcomes for k, v in part.items()}
    assert len(outcome) == rows
    landed = {job_id for job_id, ok in outcome.items() if ok}
    for job_id in ids:
        job = await pg_app.admin.get(job_id)
        if job_id in landed:
            assert job is not None and job.state == "ready", (job_id, job)
        else:
            assert job is None, (job_id, job)
    assert purged.removed["done"] == rows - len(landed)
    assert purged.steps == rows - len(landed)
    # The requeued jobs are live: a purge with every age at 0 keeps all of them.
    purger.retention = Retention(done=0, cancelled=0, failed=0, dead=0, events=0, workers=0, counters=0)
    assert (await purger.admin.purge()).total == 0
    assert await counts(pg_app) == (len(landed), len(landed))
    print(f"round {round_}: {len(landed)} of {rows} requeued before the purge reached them")
