"""The last gate before a body runs (``worker.execute``): a run already cancelled, or whose lease
window closed, never calls its body, on the body loop or, for a plain ``def`` body, on the
pool's thread that takes the call (a frozen process's pool may take it late)."""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from workhorse import App, JobContext
from workhorse.types import Claimed
from workhorse.worker.execute import Run, Verdict, execute


def a_run(app: App, name: str) -> Run:
    handle = app.jobs[name]
    now = datetime.now(UTC)
    claimed = Claimed("job-1", name, handle.queue, None, None, 1, 3, 1, 0, now, now)
    ctx = JobContext(
        id=claimed.id,
        name=name,
        queue=claimed.queue,
        tenant=None,
        attempt=1,
        max_attempts=3,
        worker_id="w-test",
        logger=handle.logger,
    )
    return Run(claimed=claimed, handle=handle, ctx=ctx)


def declare() -> tuple[App, list[str]]:
    app = App(driver="memory")
    called: list[str] = []

    @app.job(name="sync_body", tenant="none")
    def sync_body(ctx: JobContext, payload: None) -> str:
        called.append("sync")
        return "ran"

    @app.job(name="async_body", tenant="none")
    async def async_body(ctx: JobContext, payload: None) -> str:
        called.append("async")
        return "ran"

    return app, called


async def test_a_sync_body_whose_thread_takes_the_call_past_its_window_is_not_called() -> None:
    app, called = declare()
    run = a_run(app, "sync_body")
    answers = iter([True, False])  # open when the body loop looks; closed when the thread does
    exits: list[int] = []
    busy = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(busy.wait, 5)  # the pool's one thread is taken: the call waits in its queue
        pending = asyncio.ensure_future(execute(run, pool, lambda: exits.append(1), lambda: next(answers)))
        await asyncio.sleep(0.05)
        busy.set()
        verdict = await asyncio.wait_for(pending, 5)
        for _ in range(100):  # the thread's exit is reported from the future's callback
            if exits:
                break
            await asyncio.sleep(0.01)
    assert called == []
    assert verdict == Verdict(None) and run.reasons == ["lease lost"]
    assert exits == [1]  # its slot frees


async def test_a_run_cancelled_or_past_its_window_never_calls_its_body() -> None:
    app, called = declare()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for name in ("sync_body", "async_body"):
            closed = a_run(app, name)
            exits: list[int] = []
            assert await execute(closed, pool, functools.partial(exits.append, 1), lambda: False) == Verdict(None)
            assert closed.reasons == ["lease lost"] and closed.ctx.cancelled
            assert exits == ([1] if name == "sync_body" else [])
            drained = a_run(app, name)
            drained.cancel("drain")  # cut off before its turn: handed back unspent
            assert (await execute(drained, pool, lambda: None, lambda: True)).outcome == "interrupted"
        ran = a_run(app, "sync_body")
        assert (await execute(ran, pool, lambda: None, lambda: True)).outcome == "done"
    assert called == ["sync"]
