"""An app whose one job is capped at one run fleet-wide: the idle test of issue 14 holds its slot
with a run of a worker that is not there, so a backlog waits behind the cap."""

from __future__ import annotations

import os

from workhorse import App, JobContext

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


@app.job(name="capped", tenant="none", concurrency=1)
async def capped(ctx: JobContext, payload: int) -> int:
    return payload


__all__ = ["app"]
