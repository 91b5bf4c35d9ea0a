"""RESCUE on a real PostgreSQL (``leader/queries.py``, ``RescueRole.rescue_lapsed``): what it
writes (what the claim's lapsed arm writes, short of running the job), the fence it keeps, the
locks it skips, its batches, its cost when nothing lapsed, its wake-up and the slots it frees."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

import workhorse.leader.queries as rescue_sql
from workhorse import App, JobContext, Limits, Retry
from workhorse.drivers.base import RescueRole
from workhorse.drivers.postgres_core import jobs_channel
from workhorse.leader.rescue import RESCUE_BATCH, rescue_lapsed
from workhorse.limits.rules import rules_for
from workhorse.types import Lease, Settlement

LAPSE = 0.3  # seconds a test lease lasts


def declare(app: App, *, attempts: int = 3, dead_letter: bool = True, queue: str = "default") -> Any:
    @app.job(name="work", queue=queue, tenant="none", retry=Retry(attempts=attempts, base=0, dead_letter=dead_letter))
    async def work(ctx: JobContext, payload: int) -> int:
        return payload

    return work


async def lapse(app: App, ids: list[str], *, queue: str = "default", worker: str = "dead") -> list[Lease]:
    """Claim ``ids`` as ``worker`` with a short lease, and let it lapse (the worker died)."""
    result = await app.driver.claim(
        worker_id=worker, wants={queue: len(ids)}, names=["work"], visibility=LAPSE, sweep=False
    )
    assert sorted(c.id for c in result.claimed) == sorted(ids)
    await asyncio.sleep(LAPSE + 0.1)
    return [Lease(c.id, c.claims) for c in result.claimed]


def rescuer(app: App) -> RescueRole:
    driver = app.driver
    assert isinstance(driver, RescueRole)
    return driver


async def counters(app: App) -> dict[str, int]:
    stats = await app.admin.stats()
    row = stats.queues[0]
    return {"lapsed": row.lapsed, "failures": row.failures}


async def test_a_lapsed_lease_goes_back_ready_with_its_attempt_spent_and_its_claim_fenced_out(pg_app: App) -> None:
    work = declare(pg_app)
    ref = await work.enqueue(7)
    [lease] = await lapse(pg_app, [ref.id])
    before = await pg_app.get_job(ref.id)
    assert before is not None and (before.state, before.lease_lapsed, before.attempt) == ("running", True, 1)

    rescued = await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)
    assert (rescued.readied, rescued.buried) == ([ref.id], [])
    job = await pg_app.get_job(ref.id)
    assert job is not None
    assert (job.state, job.attempt, job.worker_id, job.lease_expires_at, job.lease_lapsed) == (
        "ready",
        1,
        None,
        None,
        False,
    )
    assert job.run_at == before.run_at  # due at once (it was due), its place in the claim order kept
    assert (job.last_error, job.errors) == (None, [])  # a claim's re-take writes no error either
    assert await counters(pg_app) == {"lapsed": 1, "failures": 0}
    # The dead worker's late writes land nowhere: its settle and its renewal miss.
    assert await pg_app.driver.settle([Settlement(ref.id, "dead", lease.claims, "done", result="7")]) == [False]
    assert (await pg_app.driver.heartbeat("dead", [lease], 30.0)).held == set()
    # The next claim runs attempt 2, as a re-take by a claim would have.
    again = await pg_app.driver.claim(worker_id="live", wants={"default": 1}, names=["work"], visibility=30)
    assert [(c.id, c.attempt) for c in again.claimed] == [(ref.id, 2)]
    assert (await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)).count == 0  # a live lease is left alone


@pytest.mark.parametrize(("dead_letter", "state"), [(True, "dead"), (False, "failed")])
async def test_a_lapse_on_the_final_attempt_is_buried_with_the_lease_lapsed(
    pg_app: App, dead_letter: bool, state: str
) -> None:
    work = declare(pg_app, attempts=1, dead_letter=dead_letter)
    ref = await work.enqueue(1)
    await lapse(pg_app, [ref.id])
    rescued = await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)
    assert rescued.readied == [] and [(b.id, b.state, b.attempt, b.payload) for b in rescued.buried] == [
        (ref.id, state, 1, 1)
    ]
    job = await pg_app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt, job.worker_id) == (state, 1, None)
    assert job.finished_at is not None and job.last_error is not None
    assert job.last_error["type"] == "LeaseLapsed"
    assert "the lease lapsed on the final attempt (1 of 1)" in job.last_error["message"]
    assert [e["type"] for e in job.errors] == ["LeaseLapsed"]
    stats = await pg_app.admin.stats()
    assert (stats.queues[0].failures, stats.queues[0].lapsed, getattr(stats.queues[0], state)) == (1, 0, 1)


async def test_a_row_another_statement_holds_is_skipped_and_rescued_once_released(
    pg_app: App, database_url: str
) -> None:
    work = declare(pg_app)
    held, free = await work.enqueue(1), await work.enqueue(2)
    await lapse(pg_app, [held.id, free.id])
    with psycopg.connect(database_url) as other:  # a claim re-taking `held` right now, say
        other.execute(f"select 1 from {pg_app.schema}.jobs where id = %s for update", (held.id,))  # type: ignore[arg-type]
        began = time.monotonic()
        rescued = await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)
        assert time.monotonic() - began < 2.0  # not waited on
        assert rescued.readied == [free.id]
    assert (await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)).readied == [held.id]


async def test_batches_are_bounded_and_a_turn_runs_them_until_one_comes_back_short(
    pg_app: App, database_url: str
) -> None:
    declare(pg_app)
    total = 2 * RESCUE_BATCH + 17
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"insert into {pg_app.schema}.jobs (id, name, queue, state, payload, max_attempts, attempt, claims, "  # type: ignore[arg-type]
            "worker_id, lease_expires_at, run_at) select gen_random_uuid(), 'work', 'default', 'running', '1', 3, "
            "1, 1, 'dead', now() - g * interval '1 second', now() from generate_series(1, %s) as g",
            (total,),
        )
    calls: list[int] = []

    async def counted(batch: int) -> Any:
        rescued = await rescuer(pg_app).rescue_lapsed(batch)
        calls.append(rescued.count)
        return rescued

    assert await rescue_lapsed(counted, by="test", announce=lambda rows: None) == total
    assert calls == [RESCUE_BATCH, RESCUE_BATCH, 17]  # three statements, the last one short
    stats = await pg_app.admin.stats()
    assert (stats.queues[0].ready, stats.queues[0].lapsed) == (total, total)


async def test_nothing_lapsed_costs_one_index_probe(pg_app: App, database_url: str) -> None:
    """The statement a rescuer runs every turn reads jobs_running_lease_idx and stops at once: at
    50,000 finished rows and 2,000 running ones with live leases, no sequential scan of jobs."""
    declare(pg_app)
    schema = pg_app.schema
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, run_at, finished_at) "  # type: ignore[arg-type]
            "select gen_random_uuid(), 'work', 'default', 'done', '1', 3, now(), now() from generate_series(1, 50000)"
        )
        conn.execute(
            f"insert into {schema}.jobs (id, name, queue, state, payload, max_attempts, attempt, claims, worker_id, "  # type: ignore[arg-type]
            "lease_expires_at, run_at) select gen_random_uuid(), 'work', 'default', 'running', '1', 3, 1, 1, 'w', "
            "now() + interval '30 seconds', now() from generate_series(1, 2000)"
        )
        conn.execute(f"analyze {schema}.jobs")  # type: ignore[arg-type]
        text = rescue_sql.RESCUE.replace("{schema}", schema).replace("%(batch)s", "100")
        text = text.replace("%(channel)s", "'unused'")
        plan = "\n".join(r[0] for r in conn.execute(f"explain (analyze, costs off) {text}").fetchall())  # type: ignore[arg-type]
    assert "jobs_running_lease_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    rescued = await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)
    assert rescued.count == 0


async def test_a_rescued_job_wakes_its_queue(pg_app: App, database_url: str) -> None:
    work = declare(pg_app, queue="mail")
    ref = await work.enqueue(1)
    await lapse(pg_app, [ref.id], queue="mail")
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f'listen "{jobs_channel(pg_app.schema)}"')  # type: ignore[arg-type]
        assert (await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)).readied == [ref.id]
        payloads = [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)]
    assert payloads == ["mail"]  # due now: an idle worker of the queue claims at once


async def test_a_rescue_frees_the_slots_the_lapsed_run_held(pg_app: App) -> None:
    """A lapsed run a cap counts held its slot until a claim locked it: in a paused queue, no
    claim of that queue ever does. Rescued, it holds none, and the tenant's other queue runs."""
    pg_app.limits = Limits(per_tenant=1)

    @pg_app.job(name="work", queue="paused", tenant=lambda p: "acme", retry=Retry(attempts=3, base=0))
    async def work(ctx: JobContext, payload: int) -> None:
        return None

    @pg_app.job(name="other", queue="open", tenant=lambda p: "acme")
    async def other(ctx: JobContext, payload: int) -> None:
        return None

    flow = rules_for(pg_app.limits, {h.name: h.concurrency for h in pg_app.jobs.values()})
    assert flow is not None
    stuck = await work.enqueue(1)
    taken = await pg_app.driver.claim(
        worker_id="dead", wants={"paused": 1}, names=["work"], visibility=LAPSE, flow=flow
    )
    assert [c.id for c in taken.claimed] == [stuck.id]
    waiting = await other.enqueue(2)
    await pg_app.admin.pause("paused")
    held = await pg_app.driver.claim(worker_id="live", wants={"open": 1}, names=["other"], visibility=30, flow=flow)
    assert held.claimed == []  # acme's one slot is held by the running job
    await asyncio.sleep(LAPSE + 0.1)
    assert (await rescuer(pg_app).rescue_lapsed(RESCUE_BATCH)).readied == [stuck.id]
    usage = await pg_app.driver.flow_usage(flow, {})
    assert usage.running.get(("tenant", "acme"), 0) == 0
    freed = await pg_app.driver.claim(worker_id="live", wants={"open": 1}, names=["other"], visibility=30, flow=flow)
    assert [c.id for c in freed.claimed] == [waiting.id]
    job = await pg_app.get_job(stuck.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 1)  # waits for its queue's resume
