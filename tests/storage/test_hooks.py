"""app.hooks: every lifecycle event of a run, in order; a failing hook is skipped."""

from __future__ import annotations

import asyncio
import logging

import pytest

from workhorse import App, JobContext, Retry, TerminalError
from workhorse.hooks import LifecycleEvent


async def test_every_lifecycle_event_is_emitted_in_order(app: App, caplog: pytest.LogCaptureFixture) -> None:
    events: list[LifecycleEvent] = []
    app.hooks.add(events.append)

    @app.hooks
    def broken(event: LifecycleEvent) -> None:
        raise RuntimeError("a broken metrics exporter")

    @app.job(name="h.flaky", tenant="none", retry=Retry(attempts=2, base=0, jitter=False))
    async def flaky(ctx: JobContext, payload: None) -> str:
        if ctx.attempt == 1:
            raise ValueError("first try fails")
        return "ok"

    @app.job(name="h.doomed", tenant="none")
    async def doomed(ctx: JobContext, payload: None) -> None:
        raise TerminalError("never")

    ok = await flaky.enqueue(None)
    dead = await doomed.enqueue(None)
    with caplog.at_level(logging.ERROR, logger="workhorse.hooks"):
        stats = await app.worker(handle_signals=False).run(burst=True)
    assert stats.completed == 1 and stats.dead == 1
    by_job = {job_id: [e.kind for e in events if e.job_id == job_id] for job_id in (ok.id, dead.id)}
    assert by_job[ok.id] == ["claimed", "started", "retried", "claimed", "started", "completed"]
    assert by_job[dead.id] == ["claimed", "started", "dead-lettered"]
    assert events[-1].kind == "drained" and events[-1].job_id is None
    retried = next(e for e in events if e.kind == "retried")
    assert retried.error is not None and retried.error["type"] == "ValueError" and retried.delay is not None
    completed = next(e for e in events if e.kind == "completed")
    assert (completed.name, completed.queue, completed.attempt) == ("h.flaky", "default", 2)
    assert completed.duration_ms is not None and completed.duration_ms >= 0
    assert any("broken" in r.getMessage() for r in caplog.records)
    assert (await app.get_job(ok.id)).result == "ok"  # type: ignore[union-attr]
    app.hooks.remove(broken)
    app.hooks.remove(events.append)
    assert not app.hooks


async def test_a_run_cancelled_under_its_worker_is_a_lost_lease(app: App) -> None:
    events: list[tuple[str, str | None]] = []
    app.hooks.add(lambda e: events.append((e.kind, e.job_id)))
    started = asyncio.Event()

    @app.job(name="h.slow", tenant="none")
    async def slow(ctx: JobContext, payload: None) -> None:
        started.set()
        await asyncio.sleep(30)

    ref = await slow.enqueue(None)
    worker = app.worker(handle_signals=False, poll_interval="50ms", visibility_timeout="3s")
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 20)
    await app.cancel(ref.id)  # the worker's next renewal finds the row no longer its own
    for _ in range(400):
        if ("lease-lost", ref.id) in events:
            break
        await asyncio.sleep(0.05)
    await worker.stop()
    await running
    assert [k for k, j in events if j == ref.id] == ["claimed", "started", "lease-lost"]
    assert events[-1] == ("drained", None)


async def test_a_run_buried_by_the_claim_is_dead_lettered_by_the_burying_worker() -> None:
    from workhorse.testing import memory

    app = App(driver="memory")
    events: list[LifecycleEvent] = []
    app.hooks.add(events.append)

    @app.job(name="h.once", tenant="none", retry=Retry(attempts=1))
    async def once(ctx: JobContext, payload: None) -> None:
        return None

    with memory(app) as clock:
        ref = await once.enqueue(None)
        taken = await app.driver.claim(worker_id="w-died", wants={"default": 1}, names=["h.once"], visibility=5)
        assert [c.id for c in taken.claimed] == [ref.id]
        clock.advance("10s")  # the dead worker's lease lapsed on the final attempt
        stats = await app.worker(handle_signals=False).run(burst=True)
    assert stats.buried == 1
    assert [(e.kind, e.job_id) for e in events if e.job_id] == [("dead-lettered", ref.id)]
    assert events[0].error is not None and events[0].error["type"] == "LeaseLapsed"
