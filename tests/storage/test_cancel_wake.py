"""An operator's cancel of a running job NOTIFYs its queue (``beat:<queue>``; the memory driver
calls its cancel subscribers): the worker holding it renews at once, finds the claim gone and
cancels the body — in well under its 10 s heartbeat."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from workhorse import App, JobContext

HEARTBEAT = 10.0  # a 30 s visibility window renews every 10 s: the wake must beat it by far
WITHIN = 3.0


async def cancelled_within(app: App, cancel: Callable[[str], Awaitable[object]]) -> float:
    started = asyncio.Event()
    stopped = asyncio.Event()

    @app.job(name="runaway", queue="rq", tenant="none")
    async def runaway(ctx: JobContext, payload: None) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    ref = await runaway.enqueue(None)
    worker = app.worker(visibility_timeout="30s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(0.5)  # the worker's first beat is behind it: the next is ~10 s away
        asked = time.monotonic()
        await cancel(ref.id)
        await asyncio.wait_for(stopped.wait(), HEARTBEAT)
        took = time.monotonic() - asked
    finally:
        await worker.stop()
        await task
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "cancelled"
    assert worker.stats.completed == 0 and worker.stats.settle_missed == 0
    return took


@pytest.mark.parametrize("how", ["one", "bulk"])
async def test_a_cancelled_running_body_stops_at_once(app: App, how: str) -> None:
    async def one(job_id: str) -> object:
        return await app.admin.cancel(job_id)

    async def bulk(job_id: str) -> object:
        done = await app.admin.cancel_many(state="running", queue="rq")
        assert (done.affected, done.remaining) == (1, 0)
        return done

    took = await cancelled_within(app, one if how == "one" else bulk)
    assert took < WITHIN, f"the body stopped {took:.1f}s after the cancel: the heartbeat, not the wake, found it"
