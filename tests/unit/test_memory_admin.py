"""The memory driver's operator surface with an injected clock: counters and their buckets,
rollup, pauses, bulk verbs, two-way pages, progress and the errors history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from workhorse import ConfigurationError
from workhorse.drivers.memory import MemoryDriver, _error_entry, _json_time
from workhorse.ids import new_job_id
from workhorse.types import (
    ERRORS_KEPT,
    BulkFilter,
    CounterSum,
    Lease,
    ListFilter,
    NewJob,
    Settlement,
    StepFence,
    WorkerInfo,
)

T0 = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def tick(self, **delta: float) -> None:
        self.at += timedelta(**delta)


def new(
    name: str = "task",
    *,
    queue: str = "default",
    tenant: str | None = None,
    key: str | None = None,
    attempts: int = 3,
    dead_letter: bool = True,
    delay: float = 0.0,
) -> NewJob:
    return NewJob(
        id=new_job_id(),
        name=name,
        queue=queue,
        tenant=tenant,
        payload="{}",
        key=key,
        priority=0,
        max_attempts=attempts,
        dead_letter=dead_letter,
        run_at=None,
        delay=delay,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def driver(clock: Clock) -> MemoryDriver:
    return MemoryDriver(clock=clock)


async def enqueue(driver: MemoryDriver, clock: Clock, *jobs: NewJob) -> list[str]:
    ids = []
    for job in jobs:
        ids += [r.id for r in await driver.enqueue_many([job])]
        clock.tick(seconds=1)  # distinct created_at, in order
    return ids


async def claim(driver: MemoryDriver, queue: str = "default", n: int = 10, *, sweep: bool = True) -> list[str]:
    result = await driver.claim(worker_id="w1", wants={queue: n}, names=["task", "other"], visibility=30, sweep=sweep)
    return [c.id for c in result.claimed]


def settlement(job_id: str, outcome: str, claims: int = 1, **kw: object) -> Settlement:
    return Settlement(job_id=job_id, worker_id="w1", claims=claims, outcome=outcome, **kw)  # type: ignore[arg-type]


def error(message: str) -> str:
    return json.dumps({"type": "ValueError", "message": message, "traceback": "tb"})


async def counters(driver: MemoryDriver, since: float | None = None) -> list[CounterSum]:
    return (await driver.snapshot(since)).counters


# -- counters ------------------------------------------------------------------------------------


async def test_settle_moves_counters_of_landed_rows_only(driver: MemoryDriver, clock: Clock) -> None:
    a, b, c, d, e = await enqueue(driver, clock, *(new() for _ in range(5)))
    await claim(driver)
    landed = await driver.settle(
        [
            settlement(a, "done", result="1"),
            settlement(b, "retry", error=error("b"), delay=60),
            settlement(c, "failed", error=error("c")),
            settlement(d, "dead", error=error("d")),
            settlement(e, "interrupted"),
        ]
    )
    assert landed == [True, True, True, True, True]
    assert await counters(driver) == [CounterSum("default", "task", completed=1, retried=1, failed=1, dead=1)]
    assert await driver.settle([settlement(a, "done", claims=7)]) == [False]  # a stale fence counts nothing
    assert (await counters(driver))[0].completed == 1


async def test_counters_are_per_minute_buckets_and_since_reads_recent_ones(driver: MemoryDriver, clock: Clock) -> None:
    a, b = await enqueue(driver, clock, new(), new("other", queue="mail"))
    await claim(driver)
    await driver.settle([settlement(a, "done")])
    clock.tick(minutes=10)
    await claim(driver, "mail")
    await driver.settle([settlement(b, "done")])
    assert {(k[0], k[1], k[2]) for k in driver._counters} == {
        ("minute", datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "default"),
        ("minute", datetime(2026, 3, 1, 12, 10, tzinfo=UTC), "mail"),
    }
    assert [c.queue for c in await counters(driver, since=120)] == ["mail"]
    assert [c.queue for c in await counters(driver)] == ["default", "mail"]


async def test_claim_counts_buried_and_lapsed_rows(driver: MemoryDriver, clock: Clock) -> None:
    final, again, failed = await enqueue(
        driver, clock, new(attempts=1), new(attempts=2), new(attempts=1, dead_letter=False)
    )
    assert len(await claim(driver)) == 3
    clock.tick(seconds=31)  # every lease lapsed
    assert await claim(driver, sweep=False) == []  # the lean claim never sweeps: counts nothing
    assert await counters(driver) == []
    result = await driver.claim(worker_id="w2", wants={"default": 10}, names=["task"], visibility=30)
    assert [c.id for c in result.claimed] == [again]
    assert {b.id: b.state for b in result.buried} == {final: "dead", failed: "failed"}
    assert await counters(driver) == [CounterSum("default", "task", failed=1, dead=1, lapsed=1)]
    job = await driver.get_job(final)
    assert job is not None and [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseLapsed")]


# -- rollup --------------------------------------------------------------------------------------


async def test_rollup_folds_minutes_into_hours_and_hours_into_days(driver: MemoryDriver, clock: Clock) -> None:
    for _ in range(3):
        (job,) = await enqueue(driver, clock, new())
        await claim(driver)
        await driver.settle([settlement(job, "done")])
        clock.tick(minutes=30)
    # buckets 12:00, 12:30, 13:00 (minute). At 14:59 nothing is older than date_trunc('hour', 12:59) = 12:00.
    clock.at = datetime(2026, 3, 1, 14, 59, tzinfo=UTC)
    assert await driver.rollup_counters() == 0
    clock.at = datetime(2026, 3, 1, 15, 0, tzinfo=UTC)  # cutoff 13:00: the two 12:xx minutes fold
    assert await driver.rollup_counters() == 2
    assert await driver.rollup_counters() == 0  # folding again never counts twice
    tiers = {(k[0], k[1]): v[0] for k, v in driver._counters.items()}
    assert tiers == {
        ("hour", datetime(2026, 3, 1, 12, tzinfo=UTC)): 2,
        ("minute", datetime(2026, 3, 1, 13, 0, tzinfo=UTC)): 1,
    }
    clock.at = datetime(2026, 3, 4, 0, 0, tzinfo=UTC)  # minutes cut 22:00 on 3 Mar, hours cut 2 Mar
    assert await driver.rollup_counters() == 1 + 2  # the 13:00 minute, then both 1 Mar hours
    assert {(k[0], k[1]): v[0] for k, v in driver._counters.items()} == {("day", datetime(2026, 3, 1, tzinfo=UTC)): 3}
    assert await counters(driver) == [CounterSum("default", "task", completed=3)]


# -- pauses --------------------------------------------------------------------------------------


async def test_pause_keeps_first_paused_at_and_claim_skips_the_queue(driver: MemoryDriver, clock: Clock) -> None:
    woken: list[int] = []
    driver.subscribe(lambda: woken.append(1))
    (job,) = await enqueue(driver, clock, new())
    first = await driver.pause_queue("default", "deploy")
    clock.tick(minutes=1)
    again = await driver.pause_queue("default", None)
    assert (again.paused_at, again.reason) == (first.paused_at, "deploy")
    assert (await driver.pause_queue("default", "other")).reason == "other"
    await driver.pause_queue("a-first", None)
    assert [p.queue for p in await driver.list_pauses()] == ["a-first", "default"]
    result = await driver.claim(worker_id="w1", wants={"default": 5}, names=["task"], visibility=30)
    assert (result.claimed, result.next_due) == ([], None)
    woken.clear()
    assert await driver.resume_queue("default") is True
    assert woken == [1]
    assert await driver.resume_queue("default") is False
    assert woken == [1]
    assert await claim(driver) == [job]


async def test_a_paused_queue_gives_no_next_due_and_keeps_its_running_jobs(driver: MemoryDriver, clock: Clock) -> None:
    await enqueue(driver, clock, new(), new(delay=60))
    (running,) = await claim(driver, n=1)
    await driver.pause_queue("default", None)
    assert await driver.settle([settlement(running, "done")]) == [True]


# -- snapshot ------------------------------------------------------------------------------------


async def test_snapshot_counts_reported_states_and_live_workers(driver: MemoryDriver, clock: Clock) -> None:
    a, _b, _c, d = await enqueue(driver, clock, new(), new(delay=5), new(delay=3600), new())
    await driver.cancel(d)
    await driver.register_worker(WorkerInfo("w1", "h", 1, ["default"], {"default": 1}), ttl=30)
    await driver.register_worker(WorkerInfo("w2", "h", 2, ["default"], {"default": 1}), ttl=1)
    clock.tick(seconds=10)  # b is due now (reported ready); w2 expired
    snap = await driver.snapshot(None)
    assert snap.now == clock.at and snap.workers == 1
    assert [(s.state, s.count, s.oldest_run_at) for s in snap.states] == [
        ("delayed", 1, T0 + timedelta(seconds=3602)),
        ("ready", 2, T0),
    ]
    assert a is not None and snap.paused == []


# -- pages -----------------------------------------------------------------------------------------


async def test_pages_go_both_ways_with_prev_and_next(driver: MemoryDriver, clock: Clock) -> None:
    ids = await enqueue(driver, clock, *(new() for _ in range(5)))  # ids[4] newest
    first = await driver.list_jobs(ListFilter(), limit=2)
    assert ([j.id for j in first.jobs], first.next, first.prev) == ([ids[4], ids[3]], ids[3], None)
    second = await driver.list_jobs(ListFilter(), limit=2, after=first.next)
    assert ([j.id for j in second.jobs], second.next, second.prev) == ([ids[2], ids[1]], ids[1], ids[2])
    last = await driver.list_jobs(ListFilter(), limit=2, after=second.next)
    assert ([j.id for j in last.jobs], last.next, last.prev) == ([ids[0]], None, ids[0])
    back = await driver.list_jobs(ListFilter(), limit=2, before=last.prev)
    assert ([j.id for j in back.jobs], back.next, back.prev) == ([ids[2], ids[1]], ids[1], ids[2])
    top = await driver.list_jobs(ListFilter(), limit=2, before=ids[2])
    assert ([j.id for j in top.jobs], top.next, top.prev) == ([ids[4], ids[3]], ids[3], ids[4])
    short = await driver.list_jobs(ListFilter(), limit=2, before=ids[3])
    assert ([j.id for j in short.jobs], short.next, short.prev) == ([ids[4]], ids[4], None)
    empty = await driver.list_jobs(ListFilter(), limit=2, before=ids[4])
    assert (empty.jobs, empty.next, empty.prev) == ([], None, None)


@pytest.mark.parametrize("which", ["after", "before"])
async def test_a_cursor_that_is_no_uuid_is_refused(driver: MemoryDriver, which: str) -> None:
    for cursor in ("not-a-uuid", "01900000-0000-7000-8000-00000000000"):
        with pytest.raises(ConfigurationError) as refused:
            await driver.list_jobs(ListFilter(), limit=2, **{which: cursor})
        assert refused.value.code == "PAGE_CURSOR_INVALID"


async def test_a_cursor_naming_no_job_is_a_position(driver: MemoryDriver, clock: Clock) -> None:
    """A removed job's id still places a page: the rows beyond it, either way, in any spelling."""
    ids = await enqueue(driver, clock, *(new() for _ in range(3)))  # ids[2] newest
    await driver.remove(ids[1])
    for cursor in (ids[1], ids[1].upper(), ids[1].replace("-", "")):
        older = await driver.list_jobs(ListFilter(), limit=5, after=cursor)
        assert ([j.id for j in older.jobs], older.next, older.prev) == ([ids[0]], None, ids[0])
        newer = await driver.list_jobs(ListFilter(), limit=5, before=cursor)
        assert ([j.id for j in newer.jobs], newer.next, newer.prev) == ([ids[2]], ids[2], None)


async def test_list_filters_by_id_prefix_and_created_range(driver: MemoryDriver, clock: Clock) -> None:
    ids = await enqueue(driver, clock, *(new() for _ in range(3)))
    hexed = ids[1].replace("-", "")
    for digits in (hexed, hexed[:20]):
        page = await driver.list_jobs(ListFilter(id_prefix=digits), limit=10)
        assert ids[1] in [j.id for j in page.jobs]
    assert [j.id for j in (await driver.list_jobs(ListFilter(id_prefix=hexed), limit=10)).jobs] == [ids[1]]
    window = ListFilter(created_from=T0 + timedelta(seconds=1), created_to=T0 + timedelta(seconds=2))
    assert [j.id for j in (await driver.list_jobs(window, limit=10)).jobs] == [ids[1]]


# -- bulk verbs ------------------------------------------------------------------------------------


async def finish(driver: MemoryDriver, clock: Clock, *jobs: NewJob, outcome: str = "dead") -> list[str]:
    ids = await enqueue(driver, clock, *jobs)
    await claim(driver)
    await driver.settle([settlement(i, outcome, error=error("x")) for i in ids])
    return ids


async def test_bulk_requeue_moves_the_oldest_of_a_key_and_skips_held_keys(driver: MemoryDriver, clock: Clock) -> None:
    woken: list[int] = []
    driver.subscribe(lambda: woken.append(1))
    (k1_old,) = await finish(driver, clock, new(key="k1"))
    k1_new, plain, k2 = await finish(driver, clock, new(key="k1"), new(), new(key="k2"))
    (holder,) = await enqueue(driver, clock, new(key="k2"))  # a live job holds k2
    dry = await driver.bulk("requeue", BulkFilter("dead"), limit=1, dry_run=True)
    assert (dry.affected, dry.remaining, dry.dry_run) == (1, 1, True)
    assert (await driver.get_job(k1_old)).state == "dead"  # type: ignore[union-attr]
    woken.clear()
    moved = await driver.bulk("requeue", BulkFilter("dead"), limit=1, dry_run=False)
    assert (moved.affected, moved.remaining) == (1, 1) and woken == [1]
    job = await driver.get_job(k1_old)
    assert job is not None and (job.state, job.attempt, job.progress) == ("ready", 0, None)
    assert len(job.errors) == 1  # the history stays
    rest = await driver.bulk("requeue", BulkFilter("dead"), limit=10, dry_run=False)
    assert (rest.affected, rest.remaining) == (1, 0)  # plain; k1_new and k2 are key-held
    assert (await driver.get_job(plain)).state == "ready"  # type: ignore[union-attr]
    assert {(await driver.get_job(i)).state for i in (k1_new, k2)} == {"dead"}  # type: ignore[union-attr]
    assert holder


async def test_bulk_promote_cancel_and_remove(driver: MemoryDriver, clock: Clock) -> None:
    waiting = await enqueue(driver, clock, new(delay=3600), new(delay=3600), new(queue="mail", delay=3600))
    promoted = await driver.bulk("promote", BulkFilter("delayed", queue="default"), limit=1, dry_run=False)
    assert (promoted.affected, promoted.remaining) == (1, 1)
    job = await driver.get_job(waiting[0])
    assert job is not None and (job.state, job.run_at) == ("ready", clock.at)
    assert (await driver.bulk("promote", BulkFilter("ready"), limit=10, dry_run=False)).affected == 0
    cancelled = await driver.bulk("cancel", BulkFilter("delayed"), limit=10, dry_run=False)
    assert (cancelled.affected, cancelled.remaining) == (2, 0)
    removed = await driver.bulk("remove", BulkFilter("cancelled", queue="mail"), limit=10, dry_run=False)
    assert (removed.affected, removed.remaining) == (1, 0)
    assert await driver.get_job(waiting[2]) is None
    assert await counters(driver) == []  # operator verbs count nothing


async def test_bulk_cancel_takes_a_running_job_from_its_worker(driver: MemoryDriver, clock: Clock) -> None:
    (job,) = await enqueue(driver, clock, new())
    await claim(driver)
    assert (await driver.bulk("cancel", BulkFilter("running"), limit=10, dry_run=False)).affected == 1
    assert await driver.settle([settlement(job, "done")]) == [False]
    assert (await driver.heartbeat("w1", [Lease(job, 1)], 30)).held == set()


# -- progress and errors -------------------------------------------------------------------------


async def test_progress_is_fenced_rides_the_settle_and_requeue_clears_it(driver: MemoryDriver, clock: Clock) -> None:
    (job,) = await enqueue(driver, clock, new())
    await claim(driver)
    report = json.dumps({"fraction": 0.5, "done": 1, "total": 2, "message": None, "at": "x"})
    assert await driver.record_progress([(StepFence(job, "w1", 1), report)]) == [True]
    assert await driver.record_progress([(StepFence(job, "w2", 1), "{}")]) == [False]
    assert (await driver.get_job(job)).progress["fraction"] == 0.5  # type: ignore[union-attr,index]
    await driver.settle([settlement(job, "done", result="1", progress=json.dumps({"fraction": 1.0}))])
    assert (await driver.get_job(job)).progress == {"fraction": 1.0}  # type: ignore[union-attr]
    assert await driver.record_progress([(StepFence(job, "w1", 1), "{}")]) == [False]  # no longer running
    assert (await driver.requeue(job)).progress is None


async def test_settle_without_progress_keeps_the_last_report(driver: MemoryDriver, clock: Clock) -> None:
    (job,) = await enqueue(driver, clock, new())
    await claim(driver)
    await driver.record_progress([(StepFence(job, "w1", 1), '{"done": 3}')])
    await driver.settle([settlement(job, "retry", error=error("e"))])
    assert (await driver.get_job(job)).progress == {"done": 3}  # type: ignore[union-attr]


async def test_errors_keep_the_last_ten_attempts(driver: MemoryDriver, clock: Clock) -> None:
    (job,) = await enqueue(driver, clock, new(attempts=ERRORS_KEPT + 3))
    for n in range(1, ERRORS_KEPT + 4):
        assert await claim(driver) == [job]
        outcome = "dead" if n == ERRORS_KEPT + 3 else "retry"
        if outcome == "dead":
            clock.at = datetime(2026, 3, 1, 12, 5, 0, 500_000, tzinfo=UTC)  # jsonb trims the fraction's zeros
        await driver.settle([settlement(job, outcome, claims=n, error=error(f"e{n}"))])
    done = await driver.get_job(job)
    assert done is not None and done.state == "dead"
    assert [e["attempt"] for e in done.errors] == list(range(4, ERRORS_KEPT + 4))
    assert done.errors[-1] == {
        "attempt": 13,
        "type": "ValueError",
        "message": "e13",
        "at": "2026-03-01T12:05:00.5+00:00",
    }
    assert done.last_error is not None and done.last_error["traceback"] == "tb"
    assert done.to_dict()["errors"] == done.errors


async def test_a_hand_back_adds_no_error(driver: MemoryDriver, clock: Clock) -> None:
    (job,) = await enqueue(driver, clock, new())
    await claim(driver)
    await driver.settle([settlement(job, "interrupted")])
    assert (await driver.get_job(job)).errors == []  # type: ignore[union-attr]


async def test_single_promote_wakes_and_keeps_an_overdue_run_at(driver: MemoryDriver, clock: Clock) -> None:
    woken: list[int] = []
    driver.subscribe(lambda: woken.append(1))
    (job,) = await enqueue(driver, clock, new())
    woken.clear()
    promoted = await driver.promote(job)
    assert promoted.run_at == T0 and woken == [1]


@pytest.mark.parametrize(
    ("at", "text"),
    [
        (datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC), "2026-03-01T12:00:30+00:00"),
        (datetime(2026, 3, 1, 12, 0, 30, 120, tzinfo=UTC), "2026-03-01T12:00:30.00012+00:00"),
        (datetime(2026, 3, 1, 12, 0, 30, 123456, tzinfo=UTC), "2026-03-01T12:00:30.123456+00:00"),
    ],
)
def test_error_times_are_spelled_as_jsonb_spells_a_timestamptz(at: datetime, text: str) -> None:
    assert _json_time(at) == text


def test_an_error_entry_takes_type_and_message_as_given() -> None:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    assert _error_entry(2, '{"type": 5, "traceback": "tb"}', at) == {
        "attempt": 2,
        "type": 5,
        "message": None,
        "at": "2026-03-01T00:00:00+00:00",
    }
    assert _error_entry(1, '"just text"', at)["type"] is None
