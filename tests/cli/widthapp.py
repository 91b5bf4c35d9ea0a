"""An app for the width tests (``--app widthapp:app``): a job and a cron task with ordinary names,
and (issue 29) what an operator reads at 80 columns: a long module-qualified name that dies with
an error, a job of durable steps suspended after its first, a job capped at one run at a time,
and a quick one whose completions make the rates."""

from __future__ import annotations

import asyncio
import os

from workhorse import App, JobContext, TerminalError

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


@app.job(name="reports.build", queue="reports", tenant=lambda p: p["org"])
async def build(ctx: JobContext, payload: dict[str, str]) -> None:
    return None


@app.task(name="reports.nightly", cron="0 3 * * *", tenant="none")
async def nightly(ctx: JobContext, payload: dict[str, str]) -> None:
    return None


@app.job(name="accfirst.nightly_invoice_export", queue="batch", tenant="none")
async def export(ctx: JobContext, payload: None) -> None:
    raise TerminalError("invoice 2024-0042 has no customer on record")


@app.job(name="reports.assemble", queue="batch", tenant="none")
async def assemble(ctx: JobContext, payload: None) -> None:
    await ctx.step.run("load-the-customer-ledger", lambda: {"rows": 1234})
    await ctx.step.sleep("cool-off-before-sending", "1h")


@app.job(name="reports.capped", queue="reports", tenant="none", concurrency=1)
async def capped(ctx: JobContext, payload: int) -> None:
    return None


@app.job(name="reports.quick", queue="batch", tenant="none")
async def quick(ctx: JobContext, payload: int) -> None:
    return None


@app.job(name="reports.longrun", queue="slow", tenant="none")
async def longrun(ctx: JobContext, payload: None) -> None:
    ctx.progress((3, 10), "section 3 of 10")
    while not ctx.draining:
        await asyncio.sleep(0.01)
    ctx.hand_back()
