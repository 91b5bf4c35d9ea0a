"""Text a worker writes that PostgreSQL cannot store as it is (a NUL, a lone surrogate, as a third
party's API sends them) is written with those characters escaped: the settle lands, and the
worker goes on settling the other jobs (the raw text failed the settle on every try, and the worker
never settled anything again). A value the body returns that cannot be stored ends the job at once
(RESULT_INVALID), and an exception whose message cannot be read is recorded by its type."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import pytest

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


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("the message itself is broken")


class NotText(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]  # noqa: PLE0307 - the defect under test


@pytest.mark.parametrize("kind", [Unreadable, NotText])
async def test_an_exception_whose_message_cannot_be_read_is_recorded_by_its_type(
    app: App, kind: type[Exception]
) -> None:
    @app.job(tenant="none", retry=Retry(attempts=2, base=0))
    async def broken(ctx: JobContext, payload: None) -> None:
        raise kind()

    ref = await broken.enqueue(None)
    stats = await bounded(app.worker().run(burst=True))
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 2)  # settled each time, by the policy
    assert job.last_error is not None and job.last_error["type"] == kind.__name__
    assert job.last_error["message"] == (
        f"(the message of this {kind.__name__} could not be read: its __str__ raised "
        f"{'RuntimeError' if kind is Unreadable else 'TypeError'})"
    )
    assert "in broken" in job.last_error["traceback"]
    assert (stats.retried, stats.dead, stats.lease_lost) == (1, 1, 0)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"name": f"from-api{LONE}"}, "$.name"),
        ({"rows": [1, 10**5000]}, "$.rows[1]"),
        ({"ratio": float("nan")}, "$.ratio"),
        ({"file": "a\x00b.csv"}, "$.file"),
        ({f"key{LONE}": 1}, "$"),
    ],
    ids=["lone-surrogate", "huge-int", "nan", "nul", "surrogate-key"],
)
async def test_a_result_that_cannot_be_stored_dead_letters_the_job_at_once(app: App, value: Any, path: str) -> None:
    ran: list[int] = []

    @app.job(tenant="none", retry=Retry(attempts=5, base=0))
    async def fetch(ctx: JobContext, payload: None) -> Any:
        ran.append(ctx.attempt)
        return value

    plain = plain_jobs(app)
    ref = await fetch.enqueue(None)
    good = await plain.enqueue_many(list(range(3)))
    stats = await bounded(app.worker(concurrency=4).run(burst=True))
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt, job.result) == ("dead", 1, None)
    assert ran == [1] and stats.retried == 0  # never run again: its side effects would repeat
    assert job.last_error is not None and job.last_error["message"].startswith("RESULT_INVALID: ")
    assert f" at {path}" in job.last_error["message"]
    assert [(await app.get_job(r.id)).state for r in good] == ["done"] * 3  # type: ignore[union-attr]
