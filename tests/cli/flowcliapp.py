"""An app with fleet-wide caps for the CLI tests (``--app flowcliapp:app``)."""

from __future__ import annotations

import os

from workhorse import App, JobContext, Limits

app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"], limits=Limits(per_tenant=5))


@app.job(name="flow.one", tenant=lambda p: p["org"], concurrency=1)
async def one(ctx: JobContext, payload: dict[str, str]) -> None:
    return None
