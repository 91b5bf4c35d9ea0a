"""A settle PostgreSQL refuses for its data fails the same way on every try: the worker writes that
run again without what was refused (its progress report; then its result or error, replaced by a
refusal naming it; then the whole outcome, dead-lettered ``SETTLE_UNSTORABLE``), and the other runs
of the same batch land as they were. The worker never retries it as it was while the heartbeat
keeps its lease (it did: every later settle of the worker queued behind it, for ever).

Some of these tests put text the worker now makes storable back in (a monkeypatch of the function
that cleans it), standing in for a write site that forgot to: what PostgreSQL refuses is real."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from workhorse import App, JobContext, Retry, WorkerStats
from workhorse.drivers.postgres_work import PostgresWork
from workhorse.retry import Decision
from workhorse.worker import execute

LONE = json.loads('"\\ud800"')


async def bounded(app: App, concurrency: int = 6, seconds: float = 20) -> WorkerStats:
    task = asyncio.ensure_future(app.worker(concurrency=concurrency).run(burst=True))
    done, _ = await asyncio.wait({task}, timeout=seconds)
    assert done, f"the worker's burst did not end within {seconds}s"
    return task.result()


def together(app: App, n: int) -> tuple[Any, asyncio.Event]:
    """A job of ``n`` runs that all finish at once, so their settles share a batch."""
    started: list[int] = []
    go = asyncio.Event()

    @app.job(tenant="none")
    async def plain(ctx: JobContext, payload: int) -> int:
        started.append(payload)
        if len(started) >= n:
            go.set()
        await asyncio.wait_for(go.wait(), 5)
        return payload * 2

    return plain, go


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every settle statement the worker sends (observed, not changed)."""
    sizes: list[int] = []
    real = PostgresWork.settle

    async def settle(self: PostgresWork, settlements: Any, **kw: Any) -> list[bool]:
        sizes.append(len(settlements))
        return await real(self, settlements, **kw)

    monkeypatch.setattr(PostgresWork, "settle", settle)
    return sizes


async def test_an_error_postgres_refuses_is_replaced_and_the_rest_of_its_batch_lands(
    pg_app: App, monkeypatch: pytest.MonkeyPatch, batches: list[int]
) -> None:
    def raw(error: BaseException) -> str:  # the error's text as it came, lone surrogate and all
        return json.dumps({"type": type(error).__qualname__, "message": str(error), "traceback": ""})

    monkeypatch.setattr(execute, "error_json", raw)
    plain, go = together(pg_app, 5)

    @pg_app.job(tenant="none", retry=Retry(attempts=2, base=0))
    async def hostile(ctx: JobContext, payload: None) -> None:
        if ctx.attempt == 1:
            await asyncio.wait_for(go.wait(), 5)
        raise RuntimeError(f"from-api{LONE}")

    bad = await hostile.enqueue(None)
    good = await plain.enqueue_many(list(range(5)))
    stats = await bounded(pg_app)
    assert max(batches) == 6  # the refused run and the five others were one statement first
    job = await pg_app.get_job(bad.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 2)  # the retry policy still decided
    assert job.last_error is not None and job.last_error["message"].startswith("ERROR_UNSTORABLE: ")
    assert "RuntimeError" in job.last_error["message"]
    assert [(await pg_app.get_job(r.id)).result for r in good] == [0, 2, 4, 6, 8]  # type: ignore[union-attr]
    assert (stats.completed, stats.retried, stats.dead, stats.settle_missed) == (5, 1, 1, 0)


async def test_a_result_postgres_refuses_dead_letters_the_job_at_once(
    pg_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "encode_result", lambda value, job: json.dumps(value))
    ran: list[int] = []

    @pg_app.job(tenant="none", retry=Retry(attempts=5, base=0))
    async def fetch(ctx: JobContext, payload: None) -> dict[str, str]:
        ran.append(ctx.attempt)
        return {"name": f"from-api{LONE}"}

    ref = await fetch.enqueue(None)
    stats = await bounded(pg_app)
    job = await pg_app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt, job.result) == ("dead", 1, None)
    assert ran == [1] and stats.dead == 1 and stats.retried == 0  # never run again: its side effects would repeat
    assert job.last_error is not None and job.last_error["message"].startswith("RESULT_INVALID: ")


async def test_a_progress_report_postgres_refuses_is_left_out_and_the_outcome_kept(
    pg_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workhorse.context.storable", lambda text: text)

    @pg_app.job(tenant="none")
    async def reader(ctx: JobContext, payload: None) -> str:
        ctx.progress(0.5, "reading a\x00b.csv")
        return "read"

    ref = await reader.enqueue(None)
    stats = await bounded(pg_app)
    job = await pg_app.get_job(ref.id)
    assert job is not None and (job.state, job.result, job.progress) == ("done", "read", None)
    assert (stats.completed, stats.settle_missed) == (1, 0)


async def test_an_outcome_postgres_refuses_whole_dead_letters_the_job_naming_it(
    pg_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry delay past PostgreSQL's interval range (Retry refuses one over 100 years now; this
    stands in for any part of the outcome that is not the body's own)."""
    monkeypatch.setattr(execute, "decide", lambda policy, attempt, error: Decision("retry", 1e300))

    @pg_app.job(tenant="none", retry=Retry(attempts=3))
    async def later(ctx: JobContext, payload: None) -> None:
        raise ValueError("try again much later")

    plain, _ = together(pg_app, 3)
    ref = await later.enqueue(None)
    good = await plain.enqueue_many(list(range(3)))
    stats = await bounded(pg_app)
    job = await pg_app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert job.last_error is not None and job.last_error["message"].startswith("SETTLE_UNSTORABLE: ")
    assert "delay 1e+300s" in job.last_error["message"]
    assert [(await pg_app.get_job(r.id)).state for r in good] == ["done"] * 3  # type: ignore[union-attr]
    assert (stats.completed, stats.dead, stats.settle_missed) == (3, 1, 0)
