"""The job lifecycle through a real worker: results, retries, dead letters,
timeouts, on_settled, and jobs the worker does not know."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from workhorse import App, JobContext, Outcome, Retry, RetryAfter


async def test_sync_bodies_run_in_threads(app: App) -> None:
    threads: set[str] = set()

    @app.job(tenant="none")
    def work(ctx: JobContext, payload: int) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(0.01)
        return payload + 1

    refs = await work.enqueue_many(list(range(6)))
    await app.worker(concurrency=3).run(burst=True)
    results = [(await app.get_job(r.id)).result for r in refs]  # type: ignore[union-attr]
    assert results == [1, 2, 3, 4, 5, 6]
    assert threading.main_thread().name not in threads


async def test_dead_letter_false_ends_failed(app: App) -> None:
    @app.job(tenant="none", retry=Retry(attempts=2, base=0, dead_letter=False))
    async def flaky(ctx: JobContext, payload: None) -> None:
        raise RuntimeError("nope")

    ref = await flaky.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("failed", 2)


async def test_retry_after_waits_the_named_delay_clamped(app: App) -> None:
    @app.job(tenant="none", retry=Retry(attempts=5, base=0, max_delay=120))
    async def limited(ctx: JobContext, payload: int) -> None:
        raise RetryAfter(payload, "rate limited")

    short = await limited.enqueue(60)
    long = await limited.enqueue(86400)
    await app.worker().run(burst=True)
    for ref, expected in ((short, 60), (long, 120)):
        job = await app.get_job(ref.id)
        assert job is not None and job.state == "delayed" and job.attempt == 1
        assert job.started_at is not None
        waited = (job.run_at - job.started_at).total_seconds()
        assert expected - 2 < waited < expected + 5


async def test_a_timeout_cancels_the_async_body_then_fails_the_attempt(app: App) -> None:
    events: list[str] = []

    @app.job(tenant="none", timeout="100ms", retry=Retry(attempts=2, base=0))
    async def slow(ctx: JobContext, payload: None) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            events.append(f"cancelled {ctx.attempt}")
            raise
        events.append("finished")  # never reached

    ref = await slow.enqueue(None)
    started = time.monotonic()
    await app.worker().run(burst=True)
    assert time.monotonic() - started < 5
    job = await app.get_job(ref.id)
    assert job is not None
    assert events == ["cancelled 1", "cancelled 2"]
    assert (job.state, job.attempt) == ("dead", 2)
    assert "timeout" in job.last_error["message"]  # type: ignore[index]


async def test_a_sync_body_past_its_deadline_is_told_and_its_late_result_is_never_written(app: App) -> None:
    observed = threading.Event()

    @app.job(tenant="none", timeout="100ms", retry=Retry(attempts=1))
    def stubborn(ctx: JobContext, payload: None) -> str:
        if ctx.wait_cancelled(5):
            observed.set()
        return "late result"

    ref = await stubborn.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert observed.is_set()
    assert job is not None and job.state == "dead" and job.result is None


async def test_a_result_that_is_not_json_fails_the_attempt(app: App) -> None:
    @app.job(tenant="none", retry=Retry(attempts=1))
    async def odd(ctx: JobContext, payload: None) -> object:
        return {"when": object()}

    ref = await odd.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "dead"
    assert "cannot be stored" in job.last_error["message"]  # type: ignore[index]


@pytest.mark.parametrize("dead_letter", [True, False])
async def test_a_result_that_cannot_be_stored_ends_the_job_at_once(app: App, dead_letter: bool) -> None:
    """Encoding the result fails the same way on every attempt, after the body's side effects ran
    again: the job ends on its first attempt (dead-lettered, or failed without dead letters) with
    RESULT_INVALID and the path of the bad value, however many attempts its policy allows."""
    ran: list[int] = []

    @app.job(tenant="none", retry=Retry(attempts=5, base=0, dead_letter=dead_letter))
    async def stamped(ctx: JobContext, payload: None) -> object:
        ran.append(ctx.attempt)
        return {"at": datetime.now(UTC)}

    ref = await stamped.enqueue(None)
    stats = await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead" if dead_letter else "failed", 1)
    assert ran == [1] and stats.retried == 0
    message = job.last_error["message"]  # type: ignore[index]
    assert message.startswith("RESULT_INVALID: ") and "$.at" in message and "isoformat" in message


async def test_on_settled_runs_once_per_ending_never_for_a_retry(app: App) -> None:
    outcomes: list[tuple[str, str]] = []
    tries = {"n": 0}

    def hook(outcome: Outcome) -> None:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("a hook that fails once is tried again, never rethrown")
        outcomes.append((outcome.kind, outcome.name))

    @app.job(name="ok", tenant="none", on_settled=hook)
    async def ok(ctx: JobContext, payload: None) -> int:
        return 1

    @app.job(name="dies", tenant="none", on_settled=hook, retry=Retry(attempts=2, base=0))
    async def dies(ctx: JobContext, payload: None) -> None:
        raise ValueError("x")

    @app.job(name="dropped", tenant="none", on_settled=hook, retry=Retry(attempts=1, dead_letter=False))
    async def dropped(ctx: JobContext, payload: None) -> None:
        raise ValueError("x")

    await ok.enqueue(None)
    await dies.enqueue(None)
    await dropped.enqueue(None)
    await app.worker().run(burst=True)
    for _ in range(500):  # hooks run after their settle landed, on the body loop: allow a loaded machine 10 s
        if len(outcomes) == 3:
            break
        await asyncio.sleep(0.02)
    assert sorted(outcomes) == [("completed", "ok"), ("dead-lettered", "dies"), ("dropped", "dropped")]


async def test_a_job_no_worker_knows_stays_queued(app: App) -> None:
    other = App(app.database_url, schema=app.schema)

    @other.job(name="only.elsewhere", tenant="none")
    async def elsewhere(ctx: JobContext, payload: None) -> None:
        return None

    @app.job(name="known", tenant="none")
    async def known(ctx: JobContext, payload: None) -> None:
        return None

    stranger = await elsewhere.enqueue(None)
    await known.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(stranger.id)
    assert job is not None and job.state == "ready" and job.attempt == 0
    assert [j.id for j in (await app.list_jobs(state="ready")).jobs] == [stranger.id]
    await other.worker().run(burst=True)
    job = await app.get_job(stranger.id)
    assert job is not None and job.state == "done"
    await other.close()


async def test_priority_then_run_at_then_id(app: App) -> None:
    order: list[str] = []

    @app.job(tenant="none")
    async def record(ctx: JobContext, payload: str) -> None:
        order.append(payload)

    await record.enqueue("low-1", priority=0)
    await record.enqueue("high", priority=5)
    await record.enqueue("low-2", priority=0)
    await record.enqueue("urgent", priority=9)
    await app.worker(concurrency=1).run(burst=True)
    assert order == ["urgent", "high", "low-1", "low-2"]


async def test_per_queue_concurrency_is_respected(app: App) -> None:
    running = {"now": 0, "max": 0}

    @app.job(queue="narrow", tenant="none")
    async def narrow(ctx: JobContext, payload: None) -> None:
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(0.02)
        running["now"] -= 1

    @app.job(queue="wide", tenant="none")
    async def wide(ctx: JobContext, payload: None) -> None:
        await asyncio.sleep(0.01)

    await narrow.enqueue_many([None] * 6)
    await wide.enqueue_many([None] * 6)
    stats = await app.worker(concurrency={"narrow": 2, "wide": 4}).run(burst=True)
    assert stats.completed == 12
    assert 1 <= running["max"] <= 2  # never more than the queue allows (exactly 2 is timing-dependent)


def thirty_seconds(app: App) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """A job whose body runs 30 s unless cancelled; the events say it started and was cancelled."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    @app.job(tenant="none")
    async def long(ctx: JobContext, payload: None) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    return long, started, cancelled


async def test_operator_cancel_stops_a_running_body(app: App) -> None:
    long, started, cancelled = thirty_seconds(app)
    ref = await long.enqueue(None)
    worker = app.worker(visibility_timeout="1s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await app.cancel(ref.id)
    await asyncio.wait_for(cancelled.wait(), 10)  # the next heartbeat found the fence moved
    await worker.stop()
    await task
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "cancelled"


async def test_stop_drains_a_running_job_to_its_end(app: App) -> None:
    started = asyncio.Event()

    @app.job(tenant="none")
    async def steady(ctx: JobContext, payload: None) -> str:
        started.set()
        await asyncio.sleep(0.3)
        return "finished"

    ref = await steady.enqueue(None)
    worker = app.worker(handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0)  # the drain has begun
    late = await steady.enqueue(None)  # enqueued during the drain: not claimed by this worker
    await stopping
    await task
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.result) == ("done", "finished")
    untouched = await app.get_job(late.id)
    assert untouched is not None and untouched.state == "ready" and untouched.attempt == 0


async def test_drain_cut_off_hands_the_job_back_unspent(app: App) -> None:
    started = asyncio.Event()

    @app.job(tenant="none")
    async def endless(ctx: JobContext, payload: None) -> None:
        started.set()
        await asyncio.sleep(60)

    ref = await endless.enqueue(None)
    worker = app.worker(drain_timeout="200ms", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    began = time.monotonic()
    await worker.stop()
    stats = await task
    assert time.monotonic() - began < 5
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert stats.interrupted == 1 and stats.retried == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, "ten", True])
async def test_worker_option_refusals(app: App, bad: object) -> None:
    from workhorse import ConfigurationError

    @app.job(tenant="none")
    async def anything(ctx: JobContext, payload: None) -> None:
        return None

    with pytest.raises(ConfigurationError, match="concurrency"):
        app.worker(concurrency=bad)  # type: ignore[arg-type]


async def stop_mid_drain(app: App, jobs: int) -> Any:
    """Short jobs let a worker claim ahead of its two slots; it is stopped after a quarter of them
    ran. Every job is then ``done`` or back ``ready`` with its attempt unspent (every page read),
    and the stats agree. Answers the worker's stats."""
    done = asyncio.Event()
    count = {"n": 0}

    @app.job(tenant="none")
    async def quick(ctx: JobContext, payload: int) -> int:
        count["n"] += 1
        if count["n"] == jobs // 4:
            done.set()
        await asyncio.sleep(0.001)
        return payload

    await quick.enqueue_many(list(range(jobs)))
    worker = app.worker(concurrency=2, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(done.wait(), 30)
    await worker.stop()
    stats = await task
    page_states: dict[str, int] = {}
    after = None
    while True:
        page = await app.list_jobs(limit=200, after=after)
        for job in page.jobs:
            page_states[job.state] = page_states.get(job.state, 0) + 1
            assert job.state in ("done", "ready"), job
            if job.state == "ready":
                assert job.attempt == 0
        if page.next is None:
            break
        after = page.next
    assert page_states["done"] == stats.completed
    assert stats.claimed == stats.completed + stats.interrupted
    assert stats.interrupted > 0  # the worker did claim ahead of its two slots
    return stats


async def test_jobs_claimed_ahead_go_back_unspent_when_the_worker_stops(app: App) -> None:
    await stop_mid_drain(app, 600)


async def test_a_hand_back_that_fails_for_a_moment_is_tried_again(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain's hand-back of jobs claimed ahead meets two failed round trips: it tries again,
    and every job not done is back ``ready`` with its attempt unspent."""
    from workhorse import DatabaseError

    driver_class = type(app.driver)
    original = driver_class.settle
    failed = {"n": 0}

    async def flaky(self: Any, settlements: Any) -> Any:
        if any(s.outcome == "interrupted" for s in settlements) and failed["n"] < 2:
            failed["n"] += 1
            raise DatabaseError(code="DATABASE_UNAVAILABLE", cause="test: a dropped round trip", fix="-")
        return await original(self, settlements)

    monkeypatch.setattr(driver_class, "settle", flaky)
    await stop_mid_drain(app, 400)
    assert failed["n"] == 2


async def test_claims_stop_while_settles_cannot_land(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finished runs whose settle cannot land hold their leases: past SETTLE_BACKLOG times the
    slots of them, the worker claims nothing more, and once settles land again it drains the rest."""
    from workhorse.worker.table import PREFETCH_MAX, SETTLE_BACKLOG

    gate = threading.Event()  # the settle runs on the worker's control loop, another thread
    driver_class = type(app.driver)
    original = driver_class.settle

    async def stuck(self: Any, settlements: Any) -> Any:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return await original(self, settlements)

    monkeypatch.setattr(driver_class, "settle", stuck)

    @app.job(tenant="none")
    async def quick(ctx: JobContext, payload: int) -> int:
        return payload

    await quick.enqueue_many(list(range(600)))
    worker = app.worker(concurrency=2, handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1.5)
        claimed = worker.stats.claimed
        assert 0 < claimed <= 2 * (SETTLE_BACKLOG + PREFETCH_MAX + 2), claimed
        await asyncio.sleep(0.5)
        assert worker.stats.claimed == claimed  # stopped, not slowed
        gate.set()
        deadline = time.monotonic() + 30
        while worker.stats.completed < 600 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert worker.stats.completed == 600
    finally:
        gate.set()
        await worker.stop()
        await task


@pytest.mark.parametrize("outage", ["fails", "hangs"])
async def test_a_whole_window_without_a_landed_renewal_cancels_the_run(
    app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, outage: str
) -> None:
    """The database stops renewing leases: every renewal fails at once, or never answers (a
    connection gone silent, no error). Either way, a visibility window after the last renewal
    landed the running body is cancelled (lease lost) and its late result is never written."""
    from workhorse import DatabaseError

    down = threading.Event()  # the renewal runs on the worker's control loop, another thread
    driver_class = type(app.driver)
    original = driver_class.heartbeat

    async def heartbeat(self: Any, *args: Any) -> Any:
        if down.is_set() and outage == "fails":
            raise DatabaseError(code="DATABASE_UNAVAILABLE", cause="test: the server went away", fix="-")
        while down.is_set():  # "hangs": no answer and no error, for as long as the outage lasts
            await asyncio.sleep(0.01)
        return await original(self, *args)

    monkeypatch.setattr(driver_class, "heartbeat", heartbeat)
    slow, started, cancelled = thirty_seconds(app)
    ref = await slow.enqueue(None)
    worker = app.worker(concurrency=1, visibility_timeout="1.5s", drain_timeout="0.2s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        down.set()
        went_down = time.monotonic()
        await asyncio.wait_for(cancelled.wait(), 15)
        # The window runs from the last landed renewal: at most 1.5 s before the outage began.
        assert time.monotonic() - went_down < 1.5 + 3.0
        for _ in range(100):  # counted once the cancelled run is wound up
            if worker.stats.lease_lost:
                break
            await asyncio.sleep(0.02)
        assert worker.stats.lease_lost == 1
        # The lapsed job is due again, but a worker that cannot renew leases claims nothing.
        await asyncio.sleep(1.0)
        assert worker.stats.claimed == 1
        down.clear()  # renewals land again: the worker claims again, the lapsed job first
        for _ in range(250):
            if worker.stats.claimed > 1:
                break
            await asyncio.sleep(0.02)
        assert worker.stats.claimed == 2
    finally:
        down.clear()
        await worker.stop()
        await task
    # The cancelled run wrote nothing: its row is left to lapse (or was claimed again once the
    # renewals came back, and that run handed back at the drain cut-off).
    job = await app.get_job(ref.id)
    assert job is not None and job.state in ("running", "ready") and job.result is None
    assert worker.stats.completed == worker.stats.failed == worker.stats.retried == 0
    # The log says why: the renewal failed, or (LEASE_RENEWAL_UNANSWERED) it never answered.
    said = "test: the server went away" if outage == "fails" else "no answer within the visibility window (1.5s)"
    assert f"lease renewal failed ({said}" in caplog.text


async def test_a_control_loop_that_fails_unexpectedly_starts_again(
    app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A defect in the heartbeat (an exception no statement raises) must not end the renewals:
    the loop is logged and started again, so the running body keeps its lease to its end."""
    driver_class = type(app.driver)
    original = driver_class.heartbeat
    calls = {"n": 0}

    async def heartbeat(self: Any, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("test: a defect in the renewal")
        return await original(self, *args)

    monkeypatch.setattr(driver_class, "heartbeat", heartbeat)

    @app.job(tenant="none")
    async def slow(ctx: JobContext, payload: None) -> str:
        await asyncio.sleep(3.5)  # more than two visibility windows
        return "kept"

    ref = await slow.enqueue(None)
    worker = app.worker(concurrency=1, visibility_timeout="1.5s", handle_signals=False)
    stats = await asyncio.wait_for(worker.run(burst=True), 30)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "done" and job.result == "kept"
    assert stats.lease_lost == 0 and calls["n"] >= 3
    assert "the heartbeat loop failed" in caplog.text


async def test_one_failed_renewal_right_after_a_claim_loses_nothing(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first renewal of a freshly claimed job fails. The lease runs from the claim, and the
    renewal is tried again within the window: the run keeps its lease and completes."""
    from workhorse import DatabaseError

    driver_class = type(app.driver)
    original = driver_class.heartbeat
    asked: list[int] = []

    async def heartbeat(self: Any, worker_id: str, leases: Any, visibility: float) -> Any:
        if leases:
            asked.append(len(leases))
            if len(asked) == 1:
                raise DatabaseError(code="DATABASE_UNAVAILABLE", cause="test: one lost round trip", fix="-")
        return await original(self, worker_id, leases, visibility)

    monkeypatch.setattr(driver_class, "heartbeat", heartbeat)

    @app.job(tenant="none")
    async def slow(ctx: JobContext, payload: None) -> str:
        await asyncio.sleep(2.5)  # longer than the visibility window
        return "kept"

    worker = app.worker(concurrency=1, visibility_timeout="1.5s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)  # the worker starts idle: its beats are on the idle schedule
        ref = await slow.enqueue(None)
        for _ in range(500):
            if worker.stats.completed or worker.stats.lease_lost:
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop()
        stats = await task
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.result) == ("done", "kept")
    assert stats.lease_lost == 0 and len(asked) >= 3
