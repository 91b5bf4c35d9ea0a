"""app.wait answers the finished job, woken by the settle (not a tight loop)."""

from __future__ import annotations

import asyncio
import time

import pytest

from workhorse import App, ConfigurationError, JobContext, JobNotFoundError, Retry, TerminalError
from workhorse.steps.results import WaitTimeoutError


async def test_wait_answers_the_finished_job_soon_after_its_settle(app: App) -> None:
    release = asyncio.Event()

    @app.job(name="w.add", tenant="none")
    async def add(ctx: JobContext, payload: dict[str, int]) -> int:
        await release.wait()
        return payload["a"] + payload["b"]

    @app.job(name="w.fail", tenant="none", retry=Retry(attempts=1))
    async def fail(ctx: JobContext, payload: None) -> None:
        raise TerminalError("no")

    ref = await add.enqueue({"a": 2, "b": 3})
    failing = await fail.enqueue(None)
    worker = app.worker(handle_signals=False, poll_interval="50ms")
    running = asyncio.create_task(worker.run())
    waiting = asyncio.create_task(app.wait(ref, timeout=60))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # the body has not returned yet
    released = time.monotonic()
    release.set()
    job = await waiting
    took = time.monotonic() - released
    assert (job.state, job.result) == ("done", 5)
    assert took < 4  # woken by the settle, well inside the 5 s poll
    dead = await app.wait(failing.id, timeout=30)
    assert dead.state == "dead" and dead.last_error is not None
    assert (await app.wait(ref)).result == 5  # already finished: answered at once
    await worker.stop()
    await running


async def test_wait_times_out_and_refuses_unknown_ids(app: App) -> None:
    @app.job(name="w.idle", tenant="none")
    async def idle(ctx: JobContext, payload: None) -> None:
        return None

    ref = await idle.enqueue(None, delay="1h")
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as caught:
        await app.wait(ref, timeout=0.3)
    assert caught.value.code == "WAIT_TIMEOUT" and "delayed" in caught.value.cause
    assert time.monotonic() - started < 10
    with pytest.raises(JobNotFoundError):
        await app.wait("01900000-0000-7000-8000-000000000000", timeout=1)
    await app.cancel(ref.id)
    assert (await app.wait(ref, timeout=10)).state == "cancelled"


async def test_enqueue_by_name_without_the_handle(app: App) -> None:
    @app.job(name="w.greet", queue="mail", tenant=lambda p: p["org"])
    async def greet(ctx: JobContext, payload: dict[str, str]) -> str:
        return f"hi {payload['org']}"

    ref = await app.enqueue("w.greet", {"org": "o1"}, key="k1", queue="other")
    again = await app.enqueue("w.greet", {"org": "o1"}, key="k1")
    job = await app.get_job(ref.id)
    assert job is not None and (job.name, job.tenant, job.queue, job.key) == ("w.greet", "o1", "other", "k1")
    assert again.id == ref.id
    with pytest.raises(ConfigurationError) as caught:
        await app.enqueue("w.nope", {})
    assert caught.value.code == "JOB_UNKNOWN" and "w.greet" in caught.value.cause
    assert [j.id for j in (await app.list_jobs()).jobs] == [ref.id]
