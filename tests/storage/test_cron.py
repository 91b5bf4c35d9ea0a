"""Cron tasks: the scheduler role fires each due occurrence once, the lease row
elects one leader with its epoch fence, a leader that steps down hands over at once, and
``app.admin.tasks()`` (what `workhorse tasks` prints) reads the same on both.

Time is real here (the database's ``now()`` on PostgreSQL cannot be moved): the tasks fire every
second and the leases run for a second, so each scenario takes a few seconds. The cadence in
virtual time is tests/scheduler/test_scheduler_cadence.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from workhorse import App, JobContext
from workhorse.leader.rounds import Declared, PlannedFire, RoundAnswer, RoundRequest
from workhorse.leader.scheduler import Scheduler
from workhorse.leader.tasks import Fire, TaskHandle, occurrence_key


def every_second(app: App) -> TaskHandle[Any]:
    @app.task(name="tick", every="1s", tenant="none", payload={"region": "eu"})
    async def tick(ctx: JobContext, payload: Any) -> Any:
        return payload["scheduled_at"]

    return tick


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Wait for ``predicate``; answers how long it took."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def request(
    holder: str,
    epoch: int | None,
    task: TaskHandle[Any],
    *,
    ttl: float = 30.0,
    fires: list[PlannedFire] | None = None,
    declare: bool = False,
) -> RoundRequest:
    declared = [Declared(task.name, *task.descriptor, next_at=None)] if declare else []
    return RoundRequest(holder, "test", 1, ttl, epoch, fires or [], declared, [task.name])


def planned(task: TaskHandle[Any], prev: datetime, occurrence: datetime) -> PlannedFire:
    fire = Fire(occurrence=occurrence, first=occurrence, next_at=task.schedule.next_after(occurrence))
    return PlannedFire(task=task.name, fire=fire, prev=prev, job=task.build_fire(fire))


async def fired_jobs(app: App) -> list[tuple[str | None, str, Any]]:
    """Every fired job as (key, state, payload), oldest occurrence first."""
    jobs = (await app.list_jobs(name="tick", limit=200)).jobs
    return sorted(((j.key, j.state, j.payload) for j in jobs), key=lambda j: str(j[0]))


async def test_a_task_fires_once_per_due_time_and_its_jobs_run(app: App) -> None:
    every_second(app)
    scheduler = Scheduler(app, handle_signals=False)
    run = asyncio.create_task(scheduler.run())
    await until(lambda: scheduler.stats.fired >= 3, 10, "three fires")
    await scheduler.stop()
    stats = await run
    assert stats.elections == 1 and stats.lost == 0
    assert stats.fenced == 0 and stats.duplicates == 0
    await app.worker(handle_signals=False).run(burst=True)

    jobs = await fired_jobs(app)
    assert len(jobs) == stats.fired
    occurrences = [datetime.fromisoformat(payload["scheduled_at"]) for _, _, payload in jobs]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(occurrences)), occurrences
    for key, state, payload in jobs:
        assert key == f"task:{payload['scheduled_at']}" and payload["region"] == "eu"
        assert state == "done"

    report = await app.admin.tasks()
    (task,) = report.tasks
    assert (task.name, task.schedule, task.registered, task.declared) == ("tick", "every 1s", True, True)
    assert task.fired == stats.fired
    assert task.last_occurrence == occurrences[-1] and task.next_at == occurrences[-1] + timedelta(seconds=1)
    assert report.leader is not None and report.leader.holder == scheduler.id
    assert report.leader.live is False, "stop() released the lease"


async def test_two_schedulers_elect_one_leader_and_fire_each_occurrence_once(app: App) -> None:
    every_second(app)
    first = Scheduler(app, handle_signals=False)
    second = Scheduler(app, handle_signals=False)
    runs = [asyncio.create_task(s.run()) for s in (first, second)]
    leaders: set[str] = set()
    started = time.monotonic()
    while time.monotonic() - started < 3.2:
        leaders |= {s.id for s in (first, second) if s.leading}
        assert not (first.leading and second.leading), "two leaders at once"
        await asyncio.sleep(0.02)
    await asyncio.gather(first.stop(), second.stop())
    await asyncio.gather(*runs)
    assert len(leaders) == 1
    (leader,) = [s for s in (first, second) if s.id in leaders]
    (standby,) = [s for s in (first, second) if s is not leader]
    assert leader.stats.elections == 1 and leader.stats.fired >= 2
    assert standby.stats.elections == 0 and standby.stats.fired == 0 and standby.stats.rounds >= 1
    keys = [key for key, _, _ in await fired_jobs(app)]
    assert len(keys) == len(set(keys)) == leader.stats.fired


async def test_a_stale_epoch_fires_nothing_and_a_moved_watermark_fires_nothing(app: App) -> None:
    tick = every_second(app)
    driver = app.driver
    taken: RoundAnswer = await driver.leader_round(request("a", None, tick, ttl=1.0, declare=True))
    assert taken.epoch is not None and taken.holder is None, "the first round anywhere takes the free lease"
    watermark = taken.tasks["tick"].watermark
    assert watermark == taken.db_now, "a new task owes nothing from before its first sighting"
    standby = await driver.leader_round(request("b", None, tick))
    assert standby.epoch is None and standby.tasks == {}
    assert (standby.holder, standby.holder_epoch) == ("a", taken.epoch)
    occurrence = tick.schedule.next_after(watermark)
    assert occurrence is not None
    await asyncio.sleep(max((occurrence - taken.db_now).total_seconds(), 1.0) + 0.1)  # due, and a's lease lapsed

    # "a" was frozen past its lease; nobody took over, but re-taking its own lapsed lease bumps the
    # epoch, and the plan made under the old one is fenced out.
    stale_plan = [planned(tick, watermark, occurrence)]
    retaken = await driver.leader_round(request("a", taken.epoch, tick, ttl=1.0, fires=stale_plan))
    assert retaken.epoch == taken.epoch + 1, "a lapsed lease is taken under a new epoch, even by its holder"
    assert retaken.fired == set() and retaken.inserted == set()
    await asyncio.sleep(1.1)

    # Then "b" takes the lapsed lease, and "a"'s plan under its epoch fires nothing either.
    took_over = await driver.leader_round(request("b", None, tick))
    assert took_over.epoch == retaken.epoch + 1
    stale = await driver.leader_round(request("a", retaken.epoch, tick, fires=[planned(tick, watermark, occurrence)]))
    assert stale.epoch is None and stale.fired == set() and stale.inserted == set()
    assert (stale.holder, stale.holder_epoch) == ("b", took_over.epoch)

    plan = planned(tick, watermark, occurrence)
    fired = await driver.leader_round(request("b", took_over.epoch, tick, fires=[plan]))
    assert fired.fired == {"tick"} and fired.inserted == {plan.job.id}
    assert fired.tasks["tick"].watermark == occurrence
    again = await driver.leader_round(request("b", took_over.epoch, tick, fires=[planned(tick, watermark, occurrence)]))
    assert again.fired == set() and again.inserted == set(), "the watermark moved: the same plan fires nothing"
    assert [key for key, _, _ in await fired_jobs(app)] == [plan.job.key]

    early = tick.schedule.next_after(fired.db_now + timedelta(hours=1))
    assert early is not None
    ahead = await driver.leader_round(request("b", took_over.epoch, tick, fires=[planned(tick, occurrence, early)]))
    assert ahead.fired == set(), "nothing fires before its time on the driver's clock"
    assert await driver.release_leader("b", took_over.epoch)
    assert not await driver.release_leader("b", took_over.epoch - 1), "only the epoch held is released"


async def test_a_fire_whose_key_a_live_job_holds_moves_the_watermark_and_inserts_nothing(app: App) -> None:
    tick = every_second(app)
    lead = await app.driver.leader_round(request("a", None, tick, declare=True))
    watermark = lead.tasks["tick"].watermark
    occurrence = tick.schedule.next_after(watermark)
    assert occurrence is not None
    await asyncio.sleep(max((occurrence - lead.db_now).total_seconds(), 0) + 0.05)
    by_hand = await tick.enqueue(key=occurrence_key(occurrence))  # live, holding the occurrence's key
    plan = planned(tick, watermark, occurrence)
    fired = await app.driver.leader_round(request("a", lead.epoch, tick, fires=[plan]))
    assert fired.fired == {"tick"} and fired.inserted == set(), "fired, but no second job"
    assert fired.tasks["tick"].watermark == occurrence
    (job,) = (await app.list_jobs(name="tick")).jobs
    assert job.id == by_hand.id


async def test_a_leader_that_steps_down_hands_over_at_once(app: App) -> None:
    every_second(app)
    leader = Scheduler(app, handle_signals=False)  # interval 15 s, lease 30 s
    leading = asyncio.create_task(leader.run())
    await until(lambda: leader.leading, 10, "the first election")
    standby = Scheduler(app, handle_signals=False)
    standing = asyncio.create_task(standby.run())
    await until(lambda: standby.stats.rounds >= 1, 10, "the standby's first round")
    await asyncio.sleep(0.5)  # its hand-over wake-up is open (a LISTEN session on PostgreSQL)
    assert not standby.leading
    await leader.stop()
    await leading
    took = await until(lambda: standby.leading, 10, "the standby taking over")
    assert took < 2.0, f"the standby took {took:.2f}s: it waited for its next round, not the hand-over"
    await until(lambda: standby.stats.fired >= 1, 10, "a fire by the new leader")
    await standby.stop()
    await standing
    assert leader.stats.lost == 0 and standby.stats.elections == 1
    keys = [key for key, _, _ in await fired_jobs(app)]
    assert len(keys) == len(set(keys)) == leader.stats.fired + standby.stats.fired


async def test_the_tasks_report_lists_declared_tasks_before_any_leader(app: App) -> None:
    tick = every_second(app)
    before = await app.admin.tasks()
    (task,) = before.tasks
    assert (task.name, task.registered, task.declared) == ("tick", False, True)
    assert task.fired == 0 and task.last_occurrence is None
    assert task.next_at == tick.schedule.next_after(before.db_now)
    assert before.leader is None
    assert (await app.admin.tasks(declared=False)).tasks == [], "without the app's tasks, only registered ones"

    await app.driver.leader_round(request("a", None, tick, declare=True))
    report = await app.admin.tasks(declared=False)
    (task,) = report.tasks
    assert (task.registered, task.declared, task.fired) == (True, None, 0)
    assert report.leader is not None and (report.leader.holder, report.leader.epoch) == ("a", 1)
    assert report.leader.live and report.leader.host == "test" and report.leader.pid == 1
    document = report.to_dict()
    assert document["leader"]["holder"] == "a" and document["tasks"][0]["name"] == "tick"
