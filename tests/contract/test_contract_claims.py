"""The claim fence, lease lapses and final-attempt burial, driven at the driver seam on both drivers."""

from __future__ import annotations

import asyncio

import pytest

from workhorse import App, ConfigurationError, JobContext, Retry
from workhorse.types import Lease, Settlement


def declare(app: App, attempts: int = 3, dead_letter: bool = True):  # type: ignore[no-untyped-def]
    @app.job(name="task", tenant="none", retry=Retry(attempts=attempts, base=0, dead_letter=dead_letter))
    async def task(ctx: JobContext, payload: object) -> None:
        return None

    return task


async def claim(app: App, worker: str, *, limit: int = 10, visibility: float = 30.0):  # type: ignore[no-untyped-def]
    return await app.driver.claim(worker_id=worker, wants={"default": limit}, names=["task"], visibility=visibility)


async def test_claim_takes_at_most_the_free_slots_and_moves_the_fence(app: App) -> None:
    task = declare(app)
    await task.enqueue_many([1, 2, 3])
    first = await claim(app, "w1", limit=2)
    second = await claim(app, "w2", limit=2)
    assert len(first.claimed) == 2 and len(second.claimed) == 1
    assert {c.claims for c in first.claimed + second.claimed} == {1}
    assert {c.attempt for c in first.claimed} == {1}
    assert (await claim(app, "w3")).claimed == []


async def test_claim_with_no_queues_is_refused(app: App) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await app.driver.claim(worker_id="w", wants={}, names=["task"], visibility=1)
    assert refused.value.code == "CLAIM_QUEUES_EMPTY"


async def test_settle_and_heartbeat_are_fenced_on_worker_and_claim(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue(None)
    (held,) = (await claim(app, "w1")).claimed
    wrong_worker = Settlement(ref.id, "w2", held.claims, "done", result="1")
    wrong_claim = Settlement(ref.id, "w1", held.claims + 1, "done", result="1")
    assert await app.driver.settle([wrong_worker, wrong_claim]) == [False, False]
    assert (await app.driver.heartbeat("w2", [Lease(ref.id, held.claims)], 30)).held == set()
    assert (await app.driver.heartbeat("w1", [Lease(ref.id, held.claims)], 30)).held == {ref.id}
    right = Settlement(ref.id, "w1", held.claims, "done", result='{"ok":true}')
    assert await app.driver.settle([right]) == [True]
    assert await app.driver.settle([right]) == [False]  # a second settle of the same claim misses
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.result) == ("done", {"ok": True})


async def test_a_lapsed_lease_is_reclaimed_and_the_old_holder_is_fenced_out(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue(None)
    (old,) = (await claim(app, "w1", visibility=0.05)).claimed
    await asyncio.sleep(0.15)
    (new,) = (await claim(app, "w2")).claimed
    assert new.id == ref.id and new.attempt == 2 and new.claims == old.claims + 1
    # the zombie's writes all miss; the new run's land
    assert (await app.driver.heartbeat("w1", [Lease(ref.id, old.claims)], 30)).held == set()
    assert await app.driver.settle([Settlement(ref.id, "w1", old.claims, "done", result="1")]) == [False]
    assert await app.driver.settle([Settlement(ref.id, "w2", new.claims, "done", result="2")]) == [True]
    job = await app.get_job(ref.id)
    assert job is not None and (job.result, job.attempt) == (2, 2)


@pytest.mark.parametrize(("dead_letter", "state"), [(True, "dead"), (False, "failed")])
async def test_a_lease_lapsed_on_the_final_attempt_is_buried_by_the_claim(
    app: App, dead_letter: bool, state: str
) -> None:
    task = declare(app, attempts=2, dead_letter=dead_letter)
    ref = await task.enqueue(None)
    await claim(app, "w1", visibility=0.05)
    await asyncio.sleep(0.15)
    (second,) = (await claim(app, "w2", visibility=0.05)).claimed
    assert second.attempt == 2
    await asyncio.sleep(0.15)
    result = await claim(app, "w3")
    assert result.claimed == []
    (buried,) = result.buried
    assert (buried.id, buried.state, buried.attempt) == (ref.id, state, 2)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == state and job.worker_id is None
    assert job.last_error is not None and "lease lapsed on the final attempt" in job.last_error["message"]
    assert (await claim(app, "w4")).buried == []  # buried once, announced once


async def test_interrupted_hands_back_without_spending_the_attempt(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue(None)
    (held,) = (await claim(app, "w1")).claimed
    assert await app.driver.settle([Settlement(ref.id, "w1", held.claims, "interrupted")]) == [True]
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt, job.worker_id) == ("ready", 0, None)
    (again,) = (await claim(app, "w2")).claimed
    assert again.attempt == 1 and again.claims == held.claims + 1


async def test_a_retry_with_a_delay_is_not_claimed_early(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue(None)
    (held,) = (await claim(app, "w1")).claimed
    error = '{"type": "ValueError", "message": "x", "traceback": null}'
    await app.driver.settle([Settlement(ref.id, "w1", held.claims, "retry", error=error, delay=3600)])
    job = await app.get_job(ref.id)
    assert (
        job is not None
        and job.state == "delayed"
        and job.last_error
        == {
            "type": "ValueError",
            "message": "x",
            "traceback": None,
        }
    )
    assert (await claim(app, "w1")).claimed == []
    await app.promote(ref.id)
    assert len((await claim(app, "w1")).claimed) == 1


async def test_batched_settle_answers_each_in_order(app: App) -> None:
    task = declare(app)
    refs = await task.enqueue_many([1, 2, 3])
    held = (await claim(app, "w1")).claimed
    by_id = {c.id: c for c in held}
    batch = [
        Settlement(refs[0].id, "w1", by_id[refs[0].id].claims, "done", result="1"),
        Settlement(refs[1].id, "w1", 99, "done", result="2"),
        Settlement(refs[2].id, "w1", by_id[refs[2].id].claims, "dead", error='{"type":"X","message":"m"}'),
    ]
    assert await app.driver.settle(batch) == [True, False, True]
    states = [(await app.get_job(r.id)).state for r in refs]  # type: ignore[union-attr]
    assert states == ["done", "running", "dead"]


async def test_one_claim_serves_every_queue_within_its_own_slots(app: App) -> None:
    @app.job(name="a", queue="qa", tenant="none")
    async def a(ctx: JobContext, payload: object) -> None:
        return None

    @app.job(name="b", queue="qb", tenant="none")
    async def b(ctx: JobContext, payload: object) -> None:
        return None

    await a.enqueue_many([1, 2, 3])
    await b.enqueue_many([1, 2, 3])
    result = await app.driver.claim(worker_id="w", wants={"qa": 1, "qb": 2}, names=["a", "b"], visibility=30)
    assert sorted(c.queue for c in result.claimed) == ["qa", "qb", "qb"]


async def test_the_claim_says_when_the_next_delayed_job_is_due(app: App) -> None:
    task = declare(app)
    await task.enqueue(None, delay="90s")
    await task.enqueue(None, delay="1h")
    result = await claim(app, "w1")
    assert result.claimed == []
    assert result.next_due is not None and 85 < result.next_due <= 90


async def test_a_short_retry_is_picked_up_without_waiting_for_a_poll(app: App) -> None:
    import time

    calls: list[float] = []

    @app.job(name="quick", tenant="none", retry=Retry(attempts=3, base=0.2, jitter=False))
    async def quick(ctx: JobContext, payload: object) -> None:
        calls.append(time.monotonic())
        if ctx.attempt < 3:
            raise ValueError("again")

    await quick.enqueue(None)
    worker = app.worker(poll_interval="30s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    for _ in range(400):
        if len(calls) == 3:
            break
        await asyncio.sleep(0.02)
    await worker.stop()
    await task
    assert len(calls) == 3
    assert calls[2] - calls[0] < 3  # 0.2 s + 0.4 s of backoff, not two 30 s polls
