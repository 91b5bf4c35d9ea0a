"""Operator verbs and listing, including every refusal."""

from __future__ import annotations

import pytest

from workhorse import App, ConfigurationError, JobContext, JobNotFoundError, OperatorRefusedError, Retry

MISSING = "01900000-0000-7000-8000-000000000000"


def declare(app: App):  # type: ignore[no-untyped-def]
    @app.job(name="task", tenant=lambda p: p["org"], retry=Retry(attempts=2, base=0))
    async def task(ctx: JobContext, payload: dict[str, object]) -> object:
        if payload.get("fail"):
            raise ValueError("fails")
        return payload.get("n")

    return task


@pytest.mark.parametrize("limit", [0, 201, -1])
async def test_list_limit_refused(app: App, limit: int) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await app.list_jobs(limit=limit)
    assert refused.value.code == "PAGE_LIMIT_INVALID"


async def test_list_malformed_cursor_and_unknown_state_refused(app: App) -> None:
    assert (await app.list_jobs(after=MISSING)).jobs == []  # an id no job has is still a position
    with pytest.raises(ConfigurationError) as refused:
        await app.list_jobs(after="not-a-uuid")
    assert refused.value.code == "PAGE_CURSOR_INVALID"
    with pytest.raises(ConfigurationError) as unknown:
        await app.list_jobs(state="stuck")
    assert unknown.value.code == "STATE_UNKNOWN"


async def test_cancel_a_waiting_job_and_refuse_a_finished_one(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"org": "o1"})
    assert (await app.cancel(ref.id)).state == "cancelled"
    with pytest.raises(OperatorRefusedError) as refused:
        await app.cancel(ref.id)
    assert refused.value.code == "JOB_NOT_CANCELLABLE" and "cancelled" in refused.value.cause
    with pytest.raises(JobNotFoundError):
        await app.cancel(MISSING)


async def test_requeue_a_dead_job_as_a_fresh_run(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"org": "o1", "fail": True})
    await app.worker().run(burst=True)
    dead = await app.get_job(ref.id)
    assert dead is not None and (dead.state, dead.attempt) == ("dead", 2)
    again = await app.requeue(ref.id)
    assert (again.state, again.attempt) == ("ready", 0)
    with pytest.raises(OperatorRefusedError) as refused:
        await app.requeue(ref.id)
    assert refused.value.code == "JOB_NOT_REQUEUEABLE"
    with pytest.raises(JobNotFoundError):
        await app.requeue(MISSING)


async def test_requeue_refused_while_another_live_job_holds_the_key(app: App) -> None:
    task = declare(app)
    old = await task.enqueue({"org": "o1"}, key="k")
    await app.cancel(old.id)
    holder = await task.enqueue({"org": "o1"}, key="k")
    with pytest.raises(OperatorRefusedError) as refused:
        await app.requeue(old.id)
    assert refused.value.code == "JOB_KEY_HELD" and holder.id in refused.value.cause
    job = await app.get_job(old.id)
    assert job is not None and job.state == "cancelled"


async def test_promote_only_waiting_jobs(app: App) -> None:
    task = declare(app)
    ref = await task.enqueue({"org": "o1"}, delay="1d")
    assert (await app.promote(ref.id)).state == "ready"
    await app.cancel(ref.id)
    with pytest.raises(OperatorRefusedError) as refused:
        await app.promote(ref.id)
    assert refused.value.code == "JOB_NOT_PROMOTABLE"


async def test_remove_never_a_running_job(app: App) -> None:
    task = declare(app)
    waiting = await task.enqueue({"org": "o1"})
    running = await task.enqueue({"org": "o1"})
    removed = await app.remove(waiting.id)
    assert removed.id == waiting.id
    assert await app.get_job(waiting.id) is None
    await app.driver.claim(worker_id="w", wants={"default": 1}, names=["task"], visibility=30)
    with pytest.raises(OperatorRefusedError) as refused:
        await app.remove(running.id)
    assert refused.value.code == "JOB_RUNNING"
    assert await app.get_job(running.id) is not None
    with pytest.raises(JobNotFoundError):
        await app.remove(waiting.id)
