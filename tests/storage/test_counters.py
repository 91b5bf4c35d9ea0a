"""The counters the settle and claim statements move, and what ``app.admin.stats/snapshot/rollup``
make of them: exact per-name and per-queue numbers after a known mix of outcomes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from workhorse import App, ConfigurationError, JobContext, Retry, TerminalError
from workhorse.admin import Stats, StatsRow
from workhorse.types import CounterSum, Settlement, WorkerInfo

WINDOW = 3600.0


def declare_mix(app: App) -> dict[str, Any]:
    """Five jobs on queue 'mix' whose outcomes are known in advance, and one on 'idle'."""

    @app.job(name="ok", queue="mix", tenant="none")
    async def ok(ctx: JobContext, payload: int) -> int:
        return payload

    @app.job(name="flaky", queue="mix", tenant="none", retry=Retry(attempts=3, base=0))
    async def flaky(ctx: JobContext, payload: None) -> str:
        if ctx.attempt == 1:
            raise ValueError("first try fails")
        return "fine"

    @app.job(name="doomed", queue="mix", tenant="none", retry=Retry(attempts=2, base=0))
    async def doomed(ctx: JobContext, payload: None) -> None:
        raise ValueError(f"doomed {ctx.attempt}")

    @app.job(name="terminal", queue="mix", tenant="none", retry=Retry(attempts=5, base=0))
    async def terminal(ctx: JobContext, payload: None) -> None:
        raise TerminalError("no point retrying")

    @app.job(name="nodl", queue="mix", tenant="none", retry=Retry(attempts=3, base=0, dead_letter=False))
    async def nodl(ctx: JobContext, payload: None) -> None:
        raise TerminalError("dropped")

    @app.job(name="waiting", queue="idle", tenant="none")
    async def waiting(ctx: JobContext, payload: int) -> int:
        return payload

    return {"ok": ok, "flaky": flaky, "doomed": doomed, "terminal": terminal, "nodl": nodl, "waiting": waiting}


async def drain_mix(app: App) -> dict[str, Any]:
    jobs = declare_mix(app)
    for i in range(3):
        await jobs["ok"].enqueue(i)
    for name in ("flaky", "doomed", "terminal", "nodl"):
        await jobs[name].enqueue(None)
    stats = await app.worker(queues=["mix"]).run(burst=True)
    assert (stats.completed, stats.retried, stats.dead) == (4, 2, 2)
    return jobs


EXPECTED_COUNTERS = [  # ordered by (queue, name)
    CounterSum("mix", "doomed", completed=0, retried=1, failed=0, dead=1, lapsed=0),
    CounterSum("mix", "flaky", completed=1, retried=1, failed=0, dead=0, lapsed=0),
    CounterSum("mix", "nodl", completed=0, retried=0, failed=1, dead=0, lapsed=0),
    CounterSum("mix", "ok", completed=3, retried=0, failed=0, dead=0, lapsed=0),
    CounterSum("mix", "terminal", completed=0, retried=0, failed=0, dead=1, lapsed=0),
]


def by_name(stats: Stats) -> dict[tuple[str, str | None], StatsRow]:
    return {(r.queue, r.name): r for r in stats.queues + stats.names}


def settled_numbers(row: StatsRow) -> tuple[int, int, int, int]:
    return (row.completed, row.retried, row.failures, row.lapsed)


def state_numbers(row: StatsRow) -> tuple[int, int, int, int, int, int]:
    return (row.ready, row.delayed, row.running, row.suspended, row.dead, row.failed)


async def test_stats_after_a_known_mix_are_exact(app: App) -> None:
    await drain_mix(app)
    stats = await app.admin.stats("1h")
    assert stats.window == WINDOW
    rows = by_name(stats)
    assert [(r.queue, r.name) for r in stats.names] == [
        ("mix", "doomed"),
        ("mix", "flaky"),
        ("mix", "nodl"),
        ("mix", "ok"),
        ("mix", "terminal"),
    ]
    assert [r.queue for r in stats.queues] == ["mix"]

    expected = {
        "ok": ((3, 0, 0, 0), (0, 0, 0, 0, 0, 0), 0.0),
        "flaky": ((1, 1, 0, 0), (0, 0, 0, 0, 0, 0), 0.5),
        "doomed": ((0, 1, 1, 0), (0, 0, 0, 0, 1, 0), 1.0),
        "terminal": ((0, 0, 1, 0), (0, 0, 0, 0, 1, 0), 1.0),
        "nodl": ((0, 0, 1, 0), (0, 0, 0, 0, 0, 1), 1.0),
    }
    for name, (settled, counted, rate) in expected.items():
        row = rows[("mix", name)]
        assert settled_numbers(row) == settled, name
        assert state_numbers(row) == counted, name
        assert row.failure_rate == rate, name
        assert row.throughput == settled[0] * 60 / WINDOW, name
        assert row.oldest_ready_age is None and row.paused is False, name

    queue = rows[("mix", None)]
    assert settled_numbers(queue) == (4, 2, 3, 0)
    assert state_numbers(queue) == (0, 0, 0, 0, 2, 1)
    assert queue.failure_rate == 5 / 9
    assert queue.throughput == 4 * 60 / WINDOW
    assert queue.oldest_ready_age is None
    # The queue row is the sum of its names.
    names = [r for r in stats.names if r.queue == "mix"]
    assert queue.completed == sum(r.completed for r in names)
    assert queue.retried == sum(r.retried for r in names)
    assert queue.failures == sum(r.failures for r in names)
    assert queue.dead == sum(r.dead for r in names) and queue.failed == sum(r.failed for r in names)

    as_json = stats.to_dict()
    assert as_json["window_seconds"] == WINDOW
    assert as_json["queues"][0]["throughput_per_minute"] == round(4 * 60 / WINDOW, 3)
    assert as_json["queues"][0]["failure_rate"] == round(5 / 9, 4)
    assert json.loads(json.dumps(as_json)) == as_json


async def test_snapshot_counters_are_exact_and_the_same_for_all_time(app: App) -> None:
    await drain_mix(app)
    recent = await app.admin.snapshot("1h")
    ever = await app.admin.snapshot(None)
    assert recent.counters == EXPECTED_COUNTERS
    assert ever.counters == EXPECTED_COUNTERS
    assert [(s.queue, s.name, s.state, s.count) for s in ever.states] == [
        ("mix", "doomed", "dead", 1),
        ("mix", "nodl", "failed", 1),
        ("mix", "terminal", "dead", 1),
    ]
    assert ever.paused == [] and ever.workers == 0
    assert ever.now.utcoffset() is not None


async def test_states_cover_live_dead_and_failed_never_done_or_cancelled(app: App) -> None:
    jobs = declare_mix(app)
    waiting = jobs["waiting"]
    await waiting.enqueue(1)
    await waiting.enqueue(2)
    await waiting.enqueue(3, delay="1h")
    gone = await waiting.enqueue(4, delay="1h")
    await app.admin.cancel(gone.id)
    due = await waiting.enqueue(5, delay="100ms")
    await jobs["ok"].enqueue(1)
    await app.worker(queues=["mix"]).run(burst=True)  # ok: done
    held = await app.driver.claim(worker_id="w", wants={"idle": 1}, names=["waiting"], visibility=30)
    assert len(held.claimed) == 1
    await asyncio.sleep(0.2)  # `due` is due now: reported ready
    snap = await app.admin.snapshot()
    assert [(s.queue, s.name, s.state, s.count) for s in snap.states] == [
        ("idle", "waiting", "delayed", 1),
        ("idle", "waiting", "ready", 2),
        ("idle", "waiting", "running", 1),
    ]
    ready = next(s for s in snap.states if s.state == "ready")
    reported_ready = (await app.admin.list(state="ready")).jobs
    assert due.id in {j.id for j in reported_ready} and len(reported_ready) == 2
    assert ready.oldest_run_at is not None
    assert ready.oldest_run_at == min(j.run_at for j in reported_ready)
    assert snap.counters == [CounterSum("mix", "ok", completed=1)]

    stats = await app.admin.stats()
    rows = by_name(stats)
    idle = rows[("idle", None)]
    assert state_numbers(idle) == (2, 1, 1, 0, 0, 0)
    assert idle.oldest_ready_age is not None and idle.oldest_ready_age >= 0
    assert idle.oldest_ready_age == pytest.approx((snap.now - ready.oldest_run_at).total_seconds(), abs=5)
    assert (idle.completed, idle.failure_rate, idle.throughput) == (0, None, 0.0)
    mix = rows[("mix", None)]
    assert state_numbers(mix) == (0, 0, 0, 0, 0, 0)
    assert mix.oldest_ready_age is None
    assert (mix.completed, mix.failure_rate) == (1, 0.0)


async def test_snapshot_lists_are_in_code_point_order_whatever_the_collation(app: App) -> None:
    handles = []
    for queue, name in (("aq", "b-job"), ("aq", "B_job"), ("Zq", "x"), ("_q", "a")):

        @app.job(name=name, queue=queue, tenant="none")
        async def body(ctx: JobContext, payload: int) -> int:
            return payload

        handles.append(body)
    for handle in handles:
        await handle.enqueue(1)
    await app.worker().run(burst=True)
    for handle in handles:
        await handle.enqueue(2)
    snap = await app.admin.snapshot()
    expected = sorted([("aq", "b-job"), ("aq", "B_job"), ("Zq", "x"), ("_q", "a")])
    assert [(c.queue, c.name) for c in snap.counters] == expected
    assert [(c.queue, c.name, c.completed) for c in snap.counters] == [(q, n, 1) for q, n in expected]
    assert [(s.queue, s.name, s.state) for s in snap.states] == [(q, n, "ready") for q, n in expected]


async def test_an_interrupted_hand_back_counts_nothing(app: App) -> None:
    jobs = await drain_mix(app)
    ref = await jobs["waiting"].enqueue(1)
    held = await app.driver.claim(worker_id="w", wants={"idle": 1}, names=["waiting"], visibility=30)
    claim = held.claimed[0]
    assert (claim.id, claim.attempt) == (ref.id, 1)
    assert await app.driver.settle([Settlement(ref.id, "w", claim.claims, "interrupted")]) == [True]
    job = await app.admin.get(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert (await app.admin.snapshot()).counters == EXPECTED_COUNTERS
    rows = by_name(await app.admin.stats())
    assert settled_numbers(rows[("idle", None)]) == (0, 0, 0, 0)
    assert rows[("idle", None)].ready == 1

    # A settle that does not land (a stale claim) counts nothing either.
    again = await app.driver.claim(worker_id="w", wants={"idle": 1}, names=["waiting"], visibility=30)
    stale = again.claimed[0].claims - 1
    assert await app.driver.settle([Settlement(ref.id, "w", stale, "done", result="1")]) == [False]
    assert (await app.admin.snapshot()).counters == EXPECTED_COUNTERS
    # The one that lands counts once.
    assert await app.driver.settle([Settlement(ref.id, "w", again.claimed[0].claims, "done", result="1")]) == [True]
    assert await app.driver.settle([Settlement(ref.id, "w", again.claimed[0].claims, "done", result="1")]) == [False]
    assert (await app.admin.snapshot()).counters == [  # ordered by (queue, name)
        CounterSum("idle", "waiting", completed=1),
        *EXPECTED_COUNTERS,
    ]


async def test_a_drain_cut_off_counts_nothing(app: App) -> None:
    started = asyncio.Event()

    @app.job(name="slow", queue="cut", tenant="none")
    async def slow(ctx: JobContext, payload: None) -> None:
        started.set()
        await asyncio.sleep(30)

    ref = await slow.enqueue(None)
    worker = app.worker(queues=["cut"], drain_timeout="50ms")
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await worker.stop(cut_off=True)
    await asyncio.wait_for(running, 10)
    job = await app.admin.get(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert (await app.admin.snapshot()).counters == []
    row = by_name(await app.admin.stats())[("cut", None)]
    assert (settled_numbers(row), row.ready, row.failure_rate) == ((0, 0, 0, 0), 1, None)


async def test_operator_verbs_and_cancel_count_nothing(app: App) -> None:
    jobs = await drain_mix(app)
    waiting = jobs["waiting"]
    a = await waiting.enqueue(1, delay="1h")
    b = await waiting.enqueue(2)
    await app.admin.promote(a.id)
    await app.admin.cancel(b.id)
    await app.admin.requeue(b.id)
    await app.admin.requeue_many(state="dead")
    await app.admin.cancel_many(state="ready")
    await app.admin.remove_many(state="cancelled")
    assert (await app.admin.snapshot()).counters == EXPECTED_COUNTERS


async def test_a_lapsed_lease_taken_back_counts_lapsed_then_dead_when_buried(app: App) -> None:
    @app.job(name="lost", queue="lq", tenant="none", retry=Retry(attempts=2, base=0))
    async def lost(ctx: JobContext, payload: None) -> None:
        return None

    @app.job(name="dropped", queue="lq", tenant="none", retry=Retry(attempts=1, dead_letter=False))
    async def dropped(ctx: JobContext, payload: None) -> None:
        return None

    ref = await lost.enqueue(None)
    other = await dropped.enqueue(None)
    first = await app.driver.claim(worker_id="gone", wants={"lq": 2}, names=["lost", "dropped"], visibility=0.1)
    assert sorted(c.id for c in first.claimed) == sorted([ref.id, other.id])
    await asyncio.sleep(0.4)
    second = await app.driver.claim(worker_id="gone2", wants={"lq": 2}, names=["lost", "dropped"], visibility=0.1)
    assert [(c.id, c.attempt) for c in second.claimed] == [(ref.id, 2)]
    assert [(b.id, b.state) for b in second.buried] == [(other.id, "failed")]
    assert (await app.admin.snapshot()).counters == [
        CounterSum("lq", "dropped", failed=1),
        CounterSum("lq", "lost", lapsed=1),
    ]
    await asyncio.sleep(0.4)
    third = await app.driver.claim(worker_id="w", wants={"lq": 2}, names=["lost", "dropped"], visibility=30)
    assert third.claimed == [] and [(b.id, b.state) for b in third.buried] == [(ref.id, "dead")]
    assert (await app.admin.snapshot()).counters == [
        CounterSum("lq", "dropped", failed=1),
        CounterSum("lq", "lost", dead=1, lapsed=1),
    ]
    row = by_name(await app.admin.stats())[("lq", None)]
    assert settled_numbers(row) == (0, 0, 2, 1)
    assert (row.dead, row.failed, row.failure_rate) == (1, 1, 1.0)


async def test_rollup_answers_an_int_and_changes_no_total(app: App) -> None:
    await drain_mix(app)
    before = await app.admin.stats()
    folded = await app.admin.rollup()
    assert isinstance(folded, int) and not isinstance(folded, bool)
    assert folded == 0  # nothing is two hours old yet
    assert await app.admin.rollup() == 0
    after = await app.admin.stats()
    assert (after.queues, after.names) == (before.queues, before.names)
    assert (await app.admin.snapshot(None)).counters == EXPECTED_COUNTERS


async def test_stats_count_live_workers(app: App) -> None:
    assert (await app.admin.stats()).workers == 0
    info = WorkerInfo(id="w-stats", host="h", pid=1, queues=["mix"], concurrency={"mix": 1})
    await app.driver.register_worker(info, ttl=30)
    assert (await app.admin.stats()).workers == 1
    assert (await app.admin.snapshot()).workers == 1
    await app.driver.deregister_worker("w-stats")
    assert (await app.admin.stats()).workers == 0


async def test_stats_of_an_empty_queue_store(app: App) -> None:
    stats = await app.admin.stats("15m")
    assert (stats.queues, stats.names, stats.paused, stats.workers, stats.window) == ([], [], [], 0, 900.0)
    snap = await app.admin.snapshot()
    assert (snap.states, snap.counters, snap.paused, snap.workers) == ([], [], [], 0)


@pytest.mark.parametrize("since", [0, "0s", -5, "soon", True])
async def test_stats_refuse_a_bad_window(app: App, since: Any) -> None:
    with pytest.raises(ConfigurationError):
        await app.admin.stats(since)
    with pytest.raises(ConfigurationError):
        await app.admin.snapshot(since)


async def test_counters_are_exact_under_concurrent_workers_and_batched_settles(app: App) -> None:
    handles = []
    for queue in ("c1", "c2"):
        for name in ("fast", "twice"):

            @app.job(name=f"{queue}-{name}", queue=queue, tenant="none", retry=Retry(attempts=3, base=0))
            async def body(ctx: JobContext, payload: int) -> int:
                if ctx.name.endswith("twice") and ctx.attempt == 1:
                    raise ValueError("again")
                return payload

            handles.append(body)
    for handle in handles:
        await handle.enqueue_many(list(range(25)))
    workers = [app.worker(concurrency=8) for _ in range(3)]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    assert {j.state for j in (await app.admin.list(limit=200)).jobs} == {"done"}
    snap = await app.admin.snapshot(None)
    assert snap.counters == [
        CounterSum("c1", "c1-fast", completed=25),
        CounterSum("c1", "c1-twice", completed=25, retried=25),
        CounterSum("c2", "c2-fast", completed=25),
        CounterSum("c2", "c2-twice", completed=25, retried=25),
    ]
    rows = by_name(await app.admin.stats())
    assert settled_numbers(rows[("c1", None)]) == (50, 25, 0, 0)
    assert rows[("c1", None)].failure_rate == 25 / 75
