"""Who runs the rescue (``workhorse.leader.rescue``), on a real PostgreSQL: every worker, for the queues it
does not serve too, and the scheduler's leader; a burial by either says what a claim's burial
says (an ERROR line, the lifecycle event, the job's ``on_settled``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from workhorse import App, JobContext, Outcome, Retry
from workhorse.hooks import LifecycleEvent
from workhorse.leader.rescue import rescue_every, rescue_interval
from workhorse.leader.scheduler import Scheduler
from workhorse.types import JobRef, Rescued

LAPSE = 0.3


async def lapsed(app: App, refs: list[JobRef], queue: str) -> None:
    """``refs`` claimed by a worker that dies at once: their leases lapse."""
    taken = await app.driver.claim(
        worker_id="dead", wants={queue: len(refs)}, names=sorted(app.jobs), visibility=LAPSE, sweep=False
    )
    assert sorted(c.id for c in taken.claimed) == sorted(r.id for r in refs)
    await asyncio.sleep(LAPSE + 0.1)


async def until(app: App, want: dict[str, str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = {i: (j.state if (j := await app.get_job(i)) else None) for i in want}
        if states == want:
            return
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.05)


def declare(app: App, outcomes: list[Outcome]) -> tuple[Any, Any]:
    @app.job(name="once", queue="elsewhere", tenant="none", retry=Retry(attempts=1), on_settled=outcomes.append)
    async def once(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="thrice", queue="elsewhere", tenant="none", retry=Retry(attempts=3, base=0))
    async def thrice(ctx: JobContext, payload: int) -> None:
        return None

    @app.job(name="here", queue="default", tenant="none")
    async def here(ctx: JobContext, payload: int) -> None:
        return None

    return once, thrice


async def test_a_worker_rescues_the_queues_it_does_not_serve(pg_app: App) -> None:
    outcomes: list[Outcome] = []
    events: list[LifecycleEvent] = []
    pg_app.hooks.add(events.append)
    once, thrice = declare(pg_app, outcomes)
    buried, readied = await once.enqueue(1), await thrice.enqueue(2)
    await lapsed(pg_app, [buried, readied], "elsewhere")
    worker = pg_app.worker(queues=["default"], visibility_timeout="1s", handle_signals=False)
    run = asyncio.create_task(worker.run())
    try:
        # a turn soon after the start, then every rescue_interval(1 s) = 2 s
        await until(pg_app, {buried.id: "dead", readied.id: "ready"}, rescue_interval(1.0) + 5)
    finally:
        await worker.stop()
        await run
    assert [(o.kind, o.job_id, o.attempt) for o in outcomes] == [("dead-lettered", buried.id, 1)]
    assert [(e.kind, e.job_id, e.worker_id) for e in events if e.kind == "dead-lettered"] == [
        ("dead-lettered", buried.id, worker.id)
    ]
    assert worker.stats.buried == 1 and worker.stats.claimed == 0  # it rescued, it did not run them
    job = await pg_app.get_job(readied.id)
    assert job is not None and (job.attempt, job.worker_id) == (1, None)


async def test_the_leader_rescues_after_a_round_and_announces_its_burials(pg_app: App) -> None:
    outcomes: list[Outcome] = []
    once, thrice = declare(pg_app, outcomes)

    @pg_app.task(name="yearly", cron="@yearly", tenant="none")
    async def yearly(ctx: JobContext, payload: Any) -> None:
        return None

    buried, readied = await once.enqueue(1), await thrice.enqueue(2)
    await lapsed(pg_app, [buried, readied], "elsewhere")
    scheduler = Scheduler(pg_app, handle_signals=False)
    run = asyncio.create_task(scheduler.run())
    try:
        await until(pg_app, {buried.id: "dead", readied.id: "ready"}, 10)
    finally:
        await scheduler.stop()
        await run
    assert scheduler.leading is False  # stepped down
    assert [(o.kind, o.job_id) for o in outcomes] == [("dead-lettered", buried.id)]


async def test_a_worker_beside_the_leading_role_leaves_its_turns_to_the_leader() -> None:
    """`workhorse worker` runs the scheduler role beside the worker: while that role leads, its
    leader rescues (once a minute) and the worker's own turns are skipped, so the process pays one
    rescue statement a minute, not two; once it no longer leads, the worker's turns run again."""
    turns: list[int] = []
    leading = [True]

    async def rescue(batch: int) -> Rescued:
        turns.append(batch)
        return Rescued([], [])

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 4:
            leading[0] = False  # stepped down
        if len(waits) > 6:
            raise asyncio.CancelledError

    with contextlib.suppress(asyncio.CancelledError):
        await rescue_every(
            rescue, every=60.0, by="worker w-1", announce=lambda rows: None, skip=lambda: leading[0], sleep=sleep
        )
    assert len(turns) == 3  # turns 4, 5, 6: after the step-down
    assert waits[0] <= 12.0 and all(54.0 <= w <= 66.0 for w in waits[1:])  # soon after the start, then every 60 s +-10%
