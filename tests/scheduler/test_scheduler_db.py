"""The round statement against a real PostgreSQL: the fire, both fences, the lease, registration."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from workhorse import App, JobContext, Retry
from workhorse.cli import cli
from workhorse.leader.report import read_tasks
from workhorse.leader.rounds import Declared, PlannedFire, RoundAnswer, RoundRequest, channel_for
from workhorse.leader.scheduler import Scheduler
from workhorse.leader.store import PostgresRoundStore
from workhorse.leader.tasks import Fire, TaskHandle, plan_fire


def tick_app(url: str, schema: str, **options: Any) -> tuple[App, TaskHandle[Any]]:
    app = App(url, schema=schema)

    @app.task(name="tick", every="1s", tenant="none", **options)
    async def tick(ctx: JobContext, payload: Any) -> Any:
        return payload["scheduled_at"]

    return app, tick


def request(
    holder: str,
    epoch: int | None,
    *,
    fires: list[PlannedFire] | None = None,
    task: TaskHandle[Any] | None = None,
    ttl: float = 30.0,
    declare: bool = False,
) -> RoundRequest:
    declared = []
    if declare and task is not None:
        declared = [Declared(task.name, *task.descriptor, next_at=None)]
    return RoundRequest(
        holder=holder,
        host="test",
        pid=1,
        ttl=ttl,
        epoch=epoch,
        fires=fires or [],
        declared=declared,
        names=[] if task is None else [task.name],
    )


def planned(task: TaskHandle[Any], prev: datetime, occurrence: datetime) -> PlannedFire:
    fire = Fire(occurrence=occurrence, first=occurrence, next_at=task.schedule.next_after(occurrence))
    return PlannedFire(task=task.name, fire=fire, prev=prev, job=task.build_fire(fire))


def q(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


async def lead(store: PostgresRoundStore, holder: str, task: TaskHandle[Any]) -> RoundAnswer:
    """Take the lease and register the task: answers the state a leader plans from."""
    answer = await store.round(request(holder, None, task=task, declare=True))
    assert answer.epoch is not None
    return answer


async def test_an_occurrence_fires_once_and_its_job_rides_the_watermark(pg_app: App, database_url: str) -> None:
    app, tick = tick_app(database_url, pg_app.schema, payload={"region": "eu"}, retry=Retry(attempts=4), priority=3)
    store = PostgresRoundStore(app)
    try:
        answer = await lead(store, "a", tick)
        state = answer.tasks["tick"]
        assert state.watermark == answer.db_now, "a new task owes nothing from before its first sighting"
        occurrence = tick.schedule.next_after(state.watermark)
        await asyncio.sleep(max((occurrence - answer.db_now).total_seconds(), 0) + 0.05)
        plan = planned(tick, state.watermark, occurrence)
        fired = await store.round(request("a", answer.epoch, fires=[plan], task=tick))
        assert fired.fired == {"tick"} and fired.inserted == {plan.job.id}
        assert fired.tasks["tick"].watermark == occurrence

        # The same plan again (a retry after a lost answer, a second leader, a crash replay): the
        # watermark moved, so nothing fires, even once the first job is finished and its key free.
        q(database_url, f"update {app.schema}.jobs set state = 'done'")
        again = await store.round(
            request("a", answer.epoch, fires=[planned(tick, state.watermark, occurrence)], task=tick)
        )
        assert again.fired == set() and again.inserted == set()
    finally:
        await store.close()
    rows = q(
        database_url,
        f"select name, queue, state, priority, max_attempts, idempotency_key, payload from {app.schema}.jobs",
    )
    assert rows == [
        (
            "tick",
            "default",
            "done",
            3,
            4,
            f"task:{occurrence.isoformat().replace('+00:00', 'Z')}",
            {"region": "eu", "scheduled_at": occurrence.isoformat().replace("+00:00", "Z")},
        ),
    ]
    assert q(database_url, f"select fired, last_job_id::text from {app.schema}.tasks") == [(1, plan.job.id)]


async def test_concurrent_fires_of_one_occurrence_serialise_on_the_watermark(pg_app: App, database_url: str) -> None:
    app, tick = tick_app(database_url, pg_app.schema)
    stores = [PostgresRoundStore(app) for _ in range(4)]
    try:
        answer = await lead(stores[0], "a", tick)
        state = answer.tasks["tick"]
        occurrence = tick.schedule.next_after(state.watermark)
        await asyncio.sleep(max((occurrence - answer.db_now).total_seconds(), 0) + 0.05)
        # Four connections, the same holder and epoch, each with its own job id for the occurrence.
        answers = await asyncio.gather(
            *(
                s.round(request("a", answer.epoch, fires=[planned(tick, state.watermark, occurrence)], task=tick))
                for s in stores
            )
        )
    finally:
        for s in stores:
            await s.close()
    assert sorted(len(a.fired) for a in answers) == [0, 0, 0, 1]
    assert q(database_url, f"select count(*) from {app.schema}.jobs") == [(1,)]


async def test_a_stale_epoch_cannot_fire_and_learns_it_lost(pg_app: App, database_url: str) -> None:
    app, tick = tick_app(database_url, pg_app.schema)
    a, b = PostgresRoundStore(app), PostgresRoundStore(app)
    try:
        answer = await lead(a, "a", tick)
        state = answer.tasks["tick"]
        occurrence = tick.schedule.next_after(state.watermark)
        await asyncio.sleep(max((occurrence - answer.db_now).total_seconds(), 0) + 0.05)

        # "a" is frozen past its lease; "b" takes over under a new epoch.
        q(database_url, f"update {app.schema}.leaders set expires_at = now() - interval '1 second'")
        taken = await b.round(request("b", None, task=tick))
        assert taken.epoch == answer.epoch + 1  # type: ignore[operator]

        # "a" resumes with the plan it made before the freeze: the same statement checks its epoch.
        stale = await a.round(request("a", answer.epoch, fires=[planned(tick, state.watermark, occurrence)], task=tick))
        assert stale.epoch is None and stale.fired == set()
        assert (stale.holder, stale.holder_epoch) == ("b", taken.epoch)

        # Nobody took over, but "a"'s own lease lapsed: re-taking it bumps the epoch, and the plan
        # made under the old one is fenced out all the same.
        q(database_url, f"update {app.schema}.leaders set holder = 'a', expires_at = now() - interval '1 second'")
        retaken = await a.round(
            request("a", taken.epoch, fires=[planned(tick, state.watermark, occurrence)], task=tick)
        )
        assert retaken.epoch == taken.epoch + 1  # type: ignore[operator]
        assert retaken.fired == set()
    finally:
        await a.close()
        await b.close()
    assert q(database_url, f"select count(*) from {app.schema}.jobs") == [(0,)]


async def test_nothing_fires_before_its_time_on_the_database_clock(pg_app: App, database_url: str) -> None:
    app, tick = tick_app(database_url, pg_app.schema)
    store = PostgresRoundStore(app)
    try:
        answer = await lead(store, "a", tick)
        state = answer.tasks["tick"]
        early = tick.schedule.next_after(answer.db_now + timedelta(hours=1))  # a leader whose clock runs ahead
        refused = await store.round(
            request("a", answer.epoch, fires=[planned(tick, state.watermark, early)], task=tick)
        )
        assert refused.fired == set() and refused.tasks["tick"].watermark == state.watermark
    finally:
        await store.close()


async def test_the_lease_is_taken_only_after_it_expires_and_at_once_when_released(
    pg_app: App, database_url: str
) -> None:
    app, tick = tick_app(database_url, pg_app.schema)
    a, b = PostgresRoundStore(app), PostgresRoundStore(app)
    listen = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    try:
        await listen.execute(f"listen {channel_for(app.schema)}")  # type: ignore[arg-type]
        first = await a.round(request("a", None, task=tick, ttl=1.0))
        assert first.epoch == 1
        standby = await b.round(request("b", None, task=tick, ttl=1.0))
        assert standby.epoch is None and standby.tasks == {} and standby.holder == "a"
        renewed = await a.round(request("a", 1, task=tick, ttl=1.0))
        assert renewed.epoch == 1, "renewal keeps the epoch"
        await asyncio.sleep(1.1)  # "a" crashed: no renewal
        taken = await b.round(request("b", None, task=tick, ttl=30.0))
        assert taken.epoch == 2

        assert await b.release("b", 2)
        notified = await anext(listen.notifies(timeout=2))
        assert notified.channel == channel_for(app.schema)
        back = await a.round(request("a", None, task=tick))
        assert back.epoch == 3, "a released lease is free at once, not after its 30 s"
        assert not await b.release("b", 2), "a stale holder cannot release someone else's lease"
    finally:
        await listen.close()
        await a.close()
        await b.close()


async def test_registration_keeps_the_watermark_and_only_the_leader_registers(pg_app: App, database_url: str) -> None:
    app, tick = tick_app(database_url, pg_app.schema)
    store = PostgresRoundStore(app)
    other = PostgresRoundStore(app)
    try:
        answer = await lead(store, "a", tick)
        first = answer.tasks["tick"]
        changed = Declared("tick", "every 2s", "UTC", "run-once", None)
        standby = await other.round(RoundRequest("b", "h", 2, 30.0, None, [], [changed], ["tick"]))
        assert standby.epoch is None
        assert q(database_url, f"select schedule, catch_up from {app.schema}.tasks") == [("every 1s", "skip")]
        moved = await store.round(RoundRequest("a", "h", 1, 30.0, answer.epoch, [], [changed], ["tick"]))
        assert moved.tasks["tick"].descriptor == ("every 2s", "UTC", "run-once")
        assert moved.tasks["tick"].watermark == first.watermark, "a changed schedule keeps what is owed"
    finally:
        await store.close()
        await other.close()


async def test_a_scheduler_fires_each_second_once_and_a_worker_runs_them(pg_app: App, database_url: str) -> None:
    app, _tick = tick_app(database_url, pg_app.schema)
    scheduler = Scheduler(app, handle_signals=False)
    run = asyncio.create_task(scheduler.run())
    await asyncio.sleep(3.3)
    assert scheduler.leading
    await scheduler.stop()
    stats = await run
    assert stats.fired >= 2 and stats.fenced == 0 and stats.elections == 1
    await app.worker(handle_signals=False).run(burst=True)
    rows = q(database_url, f"select idempotency_key, state, result from {app.schema}.jobs order by idempotency_key")
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)) == stats.fired
    stamps = [datetime.fromisoformat(r[2]) for r in rows]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(stamps))
    assert {r[1] for r in rows} == {"done"}
    live = q(database_url, f"select expires_at <= now() from {app.schema}.leaders")
    assert live == [(True,)], "stop() released the lease"
    await app.close()


@pytest.mark.parametrize("policy", ["skip", "run-once"])
async def test_after_downtime_one_job_covers_the_gap(pg_app: App, database_url: str, policy: str) -> None:
    app = App(database_url, schema=pg_app.schema)

    @app.task(name="minutely", cron="* * * * *", tenant="none", catch_up=policy)
    async def minutely(ctx: JobContext, payload: Any) -> None: ...

    store = PostgresRoundStore(app)
    try:
        answer = await lead(store, "a", minutely)
        assert answer.epoch is not None and await store.release("a", answer.epoch)
    finally:
        await store.close()
    # The fleet was down for three hours: the watermark is that old.
    q(database_url, f"update {app.schema}.tasks set watermark = watermark - interval '3 hours', next_at = null")
    scheduler = Scheduler(app, handle_signals=False)
    run = asyncio.create_task(scheduler.run())
    await asyncio.sleep(0.5)
    await scheduler.stop()
    await run
    ((after,),) = q(database_url, "select now()")  # type: ignore[misc]
    ((payload,),) = q(database_url, f"select payload from {app.schema}.jobs")  # type: ignore[misc]
    latest = datetime.fromisoformat(payload["scheduled_at"])
    # The newest due time when its round ran (between the lead above and now, a second or two on
    # a loaded machine, maybe across a minute's boundary): not one of the gap's older ones.
    assert answer.db_now - timedelta(minutes=1) < latest <= after < latest + timedelta(minutes=1, seconds=10)
    if policy == "skip":
        assert "catch_up" not in payload
    else:
        first = datetime.fromisoformat(payload["catch_up"]["first"])
        assert payload["catch_up"]["last"] == payload["scheduled_at"]
        assert timedelta(hours=2, minutes=58) < latest - first <= timedelta(hours=3)
    fire = plan_fire(minutely.schedule, latest, latest + timedelta(seconds=59))
    assert fire is None
    await app.close()


def test_tasks_command_shows_schedule_last_and_next_fire_and_leader(
    pg_app: App, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _tick = tick_app(database_url, pg_app.schema)

    async def fire_twice() -> None:
        scheduler = Scheduler(app, handle_signals=False)
        run = asyncio.create_task(scheduler.run())
        while scheduler.stats.fired < 1:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert scheduler.leading
        # Read while it leads, then stop.
        report = await read_tasks(app)
        assert report.leader is not None and report.leader.live and report.leader.holder == scheduler.id
        await scheduler.stop()
        await run
        await app.close()

    asyncio.run(fire_twice())
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    result = CliRunner().invoke(cli, ["--schema", app.schema, "tasks", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (task,) = document["tasks"]
    assert task["name"] == "tick" and task["schedule"] == "every 1s" and task["catch_up"] == "skip"
    assert task["fired"] >= 1 and task["last_job_id"] and task["registered"] is True and task["declared"] is None
    last, nxt = (datetime.fromisoformat(task[k]) for k in ("last_occurrence", "next_at"))
    assert nxt == last + timedelta(seconds=1)
    assert document["leader"]["live"] is False, "released on stop"
    human = CliRunner().invoke(cli, ["--schema", app.schema, "tasks"])
    assert human.exit_code == 0 and "every 1s" in human.stdout and "leader: none live" in human.stdout
    assert datetime.fromisoformat(document["now"]).tzinfo == UTC
