"""Job dependencies (issue 32) against a real PostgreSQL: fan-in, when='finished', cancellation
cascades, refusals, the caller's transaction, concurrent settles, flow control, steps, lapsed leases."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from workhorse import App, Concurrency, Dependency, JobContext, Retry, TerminalError, WorkhorseError
from workhorse.errors import ConfigurationError


async def state_of(app: App, ref: Any) -> str:
    job = await app.get_job(ref.id if hasattr(ref, "id") else ref)
    assert job is not None
    return job.state


async def test_fan_in_runs_the_dependent_once_all_are_done_with_their_results(pg_app: App) -> None:
    app = pg_app
    seen: list[list[Dependency]] = []

    @app.job(tenant="none")
    async def part(ctx: JobContext, payload: int) -> int:
        return payload * 10

    @app.job(tenant="none")
    async def total(ctx: JobContext, payload: None) -> int:
        seen.append(list(ctx.dependencies))
        return sum(d.result for d in ctx.dependencies)

    parts = [await part.enqueue(i) for i in range(1, 6)]
    child = await total.enqueue(None, after=list(reversed(parts)))
    assert await state_of(app, child) == "pending"
    page = await app.list_jobs(state="pending")
    assert [j.id for j in page.jobs] == [child.id]
    await app.worker(concurrency=4).run(burst=True)
    job = await app.get_job(child.id)
    assert job is not None and job.state == "done" and job.result == 150
    (deps,) = seen
    assert [d.id for d in deps] == [p.id for p in reversed(parts)]  # the order given
    assert [d.result for d in deps] == [50, 40, 30, 20, 10]
    assert {d.state for d in deps} == {"done"} and {d.name for d in deps} == {part.name}


async def test_a_failed_dependency_cancels_a_done_dependent_and_its_own_dependents(pg_app: App) -> None:
    app = pg_app
    ran: list[str] = []

    @app.job(tenant="none", retry=Retry(attempts=1))
    async def doomed(ctx: JobContext, payload: None) -> None:
        raise TerminalError("no")

    @app.job(tenant="none")
    async def later(ctx: JobContext, payload: str) -> str:
        ran.append(payload)
        return payload

    bad = await doomed.enqueue(None)
    good = await later.enqueue("good")
    child = await later.enqueue("child", after=[good, bad])
    grandchild = await later.enqueue("grandchild", after=[child])
    summary = await later.enqueue("summary", after=[bad, child], when="finished")
    await app.worker(concurrency=2).run(burst=True)
    assert sorted(ran) == ["good", "summary"]
    job = await app.get_job(child.id)
    assert job is not None and job.state == "cancelled"
    assert job.last_error is not None and bad.id in job.last_error["message"]
    assert job.last_error["code"] == "DEPENDENCY_FAILED" and job.last_error["dependency_state"] == "dead"
    grand = await app.get_job(grandchild.id)
    assert grand is not None and grand.state == "cancelled"
    assert grand.last_error is not None and child.id in grand.last_error["message"]
    assert await state_of(app, summary) == "done"


async def test_dependencies_already_final_count_at_once(pg_app: App) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    first = await step.enqueue(1)
    await app.worker().run(burst=True)
    ready = await step.enqueue(2, after=[first])
    assert await state_of(app, ready) == "ready"
    gone = await step.enqueue(3)
    await app.admin.cancel(gone.id)
    cancelled = await step.enqueue(4, after=[first, gone])
    job = await app.get_job(cancelled.id)
    assert job is not None and job.state == "cancelled" and gone.id in job.last_error["message"]  # type: ignore[index]
    finished = await step.enqueue(5, after=[gone], when="finished")
    assert await state_of(app, finished) == "ready"


async def test_an_unknown_dependency_is_refused_and_nothing_is_inserted(pg_app: App) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    known = await step.enqueue(1)
    missing = str(uuid.uuid4())
    with pytest.raises(WorkhorseError) as refused:
        await step.enqueue(2, after=[known, missing])
    assert refused.value.code == "DEPENDENCY_UNKNOWN" and missing in refused.value.cause
    with pytest.raises(WorkhorseError) as batch:
        await step.enqueue_many([3, 4], after=[missing])
    assert batch.value.code == "DEPENDENCY_UNKNOWN"
    with pytest.raises(WorkhorseError) as malformed:
        await step.enqueue(5, after=["not-an-id"])
    assert malformed.value.code == "DEPENDENCY_UNKNOWN"
    page = await app.list_jobs()
    assert [j.id for j in page.jobs] == [known.id]  # nothing else was inserted


async def test_bad_options_are_refused(pg_app: App) -> None:
    @pg_app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    known = await step.enqueue(1)
    with pytest.raises(ConfigurationError) as when:
        await step.enqueue(2, after=[known], when="always")
    assert when.value.code == "CONFIG_INVALID" and "'done'" in when.value.cause and "'finished'" in when.value.cause
    with pytest.raises(ConfigurationError) as keyed:
        await step.enqueue(2, after=[known], key="k")
    assert "key=" in keyed.value.cause
    with pytest.raises(ConfigurationError):
        await step.enqueue(2, after=known)  # type: ignore[arg-type]


async def test_memory_driver_refuses_after_with_postgres_only() -> None:
    app = App(driver="memory")

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    known = await step.enqueue(1)
    with pytest.raises(ConfigurationError) as refused:
        await step.enqueue(2, after=[known])
    assert refused.value.code == "POSTGRES_ONLY" and "pg_app" in refused.value.fix


async def test_a_graph_in_the_callers_transaction_commits_or_rolls_back_with_it(pg_app: App, database_url: str) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction(force_rollback=True):
            a = await step.enqueue(1, conn=conn)
            b = await step.enqueue(2, after=[a], conn=conn)  # a ref of this very transaction counts
            (c,) = await step.enqueue_many([3], after=[a, b], conn=conn)
        assert await app.get_job(a.id) is None and await app.get_job(c.id) is None
        async with conn.transaction():
            a = await step.enqueue(1, conn=conn)
            b = await step.enqueue(2, after=[a], conn=conn)
    assert await state_of(app, b) == "pending"
    with psycopg.connect(database_url) as sync:
        edges = sync.execute(f"select count(*) from {app.schema}.job_deps").fetchone()  # type: ignore[arg-type]
    assert edges == (1,)  # the rolled-back graph left no edge
    await app.worker().run(burst=True)
    assert await state_of(app, b) == "done"
