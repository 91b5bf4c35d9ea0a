"""``sleep``, ``sleep_until`` and ``wait_for_event`` on both drivers: the job leaves the worker
(``suspended`` until due, attempt unspent, no slot held) and resumes replaying its steps."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, PayloadError, Retry, Worker


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


def running(app: App, **options: Any) -> tuple[Worker, asyncio.Task[Any]]:
    worker = app.worker(handle_signals=False, **options)
    return worker, asyncio.create_task(worker.run())


async def _is(app: App, job_id: str, state: str) -> bool:
    return await state_of(app, job_id) == state


async def test_a_suspended_job_is_listed_suspended_until_due_then_ready(app: App) -> None:
    @app.job(name="long-nap", tenant="none")
    async def long_nap(ctx: JobContext, payload: None) -> None:
        await ctx.step.sleep("nap", "1h")

    ref = await long_nap.enqueue(None)
    await app.worker().run(burst=True)  # burst returns: a sleeping job is not due work
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "suspended"
    assert 3599 < (job.run_at - job.updated_at).total_seconds() <= 3600.1
    assert [j.id for j in (await app.list_jobs(state="suspended")).jobs] == [ref.id]
    assert (
        await app.driver.claim(worker_id="w", wants={"default": 5}, names=["long-nap"], visibility=30)
    ).claimed == []
    claim = await app.driver.claim(worker_id="w", wants={"default": 5}, names=["long-nap"], visibility=30)
    assert claim.next_due is not None and 3500 < claim.next_due <= 3600  # an idle worker sleeps until then


async def test_sleep_until_a_past_time_returns_at_once_and_a_future_one_suspends(app: App) -> None:
    after: list[str] = []

    @app.job(name="alarm", tenant="none")
    async def alarm(ctx: JobContext, payload: None) -> None:
        await ctx.step.sleep_until("past", datetime(2000, 1, 1, tzinfo=UTC))
        after.append("past")
        await ctx.step.sleep_until("future", datetime(2100, 1, 1, tzinfo=UTC))
        after.append("future")  # pragma: no cover - not this millennium

    ref = await alarm.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "suspended" and after == ["past"]
    assert job.run_at == datetime(2100, 1, 1, tzinfo=UTC)
    assert [(s["name"], s["state"]) for s in job.steps] == [("past", "done"), ("future", "sleeping")]


async def test_a_cancelled_sleeper_requeued_keeps_its_first_wake_time(app: App) -> None:
    @app.job(name="steady", tenant="none")
    async def steady(ctx: JobContext, payload: None) -> str:
        await ctx.step.sleep("nap", "1h")
        return "woke"

    ref = await steady.enqueue(None)
    await app.worker().run(burst=True)
    first = await app.get_job(ref.id)
    assert first is not None and first.state == "suspended"
    await app.cancel(ref.id)
    await app.requeue(ref.id)
    await app.worker().run(burst=True)  # replays the sleep: still an hour to go, suspends again
    again = await app.get_job(ref.id)
    assert again is not None and (again.state, again.run_at) == ("suspended", first.run_at)


async def _both(app: App, ids: list[str], state: str) -> bool:
    return all([await _is(app, i, state) for i in ids])


async def test_an_event_published_while_no_worker_runs_is_seen_when_one_comes_back(app: App) -> None:
    @app.job(name="patient-waiter", tenant="none")
    async def patient_waiter(ctx: JobContext, payload: None) -> Any:
        before = await ctx.step.run("before", lambda: 1)
        answer = await ctx.step.wait_for_event("confirm", "user.confirmed", timeout="1h")  # no key
        return {"before": before, "answer": answer}

    ref = await patient_waiter.enqueue(None)
    await app.worker().run(burst=True)
    assert await state_of(app, ref.id) == "suspended"
    await app.publish_event("user.confirmed", {"wrong": "key"}, key="someone")  # a keyed event: not ours
    assert await state_of(app, ref.id) == "suspended"
    woke = await app.publish_event("user.confirmed", {"first": 1})  # stored; wakes the job to 'ready'
    await app.publish_event("user.confirmed", {"second": 2})  # a later one: never woken twice
    assert woke.woken == 1
    assert await state_of(app, ref.id) == "ready"
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done"
    assert job.result == {"before": 1, "answer": {"first": 1}}  # the earliest match, in order


async def test_a_wait_answered_by_an_already_stored_event_does_not_suspend(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="two-waits", tenant="none")
    async def two_waits(ctx: JobContext, payload: None) -> None:
        seen.append(await ctx.step.wait_for_event("a", "ping", key="k", timeout="1h"))
        seen.append(await ctx.step.wait_for_event("b", "ping", key="k", timeout="1h"))

    ref = await two_waits.enqueue(None)
    await app.worker().run(burst=True)
    await app.publish_event("ping", 1, key="k")
    stats = await app.worker().run(burst=True)
    # "b" began after the first ping: it waits for a second one
    assert seen == [1] and stats.suspended == 1 and await state_of(app, ref.id) == "suspended"
    await app.publish_event("ping", 2, key="k")
    await app.worker().run(burst=True)
    assert seen == [1, 1, 2] or seen == [1, 2]
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done"
    assert [s["result"] for s in job.steps] == [1, 2]


async def test_a_zero_timeout_only_checks_the_store(app: App) -> None:
    @app.job(name="peek", tenant="none")
    async def peek(ctx: JobContext, payload: None) -> Any:
        return await ctx.step.wait_for_event("peek", "nothing", timeout=0)

    ref = await peek.enqueue(None)
    stats = await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.result) == ("done", None) and stats.suspended == 0


async def test_publish_event_refusals(app: App) -> None:
    with pytest.raises(ConfigurationError) as name:
        await app.publish_event("", {})
    assert name.value.code == "EVENT_NAME_INVALID"
    with pytest.raises(ConfigurationError) as key:
        await app.publish_event("e", {}, key=7)  # type: ignore[arg-type]
    assert key.value.code == "EVENT_KEY_INVALID" and "str(order_id)" in key.value.fix
    with pytest.raises(ConfigurationError) as empty_key:
        await app.publish_event("e", {}, key="")
    assert empty_key.value.code == "EVENT_KEY_INVALID"
    with pytest.raises(ConfigurationError, match="ttl"):
        await app.publish_event("e", {}, ttl=0)
    with pytest.raises(PayloadError) as payload:
        await app.publish_event("e", {"at": datetime.now(UTC)})  # clock-ok: a value that is not JSON
    assert "event 'e'" in payload.value.cause and "$.at" in payload.value.cause


async def test_expired_events_answer_nothing_and_are_purged(app: App) -> None:
    @app.job(name="expiring", tenant="none")
    async def expiring(ctx: JobContext, payload: None) -> Any:
        return await ctx.step.wait_for_event("w", "flash", timeout="1h")

    ref = await expiring.enqueue(None)
    await app.worker().run(burst=True)
    await app.publish_event("flash", 1, ttl="1ms")
    await app.publish_event("other", 2, ttl="1ms")
    await app.publish_event("kept", 3)
    await asyncio.sleep(0.05)
    await app.worker().run(burst=True)  # woken by the publish, but the event expired before it resumed
    assert await state_of(app, ref.id) == "suspended"
    assert await app.purge_expired_events() == 2
    assert await app.purge_expired_events() == 0


async def test_publish_event_sync_from_a_thread(app: App) -> None:
    @app.job(name="sync-waiter", tenant="none")
    async def sync_waiter(ctx: JobContext, payload: None) -> Any:
        return await ctx.step.wait_for_event("w", "from.thread", key="k", timeout="1h")

    ref = await sync_waiter.enqueue(None)
    await app.worker().run(burst=True)
    published = await asyncio.to_thread(app.publish_event_sync, "from.thread", {"sync": True}, "k")
    assert published.woken == 1
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.result == {"sync": True}
    if not app.is_memory:
        await asyncio.to_thread(app.sync_driver().publish_event_sync, "x", None, "null", 60)  # pool reused


async def test_requeue_from_step_drops_that_step_and_every_later_one(app: App) -> None:
    calls: list[str] = []

    @app.job(name="pipeline", tenant="none", retry=Retry(attempts=1))
    async def pipeline(ctx: JobContext, payload: None) -> int:
        total = 0
        for name in ("one", "two", "three"):
            total += await ctx.step.run(name, lambda n=name: calls.append(n) or len(calls))
        return total

    ref = await pipeline.enqueue(None)
    await app.worker().run(burst=True)
    assert calls == ["one", "two", "three"]
    again = await app.requeue(ref.id, from_step="two")
    assert (again.state, again.attempt) == ("ready", 0)
    assert [s["name"] for s in again.steps] == ["one"]
    await app.worker().run(burst=True)
    assert calls == ["one", "two", "three", "two", "three"]  # "one" replayed from the store
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done" and job.result == 1 + 4 + 5
    await app.requeue(ref.id)  # a plain requeue replays every recorded step
    await app.worker().run(burst=True)
    assert len(calls) == 5


async def test_requeue_from_step_refusals(app: App) -> None:
    from workhorse import JobNotFoundError, OperatorRefusedError

    @app.job(name="refusals", tenant="none")
    async def refusals(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("only", lambda: 1)
        await ctx.step.sleep("nap", "1h")

    ref = await refusals.enqueue(None)
    await app.worker().run(burst=True)
    with pytest.raises(OperatorRefusedError) as live:  # suspended is live: cancel it first
        await app.requeue(ref.id, from_step="only")
    assert live.value.code == "JOB_NOT_REQUEUEABLE"
    await app.cancel(ref.id)
    with pytest.raises(OperatorRefusedError) as unknown:
        await app.requeue(ref.id, from_step="missing")
    assert unknown.value.code == "STEP_UNKNOWN"
    assert (
        "'only', 'nap'" in unknown.value.cause
        and unknown.value.fix == f"workhorse show {ref.id}   # copy a step name from its steps"
    )
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "cancelled" and len(job.steps) == 2  # nothing was dropped
    with pytest.raises(JobNotFoundError):
        await app.requeue("01900000-0000-7000-8000-000000000000", from_step="only")
    with pytest.raises(ConfigurationError):
        await app.requeue(ref.id, from_step="")
    assert (await app.requeue(ref.id, from_step="nap")).steps[0]["name"] == "only"


async def test_show_trims_a_large_step_result(app: App) -> None:
    @app.job(name="big", tenant="none")
    async def big(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("doc", lambda: {"text": "x" * 5000})
        await ctx.step.run("small", lambda: [1, 2])

    ref = await big.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None
    doc, small = job.steps
    assert doc["result_trimmed"] is True and isinstance(doc["result"], str) and len(doc["result"]) == 1001
    assert doc["result"].startswith('{"text": "xxx') or doc["result"].startswith('{"text":"xxx')
    assert (small["result"], small["result_trimmed"], small["position"]) == ([1, 2], False, 1)
    shown = job.to_dict()["steps"]
    assert set(shown[1]) >= {"name", "state", "attempt", "started_at", "finished_at", "result", "error"}


async def test_removing_a_job_removes_its_steps(app: App) -> None:
    @app.job(name="gone", tenant="none")
    async def gone(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("s", lambda: 1)

    ref = await gone.enqueue(None)
    await app.worker().run(burst=True)
    await app.remove(ref.id)
    assert await app.driver.list_steps(ref.id) == []


@pytest.mark.timeout(120)
async def test_a_thousand_waiters_are_each_woken_exactly_once_by_their_own_publish(app: App) -> None:
    count = 1_000
    resumed: dict[str, int] = {}

    @app.job(name="crowd", tenant="none")
    async def crowd(ctx: JobContext, payload: dict[str, str]) -> Any:
        answer = await ctx.step.wait_for_event("answer", "crowd.answer", key=payload["key"], timeout="1h")
        resumed[payload["key"]] = resumed.get(payload["key"], 0) + 1
        return answer

    began = time.monotonic()
    refs = await crowd.enqueue_many([{"key": f"k{i}"} for i in range(count)])
    worker, task = running(app, concurrency=100, poll_interval="30s")
    await until(lambda: _count(app, "suspended", count), timeout=60)
    suspended_after = time.monotonic() - began
    published = await asyncio.gather(*(app.publish_event("crowd.answer", {"n": i}, key=f"k{i}") for i in range(count)))
    assert [p.woken for p in published] == [1] * count
    await until(lambda: _count(app, "done", count), timeout=60)
    elapsed = time.monotonic() - began
    await worker.stop()
    stats = await task
    assert resumed == {f"k{i}": 1 for i in range(count)}  # each resumed exactly once
    assert stats.suspended == count and stats.completed == count
    for i in (0, 499, 999):
        job = await app.get_job(refs[i].id)
        assert job is not None and job.result == {"n": i} and job.attempt == 1
    assert elapsed < 60, f"suspended after {suspended_after:.1f}s, all done after {elapsed:.1f}s"


async def _count(app: App, state: str, expected: int) -> bool:
    seen = 0
    after = None
    while True:
        page = await app.list_jobs(state=state, limit=200, after=after)
        seen += len(page.jobs)
        if page.next is None:
            return seen == expected
        after = page.next


async def test_a_publish_racing_the_wait_is_never_lost(app: App) -> None:
    """Publishes fired while the runs are reaching their waits. Each run either got its answer or
    began waiting AFTER its event was published (then the event is rightly not an answer): no
    run that was already waiting stays suspended (the wait and the publish of one key are
    serialised on the database, and both read its clock)."""
    count = 60

    @app.job(name="racer", tenant="none")
    async def racer(ctx: JobContext, payload: dict[str, str]) -> Any:
        return await ctx.step.wait_for_event("answer", "race", key=payload["key"], timeout="1h")

    refs = await racer.enqueue_many([{"key": f"k{i}"} for i in range(count)])
    worker, task = running(app, concurrency=count, poll_interval="30s")
    published = []
    for i in range(count):
        published.append(await app.publish_event("race", i, key=f"k{i}"))
        await asyncio.sleep(0.002)
    await until(lambda: _settled(app, [r.id for r in refs]), timeout=20)
    await worker.stop()
    await task
    answered = 0
    for i, ref in enumerate(refs):
        job = await app.get_job(ref.id)
        assert job is not None
        if job.state == "done":
            assert job.result == i
            answered += 1
            continue
        assert job.state == "suspended"
        began = datetime.fromisoformat(job.steps[0]["started_at"].replace("Z", "+00:00"))
        assert began > published[i].published_at, f"run {i} was waiting when its event came, and missed it"
    assert answered > 0


async def _settled(app: App, ids: list[str]) -> bool:
    states = [await state_of(app, i) for i in ids]
    return all(s in ("done", "suspended") for s in states)
