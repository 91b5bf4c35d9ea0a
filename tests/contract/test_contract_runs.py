"""The job lifecycle through a real worker, on both drivers: results, retries, dead letters,
timeouts, on_settled, and jobs the worker does not know."""

from __future__ import annotations

from typing import Any

from workhorse import App, JobContext, Retry, TerminalError


async def test_a_job_runs_once_and_stores_its_result(app: App) -> None:
    seen: list[tuple[int, Any]] = []

    @app.job(tenant="none")
    async def double(ctx: JobContext, payload: dict[str, int]) -> dict[str, int]:
        seen.append((ctx.attempt, payload))
        return {"doubled": payload["n"] * 2}

    ref = await double.enqueue({"n": 21})
    stats = await app.worker(concurrency=2).run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None
    assert (job.state, job.result, job.attempt) == ("done", {"doubled": 42}, 1)
    assert job.finished_at is not None and job.started_at is not None
    assert seen == [(1, {"n": 21})]
    assert (stats.claimed, stats.completed) == (1, 1)


async def test_failures_retry_on_the_curve_then_dead_letter(app: App) -> None:
    attempts: list[int] = []

    @app.job(tenant="none", retry=Retry(attempts=3, base=0, jitter=False))
    async def always_fails(ctx: JobContext, payload: None) -> None:
        attempts.append(ctx.attempt)
        raise ValueError(f"boom {ctx.attempt}")

    ref = await always_fails.enqueue(None)
    stats = await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None
    assert attempts == [1, 2, 3]
    assert (job.state, job.attempt) == ("dead", 3)
    assert job.last_error is not None
    assert job.last_error["type"] == "ValueError"
    assert job.last_error["message"] == "boom 3"
    assert "raise ValueError" in job.last_error["traceback"]
    assert (stats.retried, stats.dead) == (2, 1)


async def test_terminal_error_dead_letters_now_with_attempts_unspent(app: App) -> None:
    @app.job(tenant="none", retry=Retry(attempts=5, base=0))
    async def charge(ctx: JobContext, payload: None) -> None:
        raise TerminalError("card declined")

    ref = await charge.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None
    assert (job.state, job.attempt, job.max_attempts) == ("dead", 1, 5)
    assert job.last_error == {**job.last_error, "type": "TerminalError", "message": "card declined"}  # type: ignore[dict-item]
