"""``ctx.progress`` through a real worker: visible while the job runs, throttled
to one write a second, and the latest report written by the settle whatever the throttle held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, MemoryDriver
from workhorse.types import StepFence


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_the_last_report_lands_with_the_settle(app: App) -> None:
    @app.job(tenant="none")
    async def count(ctx: JobContext, payload: None) -> str:
        for i in range(1, 101):  # far faster than one write a second: only the settle can write the last
            ctx.progress((i, 100), f"item {i}")
        return "ok"

    ref = await count.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done"
    assert job.progress is not None
    assert (job.progress["fraction"], job.progress["done"], job.progress["total"]) == (1.0, 100, 100)
    assert job.progress["message"] == "item 100"
    assert job.to_dict()["progress"]["done"] == 100


async def test_progress_is_visible_while_the_job_runs(app: App) -> None:
    release = asyncio.Event()

    @app.job(tenant="none")
    async def slow(ctx: JobContext, payload: None) -> None:
        ctx.progress(0.25, "a quarter")
        await release.wait()

    ref = await slow.enqueue(None)
    worker = app.worker(handle_signals=False)
    running = asyncio.create_task(worker.run())

    async def reported() -> bool:
        job = await app.get_job(ref.id)
        return job is not None and job.state == "running" and (job.progress or {}).get("fraction") == 0.25

    try:
        await wait_for(reported)
        job = await app.get_job(ref.id)
        assert job is not None and job.progress is not None and job.progress["message"] == "a quarter"
    finally:
        release.set()
        await worker.stop()
        await running
    done = await app.get_job(ref.id)
    assert done is not None and done.state == "done"


async def test_a_sync_body_reports_from_its_thread(app: App) -> None:
    @app.job(tenant="none")
    def crunch(ctx: JobContext, payload: None) -> None:
        ctx.progress(0.5)
        time.sleep(0.05)
        ctx.progress((3, 4), "almost")

    ref = await crunch.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.progress is not None
    assert (job.progress["fraction"], job.progress["message"]) == (0.75, "almost")


async def test_reports_are_throttled_to_one_write_a_second() -> None:
    app = App(driver="memory")
    driver = app.driver
    assert isinstance(driver, MemoryDriver)
    writes: list[str] = []
    original = driver.record_progress

    async def counting(reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        writes.extend(progress for _, progress in reports)
        return await original(reports)

    driver.record_progress = counting  # type: ignore[method-assign]

    @app.job(tenant="none")
    async def chatty(ctx: JobContext, payload: None) -> None:
        deadline = time.monotonic() + 1.5
        n = 0
        while time.monotonic() < deadline:
            n += 1
            ctx.progress(min(n / 1000, 1.0))
            await asyncio.sleep(0.005)

    ref = await chatty.enqueue(None)
    await app.worker().run(burst=True)
    assert 1 <= len(writes) <= 3, writes  # ~300 reports over 1.5 s: the first at once, then one a second
    job = await app.get_job(ref.id)
    assert job is not None and job.progress is not None and job.progress["fraction"] > 0.1


@pytest.mark.parametrize(
    ("value", "message"),
    [(1.5, None), (-0.1, None), ("half", None), ((5, 0), None), ((-1, 4), None), (True, None), (0.5, 7)],
)
async def test_bad_reports_are_refused(memory_app: App, value: Any, message: Any) -> None:
    refusals: list[ConfigurationError] = []

    @memory_app.job(tenant="none")
    async def bad(ctx: JobContext, payload: None) -> None:
        try:
            ctx.progress(value, message)
        except ConfigurationError as error:
            refusals.append(error)

    ref = await bad.enqueue(None)
    await memory_app.worker().run(burst=True)
    assert [r.code for r in refusals] == ["PROGRESS_INVALID"]
    job = await memory_app.get_job(ref.id)
    assert job is not None and job.state == "done" and job.progress is None


async def test_reports_of_many_runs_go_out_together() -> None:
    app = App(driver="memory")
    driver = app.driver
    assert isinstance(driver, MemoryDriver)
    batches: list[set[str]] = []
    original = driver.record_progress

    async def counting(reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        batches.append({fence.job_id for fence, _ in reports})
        return await original(reports)

    driver.record_progress = counting  # type: ignore[method-assign]

    @app.job(tenant="none")
    async def busy(ctx: JobContext, payload: None) -> None:
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:
            ctx.progress(0.5)
            await asyncio.sleep(0.01)

    refs = await busy.enqueue_many([None] * 5)
    await app.worker(concurrency=5).run(burst=True)
    # Five runs reporting every 10 ms for 1.6 s: one statement a second for all of them, never one each.
    assert 1 <= len(batches) <= 3, batches
    assert max(len(b) for b in batches) == 5 and set().union(*batches) == {r.id for r in refs}
