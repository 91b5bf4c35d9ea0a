"""workhorse.testing: run_job inline (steps, attempt, cancellation), enqueued, drain with the clock
moved instead of slept, and memory() switching an app declared on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import BaseModel

from workhorse import App, ConfigurationError, JobContext, PayloadError, Retry, TerminalError
from workhorse.testing import Clock, drain, enqueued, memory, run_job, run_job_sync


class Order(BaseModel):
    org: str
    total: int


def declare(app: App) -> Any:
    calls: list[int] = []

    @app.job(name="t.charge", tenant=lambda p: p.org, retry=Retry(attempts=3, base="1h", jitter=False))
    async def charge(ctx: JobContext, payload: Order) -> dict[str, Any]:
        calls.append(ctx.attempt)
        doubled = await ctx.step.run("double", lambda n: n * 2, payload.total)
        if ctx.attempt < 3:
            raise RuntimeError("the card network is down")
        return {"charged": doubled, "final": ctx.is_final_attempt}

    return charge, calls


async def test_run_job_runs_the_body_with_steps_and_answers_its_result() -> None:
    app = App(driver="memory")
    charge, calls = declare(app)
    assert await run_job(charge, Order(org="o1", total=21), attempt=3) == {"charged": 42, "final": True}
    assert await run_job(charge, {"org": "o1", "total": 1}, attempt=3, max_attempts=5) == {"charged": 2, "final": False}
    with pytest.raises(RuntimeError, match="card network"):
        await run_job(charge, Order(org="o1", total=1))
    with pytest.raises(PayloadError, match=r"\$\.total"):
        await run_job(charge, {"org": "o1", "total": "lots"})
    assert calls == [3, 3, 1]
    assert await enqueued(app) == []  # run_job writes nothing to the app


async def test_run_job_controls_cancellation() -> None:
    app = App(driver="memory")

    @app.job(name="t.slow", tenant="none")
    async def slow(ctx: JobContext, payload: None) -> str:
        await asyncio.sleep(30)
        return "finished"

    @app.job(name="t.polite", tenant="none")
    def polite(ctx: JobContext, payload: None) -> str | None:
        if ctx.wait_cancelled(10):
            return ctx.cancel_reason
        return None

    @app.job(name="t.check", tenant="none")
    async def check(ctx: JobContext, payload: None) -> str:
        ctx.raise_if_cancelled()
        return "ran"

    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await run_job(slow, None, cancel_after=0.05)
    assert await run_job(polite, None, cancel_after=0.05) == "cancelled"
    assert time.monotonic() - started < 10
    with pytest.raises(Exception, match="cancelled"):
        await run_job(check, None, cancelled=True)
    assert await run_job(check, None) == "ran"
    with pytest.raises(TimeoutError):
        await run_job(slow, None, timeout=0.05)


def test_run_job_sync_for_sync_tests() -> None:
    app = App(driver="memory")

    @app.job(name="t.add", tenant="none")
    def add(ctx: JobContext, payload: dict[str, int]) -> int:
        return payload["a"] + payload["b"]

    @app.job(name="t.bad", tenant="none")
    def bad(ctx: JobContext, payload: None) -> object:
        return object()

    assert run_job_sync(add, {"a": 1, "b": 2}) == 3
    assert run_job(add, {"a": 2, "b": 2}) == 4  # no loop running: answered, not a coroutine
    with pytest.raises(PayloadError) as caught:
        run_job_sync(bad, None)
    assert caught.value.code == "RESULT_INVALID"
    with pytest.raises(ConfigurationError):
        run_job_sync(lambda ctx, p: None, None)  # type: ignore[arg-type]


async def test_drain_moves_the_clock_through_backoff_instead_of_sleeping() -> None:
    app = App(driver="memory")
    charge, calls = declare(app)

    @app.job(name="t.give_up", tenant="none", retry=Retry(attempts=2, base="1d"))
    async def give_up(ctx: JobContext, payload: None) -> None:
        raise TerminalError("no")

    with memory(app) as clock:
        start = clock.now
        ref = await charge.enqueue(Order(org="o1", total=5))
        dead = await give_up.enqueue(None)
        later = await give_up.enqueue(None, delay="7d")
        began = time.monotonic()
        stats = await drain(app)
        assert time.monotonic() - began < 30  # two hours of backoff and a week's delay, not waited
        job = await app.get_job(ref.id)
        assert job is not None and (job.state, job.attempt, job.result) == ("done", 3, {"charged": 10, "final": True})
        assert [(await app.get_job(r.id)).state for r in (dead, later)] == ["dead", "dead"]  # type: ignore[union-attr]
        assert calls == [1, 2, 3] and (stats.completed, stats.retried, stats.dead) == (1, 2, 2)
        assert clock.now - start >= __import__("datetime").timedelta(days=7)
        listed = await enqueued(app, charge)
        assert [j.id for j in listed] == [ref.id]
        assert [j.id for j in await enqueued(app)] == [ref.id, dead.id, later.id]


async def test_drain_without_advance_runs_only_what_is_due() -> None:
    app = App(driver="memory")

    @app.job(name="t.noop", tenant="none")
    async def noop(ctx: JobContext, payload: int) -> int:
        return payload

    now = await noop.enqueue(1)
    later = await noop.enqueue(2, delay="1h", queue="elsewhere")  # drained too: its queue is found
    stats = await drain(app, advance=False)
    assert stats.completed == 1
    assert [(await app.get_job(r.id)).state for r in (now, later)] == ["done", "delayed"]  # type: ignore[union-attr]
    await drain(app)
    assert (await app.get_job(later.id)).state == "done"  # type: ignore[union-attr]


async def test_memory_switches_an_app_declared_on_postgres_and_back() -> None:
    app = App("postgresql://nobody@127.0.0.1:1/none", schema="never_used")  # never connected to

    @app.job(name="t.noop", tenant="none")
    async def noop(ctx: JobContext, payload: int) -> int:
        return payload

    assert not app.is_memory
    with memory(app, clock=Clock()) as clock:
        ref = await noop.enqueue(4, delay="5m")
        clock.advance("5m")
        assert (await drain(app, advance=False)).completed == 1
        assert (await app.get_job(ref.id)).result == 4  # type: ignore[union-attr]
    assert not app.is_memory
    with pytest.raises(ConfigurationError) as caught:
        await drain(app)
    assert caught.value.code == "TESTING_NEEDS_MEMORY"


async def test_run_job_plays_a_drain_for_a_body_that_hands_back_between_units() -> None:
    from workhorse.context import HandBack

    app = App(driver="memory")
    done: list[int] = []

    @app.job(name="t.units", tenant="none")
    async def units(ctx: JobContext, payload: dict[str, Any]) -> int:
        for unit in range(3):
            if ctx.draining:
                ctx.hand_back()
            done.append(unit)
        return len(done)

    assert await run_job(units, {}) == 3
    done.clear()
    with pytest.raises(HandBack):
        await run_job(units, {}, draining=True)
    assert done == []
