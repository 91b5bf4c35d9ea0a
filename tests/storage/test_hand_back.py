"""``ctx.draining`` and ``ctx.hand_back()``: a body working in units sees the drain
begin and hands its run back between two units, ready and unspent, long before the cut-off.
(Backfill passes use it; any job body may.)"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime

from workhorse import App, JobContext


async def test_an_async_body_hands_its_run_back_when_the_drain_begins(app: App) -> None:
    units: list[int] = []
    started = asyncio.Event()

    @app.job(tenant="none")
    async def in_units(ctx: JobContext, payload: None) -> None:
        started.set()
        for unit in range(10_000):
            if ctx.draining:
                ctx.hand_back()
            units.append(unit)
            await asyncio.sleep(0.01)

    ref = await in_units.enqueue(None)
    worker = app.worker(drain_timeout="60s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.1)
    began = time.monotonic()
    await worker.stop()
    stats = await task
    assert time.monotonic() - began < 10  # the cut-off is a minute away
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert stats.interrupted == 1 and stats.retried == 0 and stats.failed == 0
    assert 0 < len(units) < 10_000
    # the hand-back leaves a trace on the job: when, which worker, why, which attempt (issue 29)
    handed = job.handed_back
    assert handed is not None and job.to_dict()["handed_back"] == handed
    assert (handed["worker"], handed["attempt"]) == (worker.id, 1)
    assert handed["reason"] == "its worker drained and the body handed itself back (ctx.hand_back())"
    at = datetime.fromisoformat(handed["at"])
    assert at.tzinfo is not None and abs((at - job.updated_at).total_seconds()) < 1
    assert job.claims == 1  # ran once, no attempt spent: `show` says so


async def test_a_drains_cut_off_is_recorded_on_the_job(app: App) -> None:
    started = asyncio.Event()

    @app.job(tenant="none")
    async def stubborn(ctx: JobContext, payload: None) -> None:
        started.set()
        await asyncio.sleep(60)

    ref = await stubborn.enqueue(None)
    worker = app.worker(drain_timeout="200ms", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await worker.stop()
    await task
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert job.handed_back is not None and job.handed_back["worker"] == worker.id
    assert "did not end within the drain timeout" in job.handed_back["reason"]
    assert job.last_error is None and job.errors == []  # a hand-back is no failure


async def test_a_sync_body_hands_its_run_back_too(app: App) -> None:
    started = threading.Event()

    @app.job(tenant="none")
    def in_units(ctx: JobContext, payload: None) -> None:
        started.set()
        while True:
            if ctx.draining:
                ctx.hand_back()
            time.sleep(0.01)

    ref = await in_units.enqueue(None)
    worker = app.worker(drain_timeout="60s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.to_thread(started.wait, 10)
    began = time.monotonic()
    await worker.stop()
    stats = await task
    assert time.monotonic() - began < 10
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert stats.interrupted == 1


async def test_draining_is_false_while_the_worker_claims(app: App) -> None:
    seen: list[bool] = []

    @app.job(tenant="none")
    async def look(ctx: JobContext, payload: None) -> None:
        seen.append(ctx.draining)

    await look.enqueue(None)
    await app.worker(handle_signals=False).run(burst=True)
    assert seen == [False]
