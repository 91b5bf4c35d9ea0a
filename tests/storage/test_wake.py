"""Operator verbs that make work due wake an idle worker at once (NOTIFY in Postgres, the
subscribers in memory): requeue and promote, one job or many, and resume. The worker polls only
every 30 s here, so a job that runs within a few seconds was woken."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from workhorse import App, JobContext, Retry

POLL = "30s"
WOKEN_WITHIN = 5.0


async def wait_for_state(app: App, job_id: str, state: str, within: float = WOKEN_WITHIN) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        job = await app.admin.get(job_id)
        if job is not None and job.state == state:
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    job = await app.admin.get(job_id)
    raise AssertionError(f"job {job_id} is {job.state if job else None!r}, not {state!r}, after {within}s")


@contextlib.asynccontextmanager
async def idle_worker(app: App, ping: Callable[[], Awaitable[str]]) -> AsyncIterator[None]:
    """A running worker that has gone idle, its wake-up path proven by an enqueue."""
    worker = app.worker(poll_interval=POLL, handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1.0)  # its first claim found nothing; LISTEN is up
        await wait_for_state(app, await ping(), "done")
        await asyncio.sleep(0.3)  # idle again
        yield
    finally:
        await worker.stop()
        await asyncio.wait_for(task, 10)


def declare(app: App):  # type: ignore[no-untyped-def]
    runs: dict[str, int] = {}

    @app.job(name="flip", queue="wq", tenant="none", retry=Retry(attempts=1))
    async def flip(ctx: JobContext, payload: str) -> str:
        runs[payload] = runs.get(payload, 0) + 1
        if payload.startswith("fail") and runs[payload] == 1:
            raise ValueError("first run fails")
        return payload

    async def ping() -> str:
        return (await flip.enqueue(f"ping {time.monotonic()}")).id

    return flip, ping


async def test_requeue_many_wakes_an_idle_worker(app: App) -> None:
    flip, ping = declare(app)
    ref = await flip.enqueue("fail-bulk")
    await app.worker().run(burst=True)
    assert (await app.admin.get(ref.id)).state == "dead"  # type: ignore[union-attr]
    async with idle_worker(app, ping):
        result = await app.admin.requeue_many(state="dead")
        assert (result.affected, result.remaining) == (1, 0)
        await wait_for_state(app, ref.id, "done")


async def test_requeue_of_one_job_wakes_an_idle_worker(app: App) -> None:
    flip, ping = declare(app)
    ref = await flip.enqueue("fail-one")
    await app.worker().run(burst=True)
    async with idle_worker(app, ping):
        await app.admin.requeue(ref.id)
        await wait_for_state(app, ref.id, "done")


async def test_promote_many_wakes_an_idle_worker(app: App) -> None:
    flip, ping = declare(app)
    ref = await flip.enqueue("later-bulk", delay="1h")
    async with idle_worker(app, ping):
        result = await app.admin.promote_many()
        assert (result.affected, result.remaining) == (1, 0)
        await wait_for_state(app, ref.id, "done")


async def test_promote_of_one_job_wakes_an_idle_worker(app: App) -> None:
    flip, ping = declare(app)
    ref = await flip.enqueue("later-one", delay="1h")
    async with idle_worker(app, ping):
        await app.admin.promote(ref.id)
        await wait_for_state(app, ref.id, "done")


async def test_resume_wakes_an_idle_worker(app: App) -> None:
    flip, ping = declare(app)
    async with idle_worker(app, ping):
        await app.admin.pause("wq")
        ref = await flip.enqueue("while paused")
        await asyncio.sleep(0.5)
        assert (await app.admin.get(ref.id)).state == "ready"  # type: ignore[union-attr]
        assert await app.admin.resume("wq") is True
        await wait_for_state(app, ref.id, "done")


async def test_an_idle_worker_starts_a_due_job_at_once_and_a_delayed_one_when_it_comes_due(app: App) -> None:
    """A due enqueue wakes the worker for the job (the lean claim); a delayed one wakes it to learn
    when the job comes due (the full claim), so neither waits for the 30 s poll."""
    flip, ping = declare(app)
    async with idle_worker(app, ping):
        due = await flip.enqueue("due now")
        assert await wait_for_state(app, due.id, "done", within=3.0) < 3.0
        later = await flip.enqueue("in half a second", delay=0.5)
        assert await wait_for_state(app, later.id, "done", within=3.0) < 3.0
        job = await app.admin.get(later.id)
        assert job is not None and job.started_at is not None
        assert (job.started_at - job.created_at).total_seconds() >= 0.45  # not before its time
        # a delayed job learned about while another one waits: both run at their own times
        first = await flip.enqueue("in 0.6 s", delay=0.6)
        second = await flip.enqueue("in 0.3 s", delay=0.3)
        await wait_for_state(app, second.id, "done", within=3.0)
        await wait_for_state(app, first.id, "done", within=3.0)


async def test_a_job_handed_back_by_a_drain_starts_on_another_idle_worker_at_once(app: App) -> None:
    """A deploy's drain cut-off hands a running job back unspent; the settle that does it wakes the
    queue, so a worker that polls only every 30 s takes it at once."""
    runs: list[int] = []
    started = asyncio.Event()

    @app.job(name="hold", queue="hq", tenant="none")
    async def hold(ctx: JobContext, payload: None) -> str:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            started.set()
            await asyncio.sleep(30)  # the draining worker's cut-off cancels this
        return "finished"

    _, ping = declare(app)
    leaving = app.worker(queues=["hq"], poll_interval=POLL, drain_timeout=0, handle_signals=False)
    leaving_task = asyncio.create_task(leaving.run())
    ref = await hold.enqueue(None)
    await asyncio.wait_for(started.wait(), WOKEN_WITHIN)
    async with idle_worker(app, ping):
        await leaving.stop(cut_off=True)
        await asyncio.wait_for(leaving_task, 10)
        await wait_for_state(app, ref.id, "done")
    job = await app.admin.get(ref.id)
    assert job is not None and (job.result, job.attempt) == ("finished", 1)  # the hand-back spent no attempt
    assert runs == [1, 1]
