"""Lease windows under the arrival patterns and faults a chaos soak found wanting.

Each lease's window runs from the statement that last set it; the registry row's from its last
landed renewal. These tests hold the worker to that: a stream of short claims never postpones the
registry's renewal; a settle is given up only when its own run's window closed; a renewal that
ends a pause in claiming wakes the claim loop; a run cancelled before its turn is never started.
(A run whose window closed while its process was frozen is tested with a real SIGSTOP in
``tests/process/test_freeze.py``.)
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from workhorse import App, DatabaseError, JobContext


def outage(cause: str) -> DatabaseError:
    return DatabaseError(code="DATABASE_UNAVAILABLE", cause=f"test: {cause}", fix="-")


def renewals_switch(app: App, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """While the answered event is set, every lease renewal fails (an event: the renewal runs on
    the worker's control loop, another thread)."""
    down = threading.Event()
    driver_class = type(app.driver)
    original = driver_class.heartbeat

    async def heartbeat(self: Any, *args: Any) -> Any:
        if down.is_set():
            raise outage("the server went away")
        return await original(self, *args)

    monkeypatch.setattr(driver_class, "heartbeat", heartbeat)
    return down


async def test_a_stream_of_short_claims_never_postpones_the_registry_renewal(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 20 ms job every 0.2 s on an idle worker: each claim ends an idle spell and takes a fresh
    lease. The registry row must still be renewed within its window (1.5 s here), so it never
    expires under a live worker, and claiming never pauses for want of a renewal."""
    driver_class = type(app.driver)
    original = driver_class.heartbeat
    beats: list[float] = []

    async def heartbeat(self: Any, *args: Any) -> Any:
        beats.append(time.monotonic())
        return await original(self, *args)

    monkeypatch.setattr(driver_class, "heartbeat", heartbeat)

    @app.job(tenant="none")
    async def short(ctx: JobContext, payload: int) -> int:
        await asyncio.sleep(0.02)
        return payload

    worker = app.worker(concurrency=1, visibility_timeout="1.5s", poll_interval="60s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    missing = 0
    try:
        await asyncio.sleep(0.3)
        began = time.monotonic()
        for i in range(25):
            await short.enqueue(i)
            await asyncio.sleep(0.2)
            if worker.id not in {w.id for w in await app.list_workers()}:
                missing += 1  # the row expired under a live, healthy worker
        ended = time.monotonic()
        for _ in range(100):
            if worker.stats.completed == 25:
                break
            await asyncio.sleep(0.05)
    finally:
        await worker.stop()
        stats = await task
    during = [began, *(b for b in beats if began < b < ended), ended]
    widest = max(b - a for a, b in itertools.pairwise(during))
    assert widest < 1.5, f"no renewal for {widest:.2f}s while claims kept arriving (window 1.5s)"
    assert missing == 0
    assert stats.completed == 25 and stats.lease_lost == 0


async def test_a_failed_settle_is_tried_again_while_its_own_lease_is_fresh(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry's renewals fail, so the worker's last landed renewal is older than a window,
    but the job was claimed a moment ago: its own window is open. Its first settle fails; the
    settle must be tried again (and land), not given up for a lapse that has not happened."""
    driver_class = type(app.driver)
    heartbeat, settle, register = driver_class.heartbeat, driver_class.settle, driver_class.register_worker
    registered: list[float] = []
    settles: list[int] = []
    visibility = 3.0

    async def registering(self: Any, *args: Any) -> Any:
        registered.append(time.monotonic())
        return await register(self, *args)

    async def renewing(self: Any, worker_id: str, leases: Any, seconds: float) -> Any:
        if not leases:
            raise outage("the registry's renewal is lost")
        while time.monotonic() < registered[0] + visibility + 0.5:  # lands once the first settle failed
            await asyncio.sleep(0.01)
        return await heartbeat(self, worker_id, leases, seconds)

    async def settling(self: Any, settlements: Any) -> Any:
        settles.append(len(settlements))
        if len(settles) == 1:  # fails a little past a window after the worker's last landed renewal
            while time.monotonic() < registered[0] + visibility + 0.1:
                await asyncio.sleep(0.01)
            raise outage("the settle's session was terminated")
        return await settle(self, settlements)

    monkeypatch.setattr(driver_class, "register_worker", registering)
    monkeypatch.setattr(driver_class, "heartbeat", renewing)
    monkeypatch.setattr(driver_class, "settle", settling)
    ran: list[int] = []

    @app.job(tenant="none")
    async def once(ctx: JobContext, payload: None) -> str:
        ran.append(ctx.attempt)
        return "settled"

    worker = app.worker(concurrency=1, visibility_timeout=f"{visibility}s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if registered:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(registered[0] + 1.0 - time.monotonic())
        ref = await once.enqueue(None)
        for _ in range(400):
            job = await app.get_job(ref.id)
            if job is not None and job.state == "done":
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop()
        stats = await task
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.result, job.attempt) == ("done", "settled", 1)
    assert ran == [1]  # ran once: the settle was not given up and left to a second claim
    assert len(settles) == 2 and stats.settle_missed == 0 and stats.completed == 1


async def test_a_renewal_that_ends_a_pause_wakes_the_claim_loop(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Renewals fail for a window, so the worker claims nothing (a lease taken then could not be
    kept). A job enqueued meanwhile waits. When renewals land again the worker claims it within
    a beat or two, not at its next idle poll (60 s here)."""
    down = renewals_switch(app, monkeypatch)
    ran = asyncio.Event()

    @app.job(tenant="none")
    async def waiting(ctx: JobContext, payload: None) -> None:
        ran.set()

    worker = app.worker(concurrency=1, visibility_timeout="1.5s", poll_interval="60s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)
        down.set()
        await asyncio.sleep(2.0)  # past the window: claiming is paused
        await waiting.enqueue(None)  # its wake-up comes while the worker may not claim
        await asyncio.sleep(0.5)
        assert not ran.is_set() and worker.stats.claimed == 0
        down.clear()
        came_back = time.monotonic()
        await asyncio.wait_for(ran.wait(), 20)
        took = time.monotonic() - came_back
    finally:
        down.clear()
        await worker.stop()
        await task
    assert took < 3.0, f"the job was claimed {took:.1f}s after renewals landed again"


async def test_a_run_cancelled_while_claimed_ahead_is_never_started(app: App) -> None:
    """Short bodies let the worker claim ahead of its one slot. An operator cancels a job that
    waits in that buffer: when its turn comes, its body must not run (the cancel already took
    the row; a body started now would do its work for nothing, or twice)."""
    started: list[int] = []
    gate = asyncio.Event()

    @app.job(tenant="none")
    async def tick(ctx: JobContext, payload: int) -> int:
        started.append(payload)
        if payload == 0:
            await gate.wait()  # holds the one slot while the rest wait, claimed ahead
        return payload

    @app.job(tenant="none")
    async def warm(ctx: JobContext, payload: None) -> None:
        return None  # a few quick runs teach the worker its bodies are short: it claims ahead

    await warm.enqueue_many([None] * 5)
    worker = app.worker(concurrency=1, handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if worker.stats.completed == 5:
                break
            await asyncio.sleep(0.01)
        refs = await tick.enqueue_many(list(range(6)))
        for _ in range(300):
            if started == [0] and worker.stats.claimed == 11:
                break
            await asyncio.sleep(0.01)
        assert started == [0] and worker.stats.claimed == 11, (started, worker.stats)
        cancelled = await app.admin.cancel(refs[3].id)
        assert cancelled.state == "cancelled"
        await asyncio.sleep(0.5)  # the cancel's beat reaches the worker, which marks the run
        gate.set()
        for _ in range(300):
            if worker.stats.completed == 10:
                break
            await asyncio.sleep(0.01)
    finally:
        gate.set()
        await worker.stop()
        await task
    assert started == [0, 1, 2, 4, 5]
    assert worker.stats.completed == 10 and worker.stats.settle_missed == 0


async def test_a_run_claimed_ahead_starts_only_while_its_lease_has_a_beat_left(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renewals stop landing while runs wait, claimed ahead, behind a slot held by a long body.
    The slot frees 2.4 s after their claim: their windows (3 s) are still open, but by less than a
    beat (1 s), so their leases missed a renewal and may be gone before a first write. None of
    them starts; the long body, already running, completes."""
    down = renewals_switch(app, monkeypatch)
    started: list[int] = []
    gate = asyncio.Event()

    @app.job(tenant="none")
    async def tick(ctx: JobContext, payload: int) -> int:
        started.append(payload)
        if payload == 0:
            await gate.wait()
        return payload

    @app.job(tenant="none")
    async def warm(ctx: JobContext, payload: None) -> None:
        return None

    await warm.enqueue_many([None] * 5)
    worker = app.worker(concurrency=1, visibility_timeout="3s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if worker.stats.completed == 5:
                break
            await asyncio.sleep(0.01)
        down.set()
        claimed_at = time.monotonic()
        await tick.enqueue_many(list(range(4)))
        for _ in range(200):
            if started == [0] and worker.stats.claimed == 9:
                break
            await asyncio.sleep(0.01)
        assert started == [0] and worker.stats.claimed == 9, (started, worker.stats)
        await asyncio.sleep(claimed_at + 2.4 - time.monotonic())
        down.clear()  # the body's settle must land; the waiting runs' leases are past saving
        gate.set()
        for _ in range(200):
            if worker.stats.completed == 6 and worker.stats.lease_lost == 3:
                break
            await asyncio.sleep(0.01)
    finally:
        down.clear()
        gate.set()
        await worker.stop()
        await task
    assert started == [0]
    assert worker.stats.completed == 6 and worker.stats.lease_lost == 3
