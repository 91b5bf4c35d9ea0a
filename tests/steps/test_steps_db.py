"""Step and event statements against a real PostgreSQL: the serialising lock, the indexes they read."""

from __future__ import annotations

import asyncio

import psycopg

import workhorse.steps.queries as step_sql
from workhorse import App, JobContext
from workhorse.drivers.postgres import PostgresDriver
from workhorse.types import StepFence


async def test_a_publish_waits_for_an_in_flight_wait_of_its_key_and_then_wakes_it(
    pg_app: App, database_url: str
) -> None:
    """The race a snapshot alone would lose: a run's wait (which suspends the job) not yet committed
    when a publish of the same (name, key) starts. The publish queues behind the wait's lock, then
    its statement sees the suspended job and wakes it: no run sleeps to its deadline."""

    @pg_app.job(name="waiter", tenant="none")
    async def waiter(ctx: JobContext, payload: None) -> None:
        return None

    ref = await waiter.enqueue(None)
    driver = pg_app.driver
    assert isinstance(driver, PostgresDriver)
    (held,) = (await driver.claim(worker_id="w", wants={"default": 1}, names=["waiter"], visibility=30)).claimed
    params = {"job_id": ref.id, "worker_id": "w", "claims": held.claims, "name": "w", "seq": 0}
    async with await psycopg.AsyncConnection.connect(database_url) as waiting:
        async with waiting.transaction():
            await waiting.execute(driver.q(step_sql.EVENT_LOCK), {"name": "ready", "key": "k"})
            cur = await waiting.execute(
                driver.q(step_sql.WAIT), {**params, "event": "ready", "key": "k", "timeout": 3600}
            )
            assert (await cur.fetchone())[0] == "waiting"  # type: ignore[index]
            publish = asyncio.create_task(pg_app.publish_event("ready", {"n": 1}, key="k"))
            await asyncio.sleep(0.3)
            assert not publish.done()  # queued behind the uncommitted wait
        published = await asyncio.wait_for(publish, 10)
    assert published.woken == 1
    job = await pg_app.get_job(ref.id)
    assert job is not None and job.state == "ready"


async def test_a_wait_queued_behind_an_in_flight_publish_reads_one_clock(pg_app: App, database_url: str) -> None:
    """The other order: the wait starts while a publish of its key is in flight. It waits for the
    publish to commit, and its start is then stamped AFTER that event, so the event is (rightly)
    no answer to it, and no later read can disagree."""

    @pg_app.job(name="waiter", tenant="none")
    async def waiter(ctx: JobContext, payload: None) -> None:
        return None

    ref = await waiter.enqueue(None)
    driver = pg_app.driver
    assert isinstance(driver, PostgresDriver)
    (held,) = (await driver.claim(worker_id="w", wants={"default": 1}, names=["waiter"], visibility=30)).claimed
    async with await psycopg.AsyncConnection.connect(database_url) as publisher:
        async with publisher.transaction():
            await publisher.execute(driver.q(step_sql.EVENT_LOCK), {"name": "ready", "key": "k"})
            wait = asyncio.create_task(
                driver.wait_step(
                    StepFence(ref.id, "w", held.claims), name="w", seq=0, event="ready", key="k", within=3600
                )
            )
            await asyncio.sleep(0.3)
            assert not wait.done()  # queued behind the publish
            cur = await publisher.execute(
                driver.q(step_sql.PUBLISH),
                {"name": "ready", "key": "k", "payload": "1", "ttl": 3600, "channel": driver.channel},
            )
            row = await cur.fetchone()
        answer = await asyncio.wait_for(wait, 10)
    assert row is not None and row[3] == 0  # the run was not waiting yet: nothing to wake
    assert answer is not None and answer.state == "waiting"
    (step,) = await driver.list_steps(ref.id)
    assert step.started_at is not None and step.started_at > row[1]  # began after the event


def test_the_claim_reads_the_due_index_for_suspended_rows(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"""insert into {pg_app.schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, finished_at)
            select gen_random_uuid(), 'task', 'default', 'done', '{{}}', 1, now(), now()
            from generate_series(1, 50000)"""  # type: ignore[arg-type]
        )
        conn.execute(f"analyze {pg_app.schema}.jobs")  # type: ignore[arg-type]
        due = conn.execute(
            f"""explain select id from {pg_app.schema}.jobs
            where state in ('ready', 'delayed', 'suspended') and run_at <= now() and queue = 'default'
            order by priority desc, run_at, id limit 10"""  # type: ignore[arg-type]
        ).fetchall()
        later = conn.execute(
            f"""explain select run_at from {pg_app.schema}.jobs
            where state in ('delayed', 'suspended') and run_at > now() and queue = 'default'
            order by run_at limit 1"""  # type: ignore[arg-type]
        ).fetchall()
    assert "jobs_due_idx" in "\n".join(r[0] for r in due)
    assert "jobs_later_idx" in "\n".join(r[0] for r in later)


def test_a_publish_finds_its_waiters_through_the_partial_index(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"""insert into {pg_app.schema}.jobs (id, name, queue, state, payload, max_attempts, run_at)
            select ('00000000-0000-7000-8000-' || lpad(g::text, 12, '0'))::uuid, 'task', 'default', 'done',
                   '{{}}', 1, now()
            from generate_series(1, 20000) as g"""  # type: ignore[arg-type]
        )
        conn.execute(
            f"""insert into {pg_app.schema}.steps (job_id, name, seq, state, attempt, event, event_key, started_at)
            select ('00000000-0000-7000-8000-' || lpad(g::text, 12, '0'))::uuid, 's', 0,
                   case when g % 100 = 0 then 'waiting' else 'done' end, 1, 'e', 'k' || g, now()
            from generate_series(1, 20000) as g"""  # type: ignore[arg-type]
        )
        conn.execute(f"analyze {pg_app.schema}.steps")  # type: ignore[arg-type]
        plan = conn.execute(
            f"""explain select s.job_id from {pg_app.schema}.steps as s
            where s.state = 'waiting' and s.event = 'e' and coalesce(s.event_key, '') = 'k100'"""  # type: ignore[arg-type]
        ).fetchall()
    assert "steps_waiting_idx" in "\n".join(r[0] for r in plan)
