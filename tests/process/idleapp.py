"""procapp's jobs plus one cron task that never comes due during a test, so `workhorse worker`
runs its scheduler role too: the idle budget of issue 3 counts the worker WITH that role."""

from __future__ import annotations

from procapp import app

from workhorse import JobContext


@app.task(name="yearly-report", cron="0 0 1 1 *", tenant="none")
async def yearly_report(ctx: JobContext, payload: dict[str, str]) -> None:
    return None


__all__ = ["app"]
