"""The memory driver (a test double) with an injected clock: two-way pages, progress, the errors
history; and its one refusal, ``POSTGRES_ONLY``, of everything it does not keep."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workhorse import ConfigurationError
from workhorse.drivers.memory import MemoryDriver
from workhorse.drivers.memory_core import _error_entry, _json_time
from workhorse.ids import new_job_id
from workhorse.types import (
    ERRORS_KEPT,
    BulkFilter,
    ListFilter,
    NewJob,
    Settlement,
    StepFence,
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


REFUSED: list[tuple[str, Any]] = [
    ("list_workers", ()),
    ("bulk", ("requeue", BulkFilter(state="dead"))),
    ("pause_queue", ("q", None)),
    ("resume_queue", ("q",)),
    ("list_pauses", ()),
    ("snapshot", (None,)),
    ("rollup_counters", ()),
    ("counter_minutes", (60,)),
    ("purge", (None,)),
    ("purge_expired_events", ()),
    ("leader_round", (None,)),
    ("release_leader", ("holder", 1)),
    ("read_schedule", ()),
    ("enqueue_staged", ([],)),
    ("purge_received", (1.0, 10)),
]


@pytest.mark.parametrize(("method", "args"), REFUSED, ids=[m for m, _ in REFUSED])
async def test_what_the_double_does_not_keep_is_refused_postgres_only(
    driver: MemoryDriver, method: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await getattr(driver, method)(*args)
    assert refused.value.code == "POSTGRES_ONLY"
    assert "pg_app" in refused.value.fix and "embedded" in refused.value.fix


async def test_a_search_and_a_standby_wake_up_are_refused_postgres_only(driver: MemoryDriver) -> None:
    with pytest.raises(ConfigurationError) as refused:
        await driver.list_jobs(ListFilter(payload={"a": 1}), limit=10)
    assert refused.value.code == "POSTGRES_ONLY"
    with pytest.raises(ConfigurationError) as refused:
        driver.open_handover(asyncio.Event())
    assert refused.value.code == "POSTGRES_ONLY"


# -- counters ------------------------------------------------------------------------------------


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
