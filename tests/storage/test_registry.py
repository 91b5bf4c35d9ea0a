"""The worker registry: a row per live worker, renewed by the heartbeat, gone on stop."""

from __future__ import annotations

import asyncio
import os

from workhorse import App, JobContext
from workhorse.types import WorkerInfo


async def test_a_running_worker_is_listed_and_forgotten_on_stop(app: App) -> None:
    started = asyncio.Event()

    @app.job(queue="emails", tenant="none")
    async def hold(ctx: JobContext, payload: None) -> None:
        started.set()
        await asyncio.sleep(0.2)

    await hold.enqueue(None)
    worker = app.worker(concurrency={"emails": 3}, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    (live,) = await app.list_workers()
    assert (live.id, live.pid, live.queues, live.concurrency) == (
        worker.id,
        os.getpid(),
        ["emails"],
        {"emails": 3},
    )
    assert live.expires_at is not None and live.last_seen_at is not None
    assert live.to_dict()["id"] == worker.id
    await worker.stop()
    await task
    assert await app.list_workers() == []


async def test_rows_expire_after_their_ttl_and_a_beat_reports_a_missing_row(app: App) -> None:
    info = WorkerInfo(id="w-gone", host="h", pid=1, queues=["default"], concurrency={"default": 1})
    await app.driver.register_worker(info, ttl=0.05)
    assert [w.id for w in await app.list_workers()] == ["w-gone"]
    await asyncio.sleep(0.15)
    assert await app.list_workers() == []
    beat = await app.driver.heartbeat("w-never-registered", [], 30)
    assert beat.registered is False and beat.held == set()
    await app.driver.register_worker(info, ttl=30)
    assert (await app.driver.heartbeat("w-gone", [], 30)).registered is True
