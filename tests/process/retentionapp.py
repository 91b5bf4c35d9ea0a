"""The app of the retention process tests (`workhorse --app retentionapp:app worker`): a short
retention policy, a cron task that never comes due during a test (so the worker runs its
scheduler role and stands for leader), and jobs that record each run in the ledger table.

``taskless`` is the same jobs and policy with no task declared: what a worker of an app without
any cron task does about retention."""

from __future__ import annotations

import asyncio
import os

import psycopg

from workhorse import App, JobContext, Retention

URL = os.environ["WORKHORSE_DATABASE_URL"]
SCHEMA = os.environ["WORKHORSE_TEST_SCHEMA"]
# Every finished state at 0: a done row goes at the leader's next purge. `every` is short; the
# leader still purges only after a round (every 15 s with nothing due).
POLICY = Retention(done=0, cancelled=0, failed=0, dead=0, events=0, every="1s", batch=50)


def record(job_id: str, attempt: int, event: str) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            f"insert into {SCHEMA}.ledger (job_id, attempt, pid, event) values (%s, %s, %s, %s)",
            (job_id, attempt, os.getpid(), event),
        )


def declare(app: App) -> None:
    @app.job(name="tick", tenant="none")
    async def tick(ctx: JobContext, payload: int) -> int:
        await asyncio.to_thread(record, ctx.id, ctx.attempt, "ran")
        return payload

    @app.job(name="hold", tenant="none")
    async def hold(ctx: JobContext, payload: None) -> None:
        await asyncio.to_thread(record, ctx.id, ctx.attempt, "held")
        await asyncio.sleep(3600)  # running for the whole test; handed back at the drain

    @app.job(name="napper", tenant="none")
    async def napper(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("before", record, ctx.id, ctx.attempt, "napping")
        await ctx.step.sleep("nap", "1h")  # suspended for the whole test


app = App(URL, schema=SCHEMA, retention=POLICY)
declare(app)


@app.task(name="yearly-report", cron="0 0 1 1 *", tenant="none")
async def yearly_report(ctx: JobContext, payload: dict[str, str]) -> None:
    return None


taskless = App(URL, schema=SCHEMA, retention=POLICY)
declare(taskless)

__all__ = ["app", "taskless"]
