"""The gate a delivery passes before its socket: ``ctx.draining`` turns true when the worker
begins to drain, and ``ctx.hand_back()`` then ends the attempt unspent (``interrupted``), at
once, instead of starting work the drain would have to tear down. On both drivers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from webhookkit import Receiver
from workhorse import App, JobContext, Retry
from workhorse.webhooks import deliver


async def test_a_body_that_sees_the_drain_hands_back_unspent(app: App) -> None:
    started = asyncio.Event()

    @app.job(name="gate", tenant="none")
    async def gate(ctx: JobContext, payload: None) -> str:
        assert not ctx.draining
        started.set()
        while not ctx.draining:
            await asyncio.sleep(0.01)
        ctx.hand_back()

    ref = await gate.enqueue(None)
    worker = app.worker(handle_signals=False, drain_timeout="60s")
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    began = time.monotonic()
    await worker.stop()
    await running
    assert time.monotonic() - began < 20  # handed back at once, not at the 60 s cut-off
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert worker.stats.interrupted == 1


async def test_hand_back_outside_a_drain_is_refused(app: App) -> None:
    @app.job(name="eager", tenant="none", retry=Retry(attempts=1))
    async def eager(ctx: JobContext, payload: None) -> None:
        ctx.hand_back()

    ref = await eager.enqueue(None)
    await app.worker(handle_signals=False).run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "dead"
    assert "HAND_BACK_INVALID" in str(job.last_error)


async def test_a_delivery_not_yet_on_the_wire_when_the_drain_begins_is_handed_back(
    hook_app: App, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving = asyncio.Event()
    drained = asyncio.Event()
    real = deliver.resolve

    async def slow_resolve(*args: Any) -> Any:  # the attempt is between its checks and its socket
        resolving.set()
        await drained.wait()
        return await real(*args)

    monkeypatch.setattr(deliver, "resolve", slow_resolve)
    endpoint = await hook_app.webhooks.add_endpoint(receiver.url, tenant="o1")
    ref = await hook_app.webhooks.send(endpoint.id, "order.paid", {})
    worker = hook_app.worker(queues=["webhooks"], handle_signals=False)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(resolving.wait(), 30)
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0.2)  # the drain has begun
    drained.set()
    await asyncio.wait_for(stopping, 20)
    await running
    assert receiver.received == []  # no POST was started
    assert (await hook_app.webhooks.deliveries(endpoint.id)).deliveries == []
    job = await hook_app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("ready", 0)
    assert worker.stats.interrupted == 1
