"""The app the process tests run in real worker subprocesses (`workhorse --app procapp:app worker`).

Every body records its start in a ledger table on its own autocommit connection, so a test can
count executions (committed or not) and see overlaps, whatever happens to the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import psycopg

from workhorse import App, JobContext, Retry

URL = os.environ["WORKHORSE_DATABASE_URL"]
SCHEMA = os.environ["WORKHORSE_TEST_SCHEMA"]
app = App(URL, schema=SCHEMA)


def ledger(ctx: JobContext, event: str) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            f"insert into {SCHEMA}.ledger (job_id, attempt, pid, event) values (%s, %s, %s, %s)",  # type: ignore[arg-type]
            (ctx.id, ctx.attempt, os.getpid(), event),
        )


@app.job(name="slow_first_attempt", tenant="none", retry=Retry(attempts=3, base=0))
async def slow_first_attempt(ctx: JobContext, payload: dict[str, float]) -> str:
    await asyncio.to_thread(ledger, ctx, "start")
    if ctx.attempt == 1:
        await asyncio.sleep(payload.get("sleep", 60))
    await asyncio.to_thread(ledger, ctx, "end")
    return f"finished on attempt {ctx.attempt}"


@app.job(name="poison", tenant="none", retry=Retry(attempts=2, base=0))
def poison(ctx: JobContext, payload: None) -> None:
    ledger(ctx, "start")
    os.kill(os.getpid(), signal.SIGKILL)


@app.job(name="sleeper", tenant="none", retry=Retry(attempts=3, base=0))
async def sleeper(ctx: JobContext, payload: dict[str, float]) -> str:
    await asyncio.to_thread(ledger, ctx, "start")
    await asyncio.sleep(payload["sleep"])
    await asyncio.to_thread(ledger, ctx, "end")
    return "slept"


@app.job(name="blocker", tenant="none", retry=Retry(attempts=3, base=0))
async def blocker(ctx: JobContext, payload: dict[str, float]) -> str:
    await asyncio.to_thread(ledger, ctx, "start")
    time.sleep(payload["block"])  # blocks the event loop on purpose
    await asyncio.to_thread(ledger, ctx, "end")
    return "unblocked"


@app.job(name="noop", tenant="none")
async def noop(ctx: JobContext, payload: int) -> int:
    await asyncio.to_thread(ledger, ctx, "start")
    return payload


def file_ledger(ctx: JobContext, event: str) -> None:
    """A ledger that does not need the database: for tests that take the database away."""
    line = f"{ctx.id} {ctx.attempt} {os.getpid()} {event} {time.time()}\n"  # clock-ok: test ledger
    fd = os.open(os.environ["WORKHORSE_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.job(name="file_sleeper", tenant="none", retry=Retry(attempts=10, base=0.1))
async def file_sleeper(ctx: JobContext, payload: dict[str, float]) -> str:
    file_ledger(ctx, "start")
    try:
        await asyncio.sleep(payload["sleep"])
    finally:
        file_ledger(ctx, "end")
    return "slept"


# -- durable steps (tests/steps/test_process_steps.py) ---------------------------------------------


def record(job_id: str, attempt: int, event: str) -> str:
    """A step's side effect: one ledger row per execution, whatever happens to the worker after."""
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            f"insert into {SCHEMA}.ledger (job_id, attempt, pid, event) values (%s, %s, %s, %s)",  # type: ignore[arg-type]
            (job_id, attempt, os.getpid(), event),
        )
    return event


@app.job(name="two_steps", tenant="none", retry=Retry(attempts=3, base=0))
async def two_steps(ctx: JobContext, payload: dict[str, float]) -> list[str]:
    first = await ctx.step.run("first", record, ctx.id, ctx.attempt, "first")
    if ctx.attempt == 1:
        await asyncio.sleep(payload["pause"])  # the test SIGKILLs the worker here, between the steps
    second = await ctx.step.run("second", record, ctx.id, ctx.attempt, "second")
    return [first, second]


@app.job(name="step_napper", tenant="none", retry=Retry(attempts=1))
async def step_napper(ctx: JobContext, payload: dict[str, str]) -> str:
    await ctx.step.run("before", record, ctx.id, ctx.attempt, "before")
    await ctx.step.sleep("nap", payload["nap"])
    await ctx.step.run("after", record, ctx.id, ctx.attempt, "after")
    return "rested"


@app.job(name="hostile", tenant="none", retry=Retry(attempts=2, base=0))
async def hostile(ctx: JobContext, payload: None) -> None:
    """What a third party's API may hand a body: a lone surrogate (json.loads of "\\ud800") in an
    error message, a NUL in a progress message."""
    ctx.progress(0.5, "reading a\x00b.csv")
    raise RuntimeError("from-api" + json.loads('"\\ud800"'))
