"""An app with one job and one cron task, for the width tests (``--app widthapp:app``)."""

from __future__ import annotations

import os

from workhorse import App, JobContext

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


@app.job(name="reports.build", queue="reports", tenant=lambda p: p["org"])
async def build(ctx: JobContext, payload: dict[str, str]) -> None:
    return None


@app.task(name="reports.nightly", cron="0 3 * * *", tenant="none")
async def nightly(ctx: JobContext, payload: dict[str, str]) -> None:
    return None
