"""Job dependencies (issue 32) against a real PostgreSQL: fan-in, when='finished', cancellation
cascades, refusals, the caller's transaction, concurrent settles, flow control, steps, lapsed leases."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from workhorse import App, Dependency, JobContext, Retention, Retry, TerminalError, WorkhorseError
from workhorse.cli import cli
from workhorse.drivers.base import RescueRole
from workhorse.errors import ConfigurationError
from workhorse.ids import short_id
from workhorse.leader.rescue import RESCUE_BATCH
from workhorse.types import Settlement


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


async def test_two_workers_settling_the_last_two_dependencies_at_once_release_it_once(
    pg_app: App, database_url: str
) -> None:
    """Two drivers (two pools) settle a fan-in's two parents at the same moment, many times over:
    each dependent ends ready with nothing left to wait on (a lost decrement would leave it pending)."""
    app = pg_app

    @app.job(tenant="none")
    async def part(ctx: JobContext, payload: int) -> int:
        return payload

    other = App(database_url, schema=app.schema)
    try:
        rounds = 15
        children = []
        pairs = []
        for i in range(rounds):
            a, b = await part.enqueue(i), await part.enqueue(-i)
            children.append(await part.enqueue(0, after=[a, b]))
            pairs.append((a.id, b.id))
        claimed = await app.driver.claim(worker_id="w1", wants={"default": 2 * rounds}, names=["x"], visibility=30)
        assert claimed.claimed == []  # an unknown name: nothing taken
        got = await app.driver.claim(
            worker_id="w1", wants={"default": 2 * rounds}, names=[part.name], visibility=30, sweep=False
        )
        fences = {c.id: c.claims for c in got.claimed}
        assert len(fences) == 2 * rounds  # the dependents wait: only the parents are claimable
        for a, b in pairs:
            one = Settlement(a, "w1", fences[a], "done", result="1")
            two = Settlement(b, "w1", fences[b], "done", result="2")
            assert await asyncio.gather(app.driver.settle([one]), other.driver.settle([two])) == [[True], [True]]
        with psycopg.connect(database_url) as conn:
            rows = conn.execute(
                f"select state, deps_left from {app.schema}.jobs where id = any(%s::uuid[])",  # type: ignore[arg-type]
                ([c.id for c in children],),
            ).fetchall()
        assert rows == [("ready", 0)] * rounds
    finally:
        await other.close()


async def test_a_released_dependent_is_still_capped_by_flow_control(pg_app: App) -> None:
    app = pg_app
    running = 0
    most = 0

    @app.job(tenant="none")
    async def first(ctx: JobContext, payload: None) -> None:
        return None

    @app.job(tenant="none", concurrency=1)
    async def capped(ctx: JobContext, payload: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.02)
        running -= 1
        return payload

    parent = await first.enqueue(None)
    refs = await capped.enqueue_many([1, 2, 3, 4], after=[parent])
    assert {await state_of(app, r) for r in refs} == {"pending"}
    await app.worker(concurrency=4).run(burst=True)
    assert {await state_of(app, r) for r in refs} == {"done"}
    assert most == 1  # released together, run one at a time


async def test_a_steps_job_may_be_a_dependent(pg_app: App) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def source(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(tenant="none")
    async def stepped(ctx: JobContext, payload: None) -> int:
        got = await ctx.step.run("read", lambda: [d.result for d in ctx.dependencies])
        return int(sum(got))

    a, b = await source.enqueue(2), await source.enqueue(3)
    child = await stepped.enqueue(None, after=[a, b])
    await app.worker(concurrency=2).run(burst=True)
    job = await app.get_job(child.id)
    assert job is not None and job.state == "done" and job.result == 5


async def test_a_parent_buried_after_its_lease_lapsed_cancels_its_dependent(pg_app: App) -> None:
    app = pg_app

    @app.job(name="work", tenant="none", retry=Retry(attempts=1))
    async def work(ctx: JobContext, payload: int) -> int:
        return payload

    parent = await work.enqueue(1)
    child = await work.enqueue(2, after=[parent])
    finished = await work.enqueue(3, after=[parent], when="finished")
    got = await app.driver.claim(worker_id="dead", wants={"default": 5}, names=["work"], visibility=0.2, sweep=False)
    assert [c.id for c in got.claimed] == [parent.id]
    await asyncio.sleep(0.35)
    driver = app.driver
    assert isinstance(driver, RescueRole)
    rescued = await driver.rescue_lapsed(RESCUE_BATCH)
    assert [b.id for b in rescued.buried] == [parent.id]
    job = await app.get_job(child.id)
    assert job is not None and job.state == "cancelled"
    assert job.last_error is not None and parent.id in job.last_error["message"] and "dead" in job.last_error["message"]
    assert await state_of(app, finished) == "ready"


async def test_a_claim_burying_a_lapsed_parent_releases_its_dependents(pg_app: App) -> None:
    app = pg_app

    @app.job(name="work", tenant="none", retry=Retry(attempts=1, dead_letter=False))
    async def work(ctx: JobContext, payload: int) -> int:
        return payload

    parent = await work.enqueue(1)
    child = await work.enqueue(2, after=[parent], when="finished")
    await app.driver.claim(worker_id="dead", wants={"default": 1}, names=["work"], visibility=0.2, sweep=False)
    await asyncio.sleep(0.35)
    result = await app.driver.claim(worker_id="w2", wants={"default": 5}, names=["work"], visibility=30)
    assert [b.id for b in result.buried] == [parent.id]
    assert [c.id for c in result.claimed] == []  # released by the statement, claimable from the next
    assert await state_of(app, parent) == "failed"
    assert await state_of(app, child) == "ready"


async def test_cancelling_a_parent_cancels_its_done_dependents_and_a_pending_job_can_be_cancelled(
    pg_app: App,
) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    parent = await step.enqueue(1)
    child = await step.enqueue(2, after=[parent])
    grandchild = await step.enqueue(3, after=[child], when="finished")
    cancelled = await app.admin.cancel(parent.id)
    assert cancelled.state == "cancelled"
    job = await app.get_job(child.id)
    assert job is not None and job.state == "cancelled" and "cancelled" in job.last_error["message"]  # type: ignore[index]
    assert await state_of(app, grandchild) == "ready"  # when='finished': a cancelled dependency counts

    other = await step.enqueue(4)
    waiting = await step.enqueue(5, after=[other])
    downstream = await step.enqueue(6, after=[waiting])
    assert (await app.admin.cancel(waiting.id)).state == "cancelled"
    assert await state_of(app, downstream) == "cancelled"
    await app.worker().run(burst=True)
    assert await state_of(app, other) == "done"


async def test_bulk_cancel_releases_dependents(pg_app: App) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    parents = await step.enqueue_many([1, 2])
    child = await step.enqueue(3, after=parents)
    after_child = await step.enqueue(4, after=[child])
    result = await app.admin.cancel_many(state="ready", limit=10)
    assert result.affected == 2
    assert await state_of(app, child) == "cancelled"
    assert await state_of(app, after_child) == "cancelled"
    result = await app.admin.cancel_many(state="pending", limit=10)
    assert result.affected == 0


async def test_retention_keeps_what_an_unfinished_dependent_reads(pg_app: App, database_url: str) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    read = await step.enqueue(1)
    lone = await step.enqueue(2)
    await app.worker().run(burst=True)
    child = await step.enqueue(3, after=[read])  # ready at once: its dependency is done
    app.retention = Retention(done=0, cancelled=0, failed=0, dead=0)
    await asyncio.sleep(0.01)
    report = await app.admin.purge()
    assert report.removed["done"] == 1
    assert await app.get_job(lone.id) is None
    assert await app.get_job(read.id) is not None  # a job not yet finished will read its result
    await app.worker().run(burst=True)
    assert await state_of(app, child) == "done"
    await asyncio.sleep(0.01)
    await app.admin.purge()
    assert await app.get_job(read.id) is None and await app.get_job(child.id) is None
    with psycopg.connect(database_url) as conn:
        edges = conn.execute(f"select count(*) from {app.schema}.job_deps").fetchone()  # type: ignore[arg-type]
    assert edges == (0,)  # a purged dependent's edges go with it


async def test_show_lists_the_edges_and_ls_filters_pending(pg_app: App, database_url: str) -> None:
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: int) -> int:
        return payload

    a, b = await step.enqueue(1), await step.enqueue(2)
    child = await step.enqueue(3, after=[b, a])
    runner = CliRunner()
    base = ["--database-url", database_url, "--schema", app.schema]
    shown = await asyncio.to_thread(runner.invoke, cli, [*base, "show", child.id, "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["state"] == "pending" and document["dependencies"] == [b.id, a.id]
    parent = json.loads((await asyncio.to_thread(runner.invoke, cli, [*base, "show", a.id, "--json"])).stdout)
    assert parent["dependencies"] == [] and parent["dependents"] == [child.id]
    person = await asyncio.to_thread(
        lambda: runner.invoke(cli, [*base, "show", child.id], env={"COLUMNS": "200"}, color=False)
    )
    assert "dependencies" in person.stdout and short_id(a.id) in person.stdout and "ready" in person.stdout
    listed = await asyncio.to_thread(runner.invoke, cli, [*base, "ls", "--state", "pending", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [child.id]


async def test_a_dependency_requeued_and_done_again_is_counted_once(pg_app: App) -> None:
    """A dependent waiting on two jobs: the first is done, requeued by an operator and done again
    while the second still runs. Its edge was counted when it first ended, so the dependent keeps
    waiting for the second (counting it twice released the dependent too early)."""
    app = pg_app
    ran: list[str] = []

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: str) -> str:
        ran.append(payload)
        return payload

    first = await step.enqueue("first")
    second = await step.enqueue("second", delay=3600)
    child = await step.enqueue("child", after=[first, second])
    await app.worker().run(burst=True)
    assert ran == ["first"] and await state_of(app, child) == "pending"
    late = await step.enqueue("late", after=[first, second])  # its edge to first counted at once
    await app.admin.requeue(first.id)
    await app.worker().run(burst=True)
    assert ran == ["first", "first"]
    assert await state_of(app, child) == "pending" and await state_of(app, late) == "pending"
    assert await state_of(app, second) == "delayed"


async def test_removing_a_live_dependency_releases_its_dependents_as_a_cancel_would(pg_app: App) -> None:
    """`workhorse rm` (one job, or --all) of a job others wait on: its when='done' dependents are
    cancelled naming it, its when='finished' ones count it as final, none stays pending forever."""
    app = pg_app

    @app.job(tenant="none")
    async def step(ctx: JobContext, payload: str) -> str:
        return payload

    gone = await step.enqueue("gone", delay=3600)
    needs = await step.enqueue("needs", after=[gone])
    after_all = await step.enqueue("after-all", after=[gone], when="finished")
    await app.admin.remove(gone.id)
    assert await state_of(app, needs) == "cancelled"
    job = await app.get_job(needs.id)
    assert job is not None and job.last_error is not None and gone.id in job.last_error["message"]
    assert await state_of(app, after_all) == "ready"

    batch = [await step.enqueue(f"b{i}", delay=3600, queue="doomed") for i in range(3)]
    waiting = await step.enqueue("waiting", after=batch)
    removed = await app.admin.remove_many(state="delayed", queue="doomed")
    assert removed.affected == 3
    assert await state_of(app, waiting) == "cancelled"
