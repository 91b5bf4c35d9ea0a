"""The retention purge (``app.admin.purge``), PostgreSQL's alone, rule by rule: each finished state at
its age counted from ``finished_at``, live jobs never, steps with their job, expired events,
gone workers' rows, rate stamps, day counters, ``None`` targets, ``retention=None``, dry runs,
repeats, batches, the report's shape, and the policy's refusals.

Time moves through the ``aged`` fixture: every stored timestamp is shifted back by the same amount
(test setup, not a mock: the purge's own ``now()`` is then that much later relative to every row)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from schemapool import SchemaPool, pooled_app
from workhorse import App, ConfigurationError, JobContext, Limits, Rate, Retention, Retry, TerminalError
from workhorse.types import WorkerInfo

DAY = 86400.0
HOUR = 3600.0
NOTHING = {
    "done": None,
    "cancelled": None,
    "failed": None,
    "dead": None,
    "events": None,
    "workers": None,
    "flow_starts": None,
    "counters": None,
    "webhook_deliveries": None,
}
EVERYTHING = dict.fromkeys(NOTHING, 0)

SHIFT = """
update {s}.jobs set created_at = created_at - %(i)s, finished_at = finished_at - %(i)s,
    run_at = run_at - %(i)s, started_at = started_at - %(i)s, updated_at = updated_at - %(i)s,
    lease_expires_at = lease_expires_at - %(i)s;
update {s}.steps set started_at = started_at - %(i)s, finished_at = finished_at - %(i)s, wake_at = wake_at - %(i)s;
update {s}.events set published_at = published_at - %(i)s, expires_at = expires_at - %(i)s;
update {s}.workers set started_at = started_at - %(i)s, last_seen_at = last_seen_at - %(i)s,
    expires_at = expires_at - %(i)s;
update {s}.counters set bucket = bucket - %(i)s;
update {s}.flow_starts set started_at = started_at - %(i)s;
update {s}.webhook_deliveries set created_at = created_at - %(i)s;
"""


@dataclass
class Aged:
    """An app on one driver, and a way to let time pass for every row it holds."""

    app: App
    url: str
    kind: str = "postgres"

    async def advance(self, seconds: float) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            for statement in SHIFT.format(s=self.app.schema).split(";"):
                if statement.strip():
                    await conn.execute(statement, {"i": timedelta(seconds=seconds)})

    async def sql(self, statement: str) -> list[tuple[Any, ...]]:
        assert self.kind == "postgres"
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cursor = await conn.execute(statement.format(s=self.app.schema))
            return await cursor.fetchall()

    def policy(self, **ages: Any) -> None:
        self.app.retention = Retention(**{**NOTHING, **ages})

    async def purge(self, *, dry_run: bool = False) -> dict[str, Any]:
        return (await self.app.admin.purge(dry_run=dry_run)).to_dict()


@pytest.fixture
async def aged(database_url: str, schema_pool: SchemaPool) -> AsyncIterator[Aged]:
    async with pooled_app(database_url, schema_pool) as app:
        yield Aged(app, database_url)


def report(dry_run: bool = False, steps: int = 0, **removed: int) -> dict[str, Any]:
    jobs = {t: removed.pop(t, 0) for t in ("done", "cancelled", "failed", "dead")}
    others = {t: removed.pop(t, 0) for t in ("events", "workers", "flow_starts", "counters", "webhook_deliveries")}
    assert not removed, removed
    return {"removed": {"jobs": jobs, "steps": steps, **others}, "dry_run": dry_run}


def declare(app: App) -> dict[str, Any]:
    @app.job(name="ok", tenant="none")
    async def ok(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(name="stepped", tenant="none")
    async def stepped(ctx: JobContext, payload: int) -> int:
        await ctx.step.run("one", lambda: 1)
        await ctx.step.run("two", lambda: 2)
        return payload

    @app.job(name="nodl", tenant="none", retry=Retry(attempts=1, dead_letter=False))
    async def nodl(ctx: JobContext, payload: int) -> None:
        raise TerminalError("failed for good")

    @app.job(name="doomed", tenant="none", retry=Retry(attempts=1))
    async def doomed(ctx: JobContext, payload: int) -> None:
        await ctx.step.run("tried", lambda: "once")
        raise TerminalError("dead-lettered")

    @app.job(name="napper", tenant="none")
    async def napper(ctx: JobContext, payload: int) -> None:
        await ctx.step.run("before", lambda: "b")
        await ctx.step.sleep("nap", "365d")

    @app.job(name="waiting", queue="idle", tenant="none")
    async def waiting(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(name="tenanted", queue="rated", tenant=lambda p: p["t"])
    async def tenanted(ctx: JobContext, payload: dict[str, str]) -> None:
        return None

    return locals()


async def drain(app: App, queue: str = "default") -> None:
    await app.worker(queues=[queue]).run(burst=True)


async def state(app: App, job_id: str) -> str | None:
    job = await app.admin.get(job_id)
    return None if job is None else job.state


async def one_of_each_finished(app: App, jobs: dict[str, Any]) -> dict[str, str]:
    """One job finished in each state, enqueued now and finished now (answers state -> id)."""
    done = await jobs["ok"].enqueue(1)
    failed = await jobs["nodl"].enqueue(1)
    dead = await jobs["doomed"].enqueue(1)
    cancelled = await jobs["waiting"].enqueue(1, delay="1h")
    await app.admin.cancel(cancelled.id)
    await drain(app)
    ids = {"done": done.id, "failed": failed.id, "dead": dead.id, "cancelled": cancelled.id}
    assert {s: await state(app, i) for s, i in ids.items()} == {s: s for s in ids}
    return ids


# -- ages ------------------------------------------------------------------------------------------


async def test_each_finished_state_goes_at_its_own_age_from_finished_at(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    aged.policy(done="1h", cancelled="2h", failed="3h", dead="4h")
    ids = await one_of_each_finished(app, jobs)

    await aged.advance(HOUR - 60)  # every one just younger than its age
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(done=1)
    await aged.advance(HOUR - 120)  # 2h - 60s
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(cancelled=1)
    await aged.advance(HOUR - 120)
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(failed=1)
    await aged.advance(HOUR - 120)
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(dead=1, steps=1)
    assert [await state(app, i) for i in ids.values()] == [None] * 4


async def test_age_runs_from_finished_at_not_created_at(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    aged.policy(done="1h", cancelled="1h", failed="1h", dead="1h")
    done = await jobs["ok"].enqueue(1)
    failed = await jobs["nodl"].enqueue(1)
    dead = await jobs["doomed"].enqueue(1)
    cancelled = await jobs["waiting"].enqueue(1)
    await aged.advance(30 * DAY)  # created a month ago, finished just now
    await app.admin.cancel(cancelled.id)
    await drain(app)
    ids = {"done": done.id, "failed": failed.id, "dead": dead.id, "cancelled": cancelled.id}
    assert {s: await state(app, i) for s, i in ids.items()} == {s: s for s in ids}
    assert await aged.purge() == report()
    assert {s: await state(app, i) for s, i in ids.items()} == {s: s for s in ids}
    await aged.advance(HOUR + 60)
    assert await aged.purge() == report(done=1, failed=1, dead=1, cancelled=1, steps=1)


async def test_live_jobs_of_every_live_state_never_go(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    aged.policy(**EVERYTHING)
    ready = await jobs["waiting"].enqueue(1)
    running = await jobs["waiting"].enqueue(2)
    delayed = await jobs["waiting"].enqueue(3, delay="3650d")
    held = await app.driver.claim(worker_id="w", wants={"idle": 2}, names=["waiting"], visibility=DAY)
    assert len(held.claimed) == 2
    ready = await jobs["waiting"].enqueue(4)  # the two enqueued first are running now
    assert (await state(app, running.id), await state(app, delayed.id)) == ("running", "delayed")
    suspended = await jobs["napper"].enqueue(1)
    control = await jobs["ok"].enqueue(1)
    await drain(app)
    ids = {"ready": ready.id, "delayed": delayed.id, "suspended": suspended.id}
    ids["running"] = held.claimed[0].id
    ids["running too"] = held.claimed[1].id
    before = {k: await state(app, i) for k, i in ids.items()}
    assert before == {
        "ready": "ready",
        "delayed": "delayed",
        "suspended": "suspended",
        "running": "running",
        "running too": "running",
    }
    await aged.advance(30 * DAY)
    # The control proves the purge ran with every age at 0: only the finished job goes.
    assert await aged.purge() == report(done=1)
    assert await state(app, control.id) is None
    assert {k: await state(app, i) for k, i in ids.items()} == before
    assert [s.name for s in await app.driver.list_steps(suspended.id)] == ["before", "nap"]


async def test_steps_go_with_their_job_and_are_counted(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    aged.policy(done="1h", dead="1h")
    stepped = [await jobs["stepped"].enqueue(n) for n in range(3)]
    dead = await jobs["doomed"].enqueue(1)
    await drain(app)
    for ref in stepped:
        assert [s.name for s in await app.driver.list_steps(ref.id)] == ["one", "two"]
    assert [s.name for s in await app.driver.list_steps(dead.id)] == ["tried"]
    await aged.advance(HOUR + 60)
    assert await aged.purge() == report(done=3, dead=1, steps=7)
    for ref in [*stepped, dead]:
        assert await state(app, ref.id) is None
        assert await app.driver.list_steps(ref.id) == []
    if aged.kind == "postgres":
        assert await aged.sql("select count(*) from {s}.steps") == [(0,)]


# -- events, workers, rate stamps, counters --------------------------------------------------------


async def test_expired_events_go_at_expiry_with_events_0(aged: Aged) -> None:
    app = aged.app
    aged.policy(events=0)
    await app.publish_event("paid", {"n": 1}, key="a", ttl="10m")
    await app.publish_event("paid", {"n": 2}, key="b", ttl="1h")
    await aged.advance(600 - 30)
    assert await aged.purge() == report()
    await aged.advance(60)
    assert await aged.purge() == report(events=1)
    await aged.advance(HOUR - 600)
    assert await aged.purge() == report(events=1)
    assert await aged.purge() == report()


async def test_a_grace_age_keeps_expired_events_that_long(aged: Aged) -> None:
    app = aged.app
    aged.policy(events="1d")
    await app.publish_event("paid", None, ttl="10m")
    await aged.advance(600 + DAY - 60)  # expired a day ago, less a minute
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(events=1)


async def test_gone_workers_rows_go_after_their_age_and_live_ones_stay(aged: Aged) -> None:
    app = aged.app
    aged.policy(workers="1d")
    info: dict[str, Any] = {"host": "h", "pid": 1, "queues": ["default"], "concurrency": {"default": 1}}
    await app.driver.register_worker(WorkerInfo(id="w-live", **info), ttl=30 * DAY)
    await app.driver.register_worker(WorkerInfo(id="w-gone", **info), ttl=30)
    await aged.advance(30 + DAY - 60)  # gone for a day, less a minute
    assert await aged.purge() == report()
    assert sorted(w.id for w in await app.list_workers()) == ["w-live"]
    await aged.advance(120)
    assert await aged.purge() == report(workers=1)
    assert [w.id for w in await app.list_workers()] == ["w-live"]
    # Even at 0 a live row is not a gone one.
    aged.policy(workers=0)
    assert await aged.purge() == report()
    assert [w.id for w in await app.list_workers()] == ["w-live"]
    if aged.kind == "postgres":
        assert await aged.sql("select id from {s}.workers") == [("w-live",)]


async def test_rate_stamps_go_after_their_age_but_never_inside_the_rate_window(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    app.limits = Limits(rate_per_tenant=Rate(100, per="2h"))
    await jobs["tenanted"].enqueue_many([{"t": t} for t in ("a", "b", "a")])
    await drain(app, "rated")
    # flow_starts=0, but a declared rate keeps its window's stamps (per, and its slack).
    rules = app.flow_rules()
    assert rules is not None and rules.rate_window is not None
    window = rules.rate_window
    assert 2 * HOUR <= window < 2.5 * HOUR
    aged.policy(flow_starts=0)
    await aged.advance(window - 60)
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(flow_starts=3)

    # A rate no longer declared: the age alone decides.
    await jobs["tenanted"].enqueue_many([{"t": "c"}, {"t": "d"}])
    await drain(app, "rated")
    app.limits = None
    aged.policy(flow_starts="1h")
    await aged.advance(HOUR - 60)
    assert await aged.purge() == report()
    await aged.advance(120)
    assert await aged.purge() == report(flow_starts=2)


async def test_day_counters_older_than_their_age_go_minutes_and_hours_never(aged: Aged) -> None:
    app = aged.app
    jobs = declare(app)
    for n in range(3):
        await jobs["ok"].enqueue(n)
    await jobs["nodl"].enqueue(1)
    await drain(app)
    await aged.advance(3 * DAY)
    await app.admin.rollup()
    await app.admin.rollup()
    folded = (await app.admin.snapshot(None)).counters
    assert [(c.name, c.completed, c.failed) for c in folded] == [("nodl", 0, 1), ("ok", 3, 0)]
    if aged.kind == "postgres":
        assert await aged.sql("select tier, count(*) from {s}.counters group by tier") == [("day", 2)]
    aged.policy(counters="10d")
    assert await aged.purge() == report()  # a day bucket 3-4 days old
    await aged.advance(5 * DAY)
    assert await aged.purge() == report()  # 8-9 days old
    # A fresh minute counter beside them: never a day counter, whatever the age.
    await jobs["ok"].enqueue(9)
    await drain(app)
    await aged.advance(3 * DAY)  # the day buckets: 11-12 days old; the minute: 3 days
    assert await aged.purge() == report(counters=2)
    assert [(c.name, c.completed) for c in (await app.admin.snapshot(None)).counters] == [("ok", 1)]
    aged.policy(counters=0)
    await aged.advance(500 * DAY)
    assert await aged.purge() == report()
    assert [(c.name, c.completed) for c in (await app.admin.snapshot(None)).counters] == [("ok", 1)]


async def test_old_day_counters_inserted_directly_go(pg_app: App, database_url: str) -> None:
    schema = pg_app.schema
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"insert into {schema}.counters (tier, bucket, queue, name, completed) values "
            "('day', date_trunc('day', now()) - interval '401 days', 'q', 'old', 5), "
            "('day', date_trunc('day', now()) - interval '399 days', 'q', 'young', 5), "
            "('hour', date_trunc('hour', now()) - interval '999 days', 'q', 'hourly', 5)"
        )
    pg_app.retention = Retention()  # counters="400d"
    assert (await pg_app.admin.purge()).to_dict() == report(counters=1)
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(f"select name from {schema}.counters order by name").fetchall()
    assert rows == [("hourly",), ("young",)]


# -- what is kept, dry runs, repeats, batches ------------------------------------------------------


async def populate(aged: Aged) -> dict[str, Any]:
    """Something old in every target, then a year passes: done 4 (ok, stepped, two tenanted),
    cancelled, failed and dead 1 each, steps 3 (stepped's two, doomed's one), an event, a gone
    worker, 2 rate stamps, 5 day counters (one per job name); and a live job."""
    app = aged.app
    jobs = declare(app)
    app.limits = Limits(rate_per_tenant=Rate(100, per="1s"))
    ids = await one_of_each_finished(app, jobs)
    await jobs["stepped"].enqueue(1)
    await drain(app)
    await jobs["tenanted"].enqueue_many([{"t": "a"}, {"t": "b"}])
    await drain(app, "rated")
    app.limits = None
    await app.publish_event("paid", None, ttl="1m")
    info = WorkerInfo(id="w-gone", host="h", pid=1, queues=["default"], concurrency={"default": 1})
    await app.driver.register_worker(info, ttl=1)
    live = await jobs["waiting"].enqueue(1)
    await aged.advance(3 * DAY)
    await app.admin.rollup()
    await app.admin.rollup()
    await aged.advance(365 * DAY)
    return {"ids": ids, "live": live.id}


EVERY_TARGET = report(done=4, cancelled=1, failed=1, dead=1, steps=3, events=1, workers=1, flow_starts=2, counters=5)


async def test_a_target_set_to_none_is_kept(aged: Aged) -> None:
    setup = await populate(aged)
    aged.policy(**{**EVERYTHING, "done": None, "events": None})
    expected = report(cancelled=1, failed=1, dead=1, steps=1, workers=1, flow_starts=2, counters=5)
    assert await aged.purge() == expected
    assert await state(aged.app, setup["ids"]["done"]) == "done"
    aged.policy(**EVERYTHING)
    assert await aged.purge() == report(done=4, steps=2, events=1)


async def test_retention_none_removes_nothing(aged: Aged) -> None:
    setup = await populate(aged)
    aged.app.retention = None
    assert await aged.purge() == report()
    assert await aged.purge(dry_run=True) == report(dry_run=True)
    assert (await aged.app.admin.purge()).total == 0
    states = {s: await state(aged.app, i) for s, i in setup["ids"].items()}
    assert states == {s: s for s in setup["ids"]}
    aged.policy(**EVERYTHING)  # and all of it was there to remove
    assert await aged.purge() == EVERY_TARGET


async def test_an_app_built_with_retention_none_keeps_everything(aged: Aged) -> None:
    assert App(driver="memory", retention=None).retention is None
    aged.app.retention = None
    jobs = declare(aged.app)
    ref = await jobs["ok"].enqueue(1)
    await drain(aged.app)
    await aged.advance(10_000 * DAY)
    assert (await aged.app.admin.purge()).to_dict() == report()
    assert await state(aged.app, ref.id) == "done"
    assert App().retention == Retention()


async def test_a_dry_run_counts_exactly_what_the_real_run_removes(aged: Aged) -> None:
    setup = await populate(aged)
    aged.policy(**EVERYTHING)
    dry = await aged.purge(dry_run=True)
    assert dry == {**EVERY_TARGET, "dry_run": True}
    assert await aged.purge(dry_run=True) == dry  # it removed nothing
    assert {s: await state(aged.app, i) for s, i in setup["ids"].items()} == {s: s for s in setup["ids"]}
    real = await aged.purge()
    assert real == {**dry, "dry_run": False}
    assert await aged.purge(dry_run=True) == report(dry_run=True)
    assert await state(aged.app, setup["live"]) == "ready"


async def test_a_second_purge_removes_nothing_again(aged: Aged) -> None:
    await populate(aged)
    aged.policy(**EVERYTHING)
    assert await aged.purge() == EVERY_TARGET
    assert await aged.purge() == report()
    if aged.kind == "postgres":
        rows = await aged.sql(
            "select (select count(*) from {s}.jobs), (select count(*) from {s}.steps), "
            "(select count(*) from {s}.events), (select count(*) from {s}.workers), "
            "(select count(*) from {s}.flow_starts), (select count(*) from {s}.counters)"
        )
        assert rows == [(1, 0, 0, 0, 0, 0)]  # the live job


@pytest.mark.parametrize("rows", [7, 8])
async def test_small_batches_still_remove_everything_in_one_call(aged: Aged, rows: int) -> None:
    app = aged.app
    jobs = declare(app)
    for n in range(rows):
        await jobs["stepped"].enqueue(n)
        await app.publish_event("paid", n, ttl="1m")
        info = WorkerInfo(id=f"w-{n}", host="h", pid=n, queues=["default"], concurrency={"default": 1})
        await app.driver.register_worker(info, ttl=1)
    await drain(app)
    await aged.advance(DAY)
    aged.app.retention = Retention(**{**EVERYTHING, "batch": 2})
    assert await aged.purge(dry_run=True) == report(dry_run=True, done=rows, steps=2 * rows, events=rows, workers=rows)
    assert await aged.purge() == report(done=rows, steps=2 * rows, events=rows, workers=rows)
    assert await aged.purge() == report()


# -- the report, the defaults, the refusals --------------------------------------------------------


async def test_the_report_has_the_documented_shape(aged: Aged) -> None:
    await populate(aged)
    aged.policy(**EVERYTHING)
    purged = await aged.app.admin.purge()
    document = purged.to_dict()
    assert list(document) == ["removed", "dry_run"]
    assert list(document["removed"]) == [
        "jobs",
        "steps",
        "events",
        "workers",
        "flow_starts",
        "counters",
        "webhook_deliveries",
    ]
    assert list(document["removed"]["jobs"]) == ["done", "cancelled", "failed", "dead"]
    assert document == EVERY_TARGET
    assert all(type(n) is int for n in document["removed"]["jobs"].values())
    assert all(type(document["removed"][t]) is int for t in list(document["removed"])[1:])
    assert document["dry_run"] is False and purged.dry_run is False
    assert purged.total == 4 + 1 + 1 + 1 + 3 + 1 + 1 + 2 + 5


def test_the_defaults_are_the_documented_ones() -> None:
    policy = Retention()
    assert (policy.done, policy.cancelled, policy.failed, policy.dead) == (DAY, DAY, 7 * DAY, 14 * DAY)
    assert (policy.events, policy.workers, policy.flow_starts, policy.counters) == (0, DAY, DAY, 400 * DAY)
    assert policy.webhook_deliveries == 30 * DAY
    assert (policy.every, policy.batch) == (HOUR, 500)
    assert App(driver="memory").retention == policy
    kept = Retention(done=None, every="5m", batch=10_000)
    assert (kept.done, kept.every, kept.batch) == (None, 300.0, 10_000)


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"done": -1}, "-1"),
        ({"cancelled": "soon"}, "'soon'"),
        ({"failed": math.nan}, "nan"),
        ({"dead": True}, "True"),
        ({"events": -0.5}, "-0.5"),
        ({"workers": "1y"}, "'1y'"),
        ({"flow_starts": math.inf}, "inf"),
        ({"counters": [1]}, "[1]"),
        ({"webhook_deliveries": -1}, "-1"),
        ({"webhook_deliveries": "a month"}, "'a month'"),
        ({"webhook_deliveries": math.nan}, "nan"),
        ({"every": 0}, "0"),
        ({"every": None}, "None"),
        ({"batch": 0}, "0"),
        ({"batch": 1.5}, "1.5"),
        ({"batch": True}, "True"),
        ({"batch": 10_001}, "10001"),
        ({"batch": "500"}, "'500'"),
    ],
)
def test_bad_policies_are_refused_naming_the_value(kwargs: dict[str, Any], shown: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Retention(**kwargs)
    assert caught.value.code == "CONFIG_INVALID"
    assert shown in caught.value.cause
    assert next(iter(kwargs)) in caught.value.cause


@pytest.mark.parametrize("value", ["1d", {"done": "1d"}, 86400, True])
def test_an_app_refuses_a_retention_that_is_not_one(value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        App(driver="memory", retention=value)
    assert caught.value.code == "CONFIG_INVALID"
    assert repr(value) in caught.value.cause
