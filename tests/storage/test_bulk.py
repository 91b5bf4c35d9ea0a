"""The bulk verbs (``app.admin.requeue_many/remove_many/promote_many/cancel_many``):
the ``{affected, remaining}`` contract, filters, dry runs, the key rules of requeue, and
every refusal (a refused call changes nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, Retry
from workhorse.types import BulkResult, Settlement


def declare(app: App):  # type: ignore[no-untyped-def]
    """``fragile`` dies at its first failure; ``{"fail": True}`` makes it fail."""

    @app.job(name="fragile", tenant=lambda p: p.get("org", "o1"), retry=Retry(attempts=1))
    async def fragile(ctx: JobContext, payload: dict[str, Any]) -> object:
        if payload.get("fail"):
            raise ValueError("fails")
        return payload.get("n")

    return fragile


def declare_two_queues(app: App):  # type: ignore[no-untyped-def]
    """``alpha`` on queue qa and ``beta`` on qb, both tenanted by the payload's ``org``."""

    @app.job(name="alpha", queue="qa", tenant=lambda p: p["org"])
    async def alpha(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    @app.job(name="beta", queue="qb", tenant=lambda p: p["org"])
    async def beta(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    return alpha, beta


async def rows(app: App) -> list[tuple[str, str, int, str]]:
    """Every row as (id, reported state, attempt, run_at): what a refused call must not change."""
    page = await app.admin.list(limit=200)
    assert page.next is None
    return [(j.id, j.state, j.attempt, j.run_at.isoformat()) for j in page.jobs]


async def states(app: App) -> dict[str, str]:
    return {job_id: state for job_id, state, _, _ in await rows(app)}


def pair(result: BulkResult) -> tuple[int, int]:
    return (result.affected, result.remaining)


async def make_dead(app: App, count: int, **options: Any) -> list[str]:
    """``count`` dead jobs, oldest first (each enqueued on its own, a little apart)."""
    fragile = declare(app) if "fragile" not in app.jobs else app.jobs["fragile"]
    made = []
    for i in range(count):
        made.append((await fragile.enqueue({"fail": True, "n": i}, **options)).id)
        await asyncio.sleep(0.002)
    await app.worker().run(burst=True)
    found = await states(app)
    assert [found[i] for i in made] == ["dead"] * count
    return made


# -- requeue ---------------------------------------------------------------------------------------


async def test_requeue_many_in_slices_until_zero(app: App) -> None:
    dead = await make_dead(app, 5)
    first = await app.admin.requeue_many(state="dead", limit=2)
    assert first == BulkResult(verb="requeue", affected=2, remaining=3, dry_run=False)
    found = await states(app)
    # Oldest first.
    assert [found[i] for i in dead] == ["ready", "ready", "dead", "dead", "dead"]
    assert pair(await app.admin.requeue_many(state="dead", limit=2)) == (2, 1)
    assert pair(await app.admin.requeue_many(state="dead", limit=2)) == (1, 0)
    assert pair(await app.admin.requeue_many(state="dead", limit=2)) == (0, 0)
    for job_id in dead:
        job = await app.admin.get(job_id)
        assert job is not None
        assert (job.state, job.attempt, job.result, job.finished_at, job.worker_id) == ("ready", 0, None, None, None)
        assert job.last_error is not None  # history kept
    await app.worker().run(burst=True)
    assert list((await states(app)).values()) == ["dead"] * 5  # they ran (and failed) again


async def test_requeue_many_call_until_zero_ends(app: App) -> None:
    await make_dead(app, 7)
    calls = []
    while True:
        result = await app.admin.requeue_many(state="dead", limit=3)
        calls.append(pair(result))
        if result.remaining == 0:
            break
        assert len(calls) < 10
    assert calls == [(3, 4), (3, 1), (1, 0)]
    assert list((await states(app)).values()) == ["ready"] * 7


async def test_requeue_many_dry_run_changes_nothing(app: App) -> None:
    await make_dead(app, 5)
    before = await rows(app)
    dry = await app.admin.requeue_many(state="dead", limit=2, dry_run=True)
    assert dry == BulkResult(verb="requeue", affected=2, remaining=3, dry_run=True)
    assert pair(await app.admin.requeue_many(state="dead", limit=1000, dry_run=True)) == (5, 0)
    assert pair(await app.admin.requeue_many(state="failed", dry_run=True)) == (0, 0)
    assert pair(await app.admin.requeue_many(state="done", dry_run=True)) == (0, 0)
    assert await rows(app) == before


async def test_requeue_many_skips_a_row_whose_key_a_live_job_holds(app: App) -> None:
    fragile = declare(app)
    keyed = (await fragile.enqueue({"fail": True}, key="held")).id
    await asyncio.sleep(0.002)
    other = (await fragile.enqueue({"fail": True, "org": "o2"}, key="held")).id  # another tenant's key
    await asyncio.sleep(0.002)
    plain = (await fragile.enqueue({"fail": True})).id
    await app.worker().run(burst=True)
    holder = (await fragile.enqueue({"n": 1}, key="held", delay="1h")).id
    assert (await states(app)) == {keyed: "dead", other: "dead", plain: "dead", holder: "delayed"}

    assert pair(await app.admin.requeue_many(state="dead", dry_run=True)) == (2, 0)
    assert pair(await app.admin.requeue_many(state="dead", limit=1)) == (1, 1)
    assert (await states(app)) == {keyed: "dead", other: "ready", plain: "dead", holder: "delayed"}
    assert pair(await app.admin.requeue_many(state="dead")) == (1, 0)
    assert (await states(app)) == {keyed: "dead", other: "ready", plain: "ready", holder: "delayed"}
    assert pair(await app.admin.requeue_many(state="dead")) == (0, 0)
    assert (await states(app))[keyed] == "dead"

    # Once the holder is gone, the row is movable again.
    await app.admin.cancel(holder)
    assert pair(await app.admin.requeue_many(state="dead", dry_run=True)) == (1, 0)
    assert pair(await app.admin.requeue_many(state="dead")) == (1, 0)
    assert (await states(app)) == {keyed: "ready", other: "ready", plain: "ready", holder: "cancelled"}
    # ... and now it holds the key: the cancelled holder is not movable.
    assert pair(await app.admin.requeue_many(state="cancelled", dry_run=True)) == (0, 0)
    assert pair(await app.admin.requeue_many(state="cancelled")) == (0, 0)
    assert (await states(app))[holder] == "cancelled"


async def test_requeue_many_of_rows_sharing_a_key_takes_only_the_oldest(app: App) -> None:
    fragile = declare(app)
    older = (await fragile.enqueue({"fail": True}, key="dup")).id
    await app.worker().run(burst=True)
    newer = (await fragile.enqueue({"fail": True}, key="dup")).id
    await asyncio.sleep(0.002)
    plain = (await fragile.enqueue({"fail": True})).id
    await app.worker().run(burst=True)
    assert (await states(app)) == {older: "dead", newer: "dead", plain: "dead"}

    assert pair(await app.admin.requeue_many(state="dead", dry_run=True)) == (2, 0)
    assert pair(await app.admin.requeue_many(state="dead", limit=1)) == (1, 1)
    assert (await states(app)) == {older: "ready", newer: "dead", plain: "dead"}
    # The newer row is now held by the older one, live again: not counted.
    assert pair(await app.admin.requeue_many(state="dead", limit=1)) == (1, 0)
    assert (await states(app)) == {older: "ready", newer: "dead", plain: "ready"}
    assert pair(await app.admin.requeue_many(state="dead")) == (0, 0)

    # In one call with room for all: still only the oldest of the key.
    await app.worker().run(burst=True)
    assert (await states(app)) == {older: "dead", newer: "dead", plain: "dead"}
    assert pair(await app.admin.requeue_many(state="dead")) == (2, 0)
    assert (await states(app)) == {older: "ready", newer: "dead", plain: "ready"}


async def test_requeue_many_key_held_without_a_tenant(app: App) -> None:
    @app.job(name="solo", tenant="none", retry=Retry(attempts=1))
    async def solo(ctx: JobContext, payload: dict[str, Any]) -> None:
        if payload.get("fail"):
            raise ValueError("fails")

    first = (await solo.enqueue({"fail": True}, key="k")).id
    await app.worker().run(burst=True)
    second = (await solo.enqueue({"fail": True}, key="k")).id
    await app.worker().run(burst=True)
    holder = (await solo.enqueue({}, key="k", delay="1h")).id
    assert (await states(app)) == {first: "dead", second: "dead", holder: "delayed"}
    assert pair(await app.admin.requeue_many(state="dead", dry_run=True)) == (0, 0)
    assert pair(await app.admin.requeue_many(state="dead")) == (0, 0)
    await app.admin.cancel(holder)
    # Three finished rows share the key now: only the oldest moves, and nothing remains.
    assert pair(await app.admin.requeue_many(state="dead", dry_run=True)) == (1, 0)
    assert pair(await app.admin.requeue_many(state="cancelled", dry_run=True)) == (1, 0)
    assert pair(await app.admin.requeue_many(state="cancelled")) == (1, 0)
    assert (await states(app)) == {first: "dead", second: "dead", holder: "ready"}
    assert pair(await app.admin.requeue_many(state="dead")) == (0, 0)


async def test_requeue_many_filters_queue_name_and_tenant(app: App) -> None:
    @app.job(name="alpha", queue="qa", tenant=lambda p: p["org"], retry=Retry(attempts=1))
    async def alpha(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ValueError("no")

    @app.job(name="beta", queue="qb", tenant=lambda p: p["org"], retry=Retry(attempts=1))
    async def beta(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ValueError("no")

    @app.job(name="gamma", queue="qa", tenant=lambda p: p["org"], retry=Retry(attempts=1))
    async def gamma(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ValueError("no")

    for org in ("o1", "o1", "o2"):
        await alpha.enqueue({"org": org})
        await beta.enqueue({"org": org})
        await gamma.enqueue({"org": org})
    await app.worker().run(burst=True)
    assert list((await states(app)).values()) == ["dead"] * 9

    assert pair(await app.admin.requeue_many(state="dead", queue="qa", dry_run=True)) == (6, 0)
    assert pair(await app.admin.requeue_many(state="dead", name="alpha", dry_run=True)) == (3, 0)
    assert pair(await app.admin.requeue_many(state="dead", tenant="o2", dry_run=True)) == (3, 0)
    assert pair(await app.admin.requeue_many(state="dead", queue="qb", name="alpha", dry_run=True)) == (0, 0)
    assert pair(await app.admin.requeue_many(state="dead", queue="qa", name="gamma", tenant="o1")) == (2, 0)
    ready = (await app.admin.list(state="ready")).jobs
    assert sorted((j.name, j.tenant) for j in ready) == [("gamma", "o1"), ("gamma", "o1")]
    assert pair(await app.admin.requeue_many(state="dead", tenant="o1", limit=1)) == (1, 3)
    assert pair(await app.admin.requeue_many(state="dead", queue="nowhere")) == (0, 0)
    assert pair(await app.admin.requeue_many(state="dead", tenant="nobody")) == (0, 0)


async def test_requeue_many_takes_each_finished_state(app: App) -> None:
    @app.job(name="mixed", tenant="none", retry=Retry(attempts=1, dead_letter=False))
    async def mixed(ctx: JobContext, payload: str) -> str:
        if payload == "fail":
            raise ValueError("no")
        return payload

    failed = (await mixed.enqueue("fail")).id
    done = (await mixed.enqueue("ok")).id
    cancelled = (await mixed.enqueue("ok", delay="1h")).id
    await app.admin.cancel(cancelled)
    await app.worker().run(burst=True)
    assert (await states(app)) == {failed: "failed", done: "done", cancelled: "cancelled"}
    for state, job_id in (("failed", failed), ("done", done), ("cancelled", cancelled)):
        assert pair(await app.admin.requeue_many(state=state)) == (1, 0), state
        assert (await states(app))[job_id] == "ready"
    done_job = await app.admin.get(done)
    assert done_job is not None and done_job.result is None


# -- remove ----------------------------------------------------------------------------------------


async def test_remove_many_in_slices_and_never_running_rows(app: App) -> None:
    dead = await make_dead(app, 5)
    fragile = app.jobs["fragile"]
    waiting = [(await fragile.enqueue({"n": i})).id for i in range(3)]
    claimed = await app.driver.claim(worker_id="w", wants={"default": 1}, names=["fragile"], visibility=30)
    running = claimed.claimed[0].id
    assert running == waiting[0]

    assert pair(await app.admin.remove_many(state="dead", limit=2)) == (2, 3)
    found = await states(app)
    assert dead[0] not in found and dead[1] not in found and dead[2] in found
    assert await app.admin.get(dead[0]) is None
    assert pair(await app.admin.remove_many(state="dead", limit=2)) == (2, 1)
    assert pair(await app.admin.remove_many(state="dead", limit=2)) == (1, 0)
    assert pair(await app.admin.remove_many(state="dead", limit=2)) == (0, 0)

    assert pair(await app.admin.remove_many(state="ready")) == (2, 0)
    assert (await states(app)) == {running: "running"}
    assert await app.driver.settle([Settlement(running, "w", claimed.claimed[0].claims, "done", result="1")]) == [True]
    assert pair(await app.admin.remove_many(state="done", dry_run=True)) == (1, 0)
    assert (await states(app)) == {running: "done"}
    assert pair(await app.admin.remove_many(state="done")) == (1, 0)
    assert await states(app) == {}


async def test_remove_many_refuses_running_and_changes_nothing(app: App) -> None:
    fragile = declare(app)
    for i in range(3):
        await fragile.enqueue({"n": i})
    await app.driver.claim(worker_id="w", wants={"default": 2}, names=["fragile"], visibility=30)
    before = await rows(app)
    assert sorted(s for _, s, _, _ in before) == ["ready", "running", "running"]
    with pytest.raises(ConfigurationError) as refused:
        await app.admin.remove_many(state="running")
    assert refused.value.code == "BULK_STATE_INVALID"
    with pytest.raises(ConfigurationError):
        await app.admin.remove_many(state="running", dry_run=True)
    assert await rows(app) == before


async def test_remove_many_state_is_the_reported_state(app: App) -> None:
    fragile = declare(app)
    due = (await fragile.enqueue({"n": 1}, delay="150ms")).id
    later = (await fragile.enqueue({"n": 2}, delay="1h")).id
    await asyncio.sleep(0.3)
    assert pair(await app.admin.remove_many(state="delayed", dry_run=True)) == (1, 0)
    assert pair(await app.admin.remove_many(state="ready")) == (1, 0)
    assert (await states(app)) == {later: "delayed"}
    assert await app.admin.get(due) is None


# -- promote ---------------------------------------------------------------------------------------


async def test_promote_many_moves_waiting_rows_and_a_worker_runs_them(app: App) -> None:
    fragile = declare(app)
    delayed = []
    for i in range(3):
        delayed.append((await fragile.enqueue({"n": i}, delay="1h")).id)
        await asyncio.sleep(0.002)
    ready = [(await fragile.enqueue({"n": 10 + i})).id for i in range(2)]
    assert pair(await app.admin.promote_many(dry_run=True)) == (3, 0)
    assert pair(await app.admin.promote_many(state="ready")) == (0, 0)  # ready rows are due already

    assert pair(await app.admin.promote_many(limit=2)) == (2, 1)
    found = await states(app)
    assert [found[i] for i in delayed] == ["ready", "ready", "delayed"]  # oldest first
    promoted = await app.admin.get(delayed[0])
    assert promoted is not None and promoted.created_at <= promoted.run_at <= promoted.updated_at
    assert pair(await app.admin.promote_many(state="delayed")) == (1, 0)
    assert pair(await app.admin.promote_many()) == (0, 0)
    assert (await app.admin.list(state="delayed")).jobs == []

    stats = await app.worker().run(burst=True)
    assert stats.completed == 5
    assert set((await states(app)).values()) == {"done"}
    for job_id in delayed + ready:
        job = await app.admin.get(job_id)
        assert job is not None and job.state == "done"


async def test_promote_many_takes_a_backing_off_retry_and_nothing_finished(app: App) -> None:
    @app.job(name="later", tenant="none", retry=Retry(attempts=2, base="1h", jitter=False))
    async def later(ctx: JobContext, payload: None) -> str:
        if ctx.attempt == 1:
            raise ValueError("first time")
        return "second time"

    waiting = (await later.enqueue(None)).id
    await app.worker().run(burst=True)
    job = await app.admin.get(waiting)
    assert job is not None and (job.state, job.attempt) == ("delayed", 1)
    finished = (await later.enqueue(None, delay="1h")).id
    await app.admin.cancel(finished)
    assert pair(await app.admin.promote_many(state="delayed")) == (1, 0)
    await app.worker().run(burst=True)
    job = await app.admin.get(waiting)
    assert job is not None and (job.state, job.attempt, job.result) == ("done", 2, "second time")
    assert (await states(app))[finished] == "cancelled"


async def test_promote_many_filters(app: App) -> None:
    alpha, beta = declare_two_queues(app)
    for org in ("o1", "o2"):
        await alpha.enqueue({"org": org}, delay="1h")
        await beta.enqueue({"org": org}, delay="1h")
    assert pair(await app.admin.promote_many(queue="qa", dry_run=True)) == (2, 0)
    assert pair(await app.admin.promote_many(name="beta", tenant="o2")) == (1, 0)
    assert pair(await app.admin.promote_many(tenant="o2")) == (1, 0)
    ready = (await app.admin.list(state="ready")).jobs
    assert sorted((j.name, j.tenant) for j in ready) == [("alpha", "o2"), ("beta", "o2")]
    assert pair(await app.admin.promote_many(queue="qb")) == (1, 0)
    assert pair(await app.admin.promote_many()) == (1, 0)
    assert pair(await app.admin.promote_many()) == (0, 0)


# -- cancel ----------------------------------------------------------------------------------------


async def test_cancel_many_ends_ready_and_delayed_rows_cancelled(app: App) -> None:
    fragile = declare(app)
    ready = []
    for i in range(3):
        ready.append((await fragile.enqueue({"n": i})).id)
        await asyncio.sleep(0.002)
    delayed = [(await fragile.enqueue({"n": 10 + i}, delay="1h")).id for i in range(2)]

    assert pair(await app.admin.cancel_many(state="ready", dry_run=True)) == (3, 0)
    assert pair(await app.admin.cancel_many(state="ready", limit=2)) == (2, 1)
    found = await states(app)
    assert [found[i] for i in ready] == ["cancelled", "cancelled", "ready"]
    assert pair(await app.admin.cancel_many(state="ready", limit=2)) == (1, 0)
    assert pair(await app.admin.cancel_many(state="delayed")) == (2, 0)
    assert pair(await app.admin.cancel_many(state="delayed")) == (0, 0)
    for job_id in ready + delayed:
        job = await app.admin.get(job_id)
        assert job is not None and job.state == "cancelled" and job.finished_at is not None
    stats = await app.worker().run(burst=True)
    assert stats.claimed == 0


async def test_cancel_many_state_is_the_reported_state(app: App) -> None:
    fragile = declare(app)
    due = (await fragile.enqueue({"n": 1}, delay="150ms")).id
    later = (await fragile.enqueue({"n": 2}, delay="1h")).id
    await asyncio.sleep(0.3)
    assert pair(await app.admin.cancel_many(state="delayed", dry_run=True)) == (1, 0)
    assert pair(await app.admin.cancel_many(state="ready")) == (1, 0)
    assert (await states(app)) == {due: "cancelled", later: "delayed"}
    # A due delayed row is reported ready, and a ready row is due already: nothing to promote.
    assert pair(await app.admin.promote_many(state="delayed")) == (1, 0)
    assert pair(await app.admin.promote_many(state="ready")) == (0, 0)


async def test_cancel_many_of_running_rows_takes_the_claim_away(app: App) -> None:
    fragile = declare(app)
    refs = [(await fragile.enqueue({"n": i})).id for i in range(3)]
    claimed = await app.driver.claim(worker_id="w", wants={"default": 2}, names=["fragile"], visibility=30)
    assert len(claimed.claimed) == 2
    assert pair(await app.admin.cancel_many(state="running", dry_run=True)) == (2, 0)
    assert pair(await app.admin.cancel_many(state="running")) == (2, 0)
    landed = await app.driver.settle(
        [Settlement(c.id, "w", c.claims, "done", result='"late"') for c in claimed.claimed]
    )
    assert landed == [False, False]
    found = await states(app)
    assert sorted(found.values()) == ["cancelled", "cancelled", "ready"]
    for c in claimed.claimed:
        job = await app.admin.get(c.id)
        assert job is not None and (job.state, job.result, job.worker_id) == ("cancelled", None, None)
    assert set(refs) == set(found)


async def test_cancel_many_filters(app: App) -> None:
    alpha, beta = declare_two_queues(app)
    for org in ("o1", "o2", "o2"):
        await alpha.enqueue({"org": org})
        await beta.enqueue({"org": org})
    assert pair(await app.admin.cancel_many(state="ready", queue="qb", dry_run=True)) == (3, 0)
    assert pair(await app.admin.cancel_many(state="ready", tenant="o2", limit=3)) == (3, 1)
    assert pair(await app.admin.cancel_many(state="ready", name="alpha")) == (1, 0)
    left = (await app.admin.list(state="ready")).jobs
    assert [(j.name, j.tenant) for j in left] == [("beta", "o2"), ("beta", "o1")]
    assert pair(await app.admin.cancel_many(state="ready", queue="qa")) == (0, 0)
    assert pair(await app.admin.cancel_many(state="ready", queue="qb")) == (2, 0)
    assert (await app.admin.list(state="ready")).jobs == []
    assert [j.state for j in (await app.admin.list()).jobs] == ["cancelled"] * 6


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "state"),
    [
        ("requeue_many", "ready"),
        ("requeue_many", "running"),
        ("promote_many", "dead"),
        ("promote_many", "suspended"),
        ("cancel_many", "done"),
        ("cancel_many", "dead"),
        ("remove_many", "running"),
    ],
)
async def test_bulk_refuses_a_state_the_verb_cannot_take(app: App, verb: str, state: str) -> None:
    await make_dead(app, 2)
    fragile = app.jobs["fragile"]
    await fragile.enqueue({"n": 1})
    await fragile.enqueue({"n": 2}, delay="1h")
    before = await rows(app)
    with pytest.raises(ConfigurationError) as refused:
        await getattr(app.admin, verb)(state=state)
    assert refused.value.code == "BULK_STATE_INVALID"
    assert repr(state) in refused.value.cause
    assert await rows(app) == before


@pytest.mark.parametrize("verb", ["requeue_many", "remove_many", "promote_many", "cancel_many"])
async def test_bulk_refuses_an_unknown_state(app: App, verb: str) -> None:
    await make_dead(app, 1)
    before = await rows(app)
    for state in ("stuck", "", None, "DEAD"):
        with pytest.raises(ConfigurationError) as refused:
            await getattr(app.admin, verb)(state=state)
        assert refused.value.code == "STATE_UNKNOWN", state
    assert await rows(app) == before


@pytest.mark.parametrize("limit", [0, 1001, True, -1, 2.0, "5", None])
@pytest.mark.parametrize(
    ("verb", "state"),
    [("requeue_many", "dead"), ("remove_many", "dead"), ("promote_many", "delayed"), ("cancel_many", "delayed")],
)
async def test_bulk_refuses_a_bad_limit(app: App, verb: str, state: str, limit: Any) -> None:
    await make_dead(app, 1)
    await app.jobs["fragile"].enqueue({"n": 1}, delay="1h")
    before = await rows(app)
    with pytest.raises(ConfigurationError) as refused:
        await getattr(app.admin, verb)(state=state, limit=limit)
    assert refused.value.code == "BULK_LIMIT_INVALID"
    assert await rows(app) == before


async def test_bulk_limit_bounds_taken(app: App) -> None:
    await make_dead(app, 3)
    assert pair(await app.admin.remove_many(state="dead", limit=1)) == (1, 2)
    assert pair(await app.admin.remove_many(state="dead", limit=1000)) == (2, 0)


# -- suspended rows --------------------------------------------------------------------------------


async def test_bulk_verbs_on_suspended_rows(app: App) -> None:
    @app.job(name="napper", queue="nq", tenant="none")
    async def napper(ctx: JobContext, payload: str) -> str:
        await ctx.step.run("before", lambda: "b")
        await ctx.step.sleep("nap", payload)
        return "woke"

    long = []
    for _ in range(3):
        long.append((await napper.enqueue("1h")).id)
        await asyncio.sleep(0.002)
    short = (await napper.enqueue("200ms")).id
    await app.worker().run(burst=True)
    assert (await states(app)) == {**dict.fromkeys(long, "suspended"), short: "suspended"}
    await asyncio.sleep(0.4)
    assert (await states(app)) == {**dict.fromkeys(long, "suspended"), short: "ready"}  # due: reported ready

    # Suspension counts nothing.
    snap = await app.admin.snapshot()
    assert snap.counters == []
    assert [(s.state, s.count) for s in snap.states] == [("ready", 1), ("suspended", 3)]

    with pytest.raises(ConfigurationError) as refused:
        await app.admin.requeue_many(state="suspended")
    assert refused.value.code == "BULK_STATE_INVALID"
    with pytest.raises(ConfigurationError):
        await app.admin.promote_many(state="suspended")
    assert pair(await app.admin.promote_many(state="ready")) == (0, 0)  # stored suspended: not promoted
    assert pair(await app.admin.cancel_many(state="suspended", dry_run=True)) == (3, 0)
    assert pair(await app.admin.cancel_many(state="suspended", limit=1)) == (1, 2)
    assert pair(await app.admin.remove_many(state="suspended", limit=1)) == (1, 1)
    assert await app.admin.get(long[1]) is None  # its steps went with it
    assert await app.driver.list_steps(long[1]) == []
    assert pair(await app.admin.cancel_many(state="ready")) == (1, 0)
    assert (await states(app)) == {long[0]: "cancelled", long[2]: "suspended", short: "cancelled"}
    # A cancelled napper requeued replays its recorded steps (they stay).
    assert pair(await app.admin.requeue_many(state="cancelled", limit=1)) == (1, 1)
    job = await app.admin.get(long[0])
    assert job is not None and job.state == "ready"
    assert [s["name"] for s in job.steps] == ["before", "nap"]
