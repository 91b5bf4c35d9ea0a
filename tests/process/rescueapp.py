"""The app of the crash-recovery matrix (tests/process/test_rescue_matrix.py), run in real worker
subprocesses (`workhorse --app rescueapp:app worker`).

``RESCUE_SCENARIO`` picks what the app declares beside the job that is killed mid-body
(``victim``: no cap counts it, the case a filtered claim stranded): nothing, a job cap or a keyed
cap on another job, ``Limits(per_tenant=)``, ``Limits(per_queue=)`` on another queue,
``Limits(total=)`` (which does count it), or a rate. ``partial`` is the same schema seen by an
app that does not declare ``victim``: its worker serves the queue but cannot run the job.

Every body writes a ledger row as it starts and ends (tests/process/conftest.py's ``ledger``).
"""

from __future__ import annotations

import asyncio
import os

import psycopg

from workhorse import App, Concurrency, JobContext, Limits, Rate, Retry

URL = os.environ["WORKHORSE_DATABASE_URL"]
SCHEMA = os.environ["WORKHORSE_TEST_SCHEMA"]
SCENARIO = os.environ.get("RESCUE_SCENARIO", "none")

LIMITS: dict[str, Limits | None] = {
    "none": None,
    "job_cap": None,
    "keyed_cap": None,
    "per_tenant": Limits(per_tenant=5),
    "per_queue": Limits(per_queue={"other": 3}),
    "total": Limits(total=50),
    "rate": Limits(rate_per_tenant=Rate(100, per="1s")),
    "paused": Limits(per_tenant=5),
    "unknown_name": None,
}

app = App(URL, schema=SCHEMA, limits=LIMITS[SCENARIO])
partial = App(URL, schema=SCHEMA, limits=LIMITS[SCENARIO])


def ledger(ctx: JobContext, event: str) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            f"insert into {SCHEMA}.ledger (job_id, attempt, pid, event) values (%s, %s, %s, %s)",  # type: ignore[arg-type]
            (ctx.id, ctx.attempt, os.getpid(), event),
        )


@app.job(name="victim", tenant="none", retry=Retry(attempts=3, base=0))
async def victim(ctx: JobContext, payload: dict[str, float]) -> int:
    """Sleeps through its first attempt (the test SIGKILLs its worker meanwhile), then finishes."""
    await asyncio.to_thread(ledger, ctx, "start")
    if ctx.attempt == 1:
        await asyncio.sleep(payload.get("sleep", 60))
    await asyncio.to_thread(ledger, ctx, "end")
    return ctx.attempt


async def quick(ctx: JobContext, payload: object) -> None:
    """The bystanders' body: nothing (they exist for what they declare)."""


# What each scenario declares beside the victim; the partial app declares the same, and no victim.
for declaring in (app, partial):
    declaring.job(name="bystander", tenant=str)(quick)
    if SCENARIO == "job_cap":
        declaring.job(name="capped", tenant="none", concurrency=2)(quick)
    elif SCENARIO == "keyed_cap":
        declaring.job(name="keyed", tenant="none", concurrency=Concurrency(2, key=str))(quick)
    elif SCENARIO == "per_queue":
        declaring.job(name="elsewhere", queue="other", tenant="none")(quick)
