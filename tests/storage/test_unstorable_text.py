"""Text a worker writes that PostgreSQL cannot store as it is (a NUL, a lone surrogate, as a third
party's API sends them) is written with those characters escaped, on both drivers: the settle
lands, and the worker goes on settling the other jobs. On PostgreSQL the raw text failed the
settle on every try, and the worker never settled anything again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

from workhorse import App, JobContext, Retry, WorkerStats

LONE = json.loads('"\\ud800"')  # what json.loads makes of an API's "\ud800": a lone surrogate


async def bounded(run: Coroutine[Any, Any, WorkerStats], seconds: float = 20) -> WorkerStats:
    """A burst that must end: a worker jammed by one settle never would."""
    task = asyncio.ensure_future(run)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    assert done, f"the worker's burst did not end within {seconds}s"
    return task.result()


def plain_jobs(app: App) -> Any:
    @app.job(tenant="none")
    async def plain(ctx: JobContext, payload: int) -> int:
        return payload * 2

    return plain


async def test_an_exception_message_with_a_lone_surrogate_and_a_nul_is_stored_escaped(app: App) -> None:
    @app.job(tenant="none", retry=Retry(attempts=1))
    async def hostile(ctx: JobContext, payload: None) -> None:
        raise RuntimeError(f"from-api{LONE} a\x00b")

    plain = plain_jobs(app)
    bad = await hostile.enqueue(None)
    good = await plain.enqueue_many(list(range(5)))
    stats = await bounded(app.worker(concurrency=3).run(burst=True))
    job = await app.get_job(bad.id)
    assert job is not None and job.state == "dead" and job.last_error is not None
    assert job.last_error["type"] == "RuntimeError"
    assert job.last_error["message"] == "from-api\\ud800 a\\x00b"
    assert "from-api\\ud800" in job.last_error["traceback"]
    assert [(await app.get_job(r.id)).state for r in good] == ["done"] * 5  # type: ignore[union-attr]
    assert (stats.dead, stats.completed, stats.settle_missed) == (1, 5, 0)


async def test_a_progress_message_with_a_nul_and_a_lone_surrogate_is_stored_escaped(app: App) -> None:
    @app.job(tenant="none")
    async def reader(ctx: JobContext, payload: None) -> str:
        ctx.progress(0.5, f"reading a\x00b.csv {LONE}")
        return "read"

    plain = plain_jobs(app)
    bad = await reader.enqueue(None)
    good = await plain.enqueue_many(list(range(5)))
    stats = await bounded(app.worker(concurrency=3).run(burst=True))
    job = await app.get_job(bad.id)
    assert job is not None and (job.state, job.result) == ("done", "read")
    assert job.progress is not None and job.progress["message"] == "reading a\\x00b.csv \\ud800"
    assert [(await app.get_job(r.id)).state for r in good] == ["done"] * 5  # type: ignore[union-attr]
    assert (stats.completed, stats.settle_missed) == (6, 0)


async def test_a_failed_step_whose_error_has_a_lone_surrogate_is_recorded_escaped(app: App) -> None:
    async def call_api() -> None:
        raise ConnectionError(f"upstream said {LONE}")

    @app.job(tenant="none", retry=Retry(attempts=1))
    async def fetch(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("call", call_api)

    ref = await fetch.enqueue(None)
    await bounded(app.worker().run(burst=True))
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "dead" and job.last_error is not None
    assert job.last_error["type"] == "ConnectionError"  # not the DATABASE_ERROR of the step's write
    (step,) = job.steps
    assert (step["name"], step["state"]) == ("call", "failed")
    assert step["error"]["message"] == "upstream said \\ud800"
