"""Durable steps and events, the contract: a step stored before it returns and replayed by name, a
write fenced on its claim, a sleep and a wait that suspend the job, a publish that wakes it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from workhorse import (
    App,
    JobContext,
    Retry,
    Worker,
)
from workhorse.types import StepFence


async def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out waiting")


async def state_of(app: App, job_id: str) -> str:
    job = await app.get_job(job_id)
    assert job is not None
    return job.state


async def _is(app: App, job_id: str, state: str) -> bool:
    return await state_of(app, job_id) == state


async def _both(app: App, ids: list[str], state: str) -> bool:
    return all([await _is(app, i, state) for i in ids])


def running(app: App, **options: Any) -> tuple[Worker, asyncio.Task[Any]]:
    worker = app.worker(handle_signals=False, **options)
    return worker, asyncio.create_task(worker.run())


async def test_sleep_suspends_without_spending_an_attempt_and_resumes_after(app: App) -> None:
    calls: list[str] = []

    @app.job(name="napper", tenant="none", retry=Retry(attempts=1))
    async def napper(ctx: JobContext, payload: None) -> dict[str, Any]:
        first = await ctx.step.run("before", lambda: calls.append("before") or "b")
        await ctx.step.sleep("nap", "300ms")
        calls.append(f"after on attempt {ctx.attempt}")
        return {"first": first}

    ref = await napper.enqueue(None)
    worker, task = running(app, concurrency=1)
    await until(lambda: _is(app, ref.id, "suspended"))
    job = await app.get_job(ref.id)
    assert job is not None
    assert (job.attempt, job.worker_id, job.last_error) == (0, None, None)  # unspent, unheld, no error
    assert [(s["name"], s["state"]) for s in job.steps] == [("before", "done"), ("nap", "sleeping")]
    assert job.steps[1]["wake_at"] is not None
    assert worker._table.idle()  # the slot is free while the job sleeps
    await until(lambda: _is(app, ref.id, "done"))
    await worker.stop()
    stats = await task
    done = await app.get_job(ref.id)
    assert done is not None and (done.result, done.attempt) == ({"first": "b"}, 1)  # one attempt of one
    assert calls == ["before", "after on attempt 1"]  # the first step replayed, not re-run
    assert [(s["name"], s["state"]) for s in done.steps] == [("before", "done"), ("nap", "done")]
    assert (stats.suspended, stats.completed, stats.retried) == (1, 1, 0)


async def test_wait_for_event_is_woken_promptly_by_a_publish_and_answers_its_payload(app: App) -> None:
    answers: list[Any] = []

    @app.job(name="waiter", tenant="none")
    async def waiter(ctx: JobContext, payload: dict[str, str]) -> Any:
        answer = await ctx.step.wait_for_event("shipped", "order.shipped", key=payload["order"], timeout="1h")
        answers.append(answer)
        return answer

    ref = await waiter.enqueue({"order": "o1"})
    other = await waiter.enqueue({"order": "o2"})
    worker, task = running(app, poll_interval="30s")  # a poll would take 30 s: only the wake is quick
    await until(lambda: _both(app, [ref.id, other.id], "suspended"))
    published = await app.publish_event("order.shipped", {"tracking": "T1"}, key="o1")
    assert published.woken == 1 and published.key == "o1"
    began = time.monotonic()
    await until(lambda: _is(app, ref.id, "done"))
    assert time.monotonic() - began < 5
    await worker.stop()
    await task
    job = await app.get_job(ref.id)
    assert job is not None and (job.result, job.attempt) == ({"tracking": "T1"}, 1)
    step = job.steps[0]
    assert (step["name"], step["state"], step["event"], step["key"], step["result"]) == (
        "shipped",
        "done",
        "order.shipped",
        "o1",
        {"tracking": "T1"},
    )
    assert await state_of(app, other.id) == "suspended"  # another key is not woken
    assert answers == [{"tracking": "T1"}]


async def test_an_event_published_before_the_wait_began_is_not_an_answer(app: App) -> None:
    @app.job(name="late-waiter", tenant="none")
    async def late_waiter(ctx: JobContext, payload: None) -> Any:
        return await ctx.step.wait_for_event("confirm", "user.confirmed", key="7", timeout="1h")

    await app.publish_event("user.confirmed", {"old": True}, key="7")
    ref = await late_waiter.enqueue(None)
    await app.worker().run(burst=True)
    assert await state_of(app, ref.id) == "suspended"


async def test_a_wait_times_out_with_none(app: App) -> None:
    answers: list[Any] = []

    @app.job(name="hopeful", tenant="none")
    async def hopeful(ctx: JobContext, payload: None) -> str:
        answers.append(await ctx.step.wait_for_event("reply", "never.sent", timeout="200ms"))
        return "gave up"

    ref = await hopeful.enqueue(None)
    worker, task = running(app)
    await until(lambda: _is(app, ref.id, "done"))
    await worker.stop()
    await task
    assert answers == [None]
    job = await app.get_job(ref.id)
    assert job is not None and job.attempt == 1 and job.steps[0]["state"] == "done" and job.steps[0]["result"] is None
    late = await app.publish_event("never.sent", {"too": "late"})
    assert late.woken == 0


async def test_a_step_result_is_stored_and_a_later_attempt_replays_it(app: App) -> None:
    calls: list[str] = []

    def charge(order: str) -> dict[str, str]:
        calls.append(f"charge {order}")
        return {"charge": f"ch_{order}"}

    async def email(to: str) -> str:
        calls.append(f"email {to}")
        return "sent"

    @app.job(name="order", tenant="none", retry=Retry(attempts=3, base=0))
    async def order(ctx: JobContext, payload: dict[str, str]) -> dict[str, Any]:
        charged = await ctx.step.run("charge", charge, payload["id"])  # a sync function: run in a thread
        if ctx.attempt == 1:
            raise ValueError("the first attempt dies after its first step")
        mailed = await ctx.step.run("email", email, to="ada@example.com")  # an async one, with a kwarg
        return {"charged": charged, "mailed": mailed, "attempt": ctx.attempt}

    ref = await order.enqueue({"id": "o1"})
    stats = await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done"
    assert job.result == {"charged": {"charge": "ch_o1"}, "mailed": "sent", "attempt": 2}
    assert calls == ["charge o1", "email ada@example.com"]  # the charge ran once, across two attempts
    assert [(s["name"], s["state"], s["attempt"]) for s in job.steps] == [("charge", "done", 1), ("email", "done", 2)]
    assert all(s["started_at"] and s["finished_at"] and s["started_at"] <= s["finished_at"] for s in job.steps)
    assert stats.retried == 1 and stats.completed == 1


async def test_a_step_write_after_the_claim_moved_lands_nowhere(app: App) -> None:
    @app.job(name="fenced", tenant="none")
    async def fenced(ctx: JobContext, payload: None) -> None:
        return None

    ref = await fenced.enqueue(None)
    (held,) = (await app.driver.claim(worker_id="w1", wants={"default": 1}, names=["fenced"], visibility=30)).claimed
    stale = StepFence(ref.id, "w1", held.claims + 1)
    wrong_worker = StepFence(ref.id, "w2", held.claims)
    put = {"name": "s", "seq": 0, "state": "done", "result": "1", "error": None, "elapsed": 0.0}
    assert await app.driver.put_step(stale, **put) is False  # type: ignore[arg-type]
    assert await app.driver.put_step(wrong_worker, **put) is False  # type: ignore[arg-type]
    assert await app.driver.sleep_step(stale, name="z", seq=1, delay=60, until=None) is None
    assert await app.driver.wait_step(stale, name="w", seq=2, event="e", key=None, within=60) is None
    assert await app.driver.list_steps(ref.id) == []
    right = StepFence(ref.id, "w1", held.claims)
    assert await app.driver.put_step(right, **put) is True  # type: ignore[arg-type]
    assert await app.driver.put_step(right, **{**put, "result": "2"}) is False  # type: ignore[arg-type]
    (step,) = await app.driver.list_steps(ref.id)
    assert (step.name, step.state, step.result) == ("s", "done", 1)
