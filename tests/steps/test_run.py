"""``ctx.step.run`` on both drivers: stored before it returns, replayed by name, fenced, refused clearly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from workhorse import (
    App,
    ConfigurationError,
    JobContext,
    LeaseLostError,
    Retry,
    StepDuplicateError,
    StepReplayError,
    TerminalError,
)
from workhorse.drivers import listener as listener_module
from workhorse.drivers.memory import MemoryDriver


async def test_the_first_run_answers_what_a_replay_will(app: App) -> None:
    seen: list[Any] = []

    @app.job(name="shape", tenant="none", retry=Retry(attempts=2, base=0))
    async def shape(ctx: JobContext, payload: None) -> None:
        seen.append(await ctx.step.run("pair", lambda: (1, 2)))
        if ctx.attempt == 1:
            raise ValueError("again")

    await shape.enqueue(None)
    await app.worker().run(burst=True)
    assert seen == [[1, 2], [1, 2]]  # a tuple comes back a list on the first run too


async def test_a_failing_step_is_recorded_failed_and_runs_again_on_the_next_attempt(app: App) -> None:
    tries: list[int] = []

    async def flaky() -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise ConnectionError("the card processor hung up")
        return "ok"

    @app.job(name="flaky", tenant="none", retry=Retry(attempts=2, base=0))
    async def job(ctx: JobContext, payload: None) -> str:
        state = await app.get_job(ctx.id)
        assert state is not None
        if ctx.attempt == 2:  # what show said between the attempts
            assert [(s["name"], s["state"]) for s in state.steps] == [("pay", "failed")]
            assert state.steps[0]["error"]["type"] == "ConnectionError"
            assert "hung up" in state.steps[0]["error"]["message"]
        return str(await ctx.step.run("pay", flaky))

    ref = await job.enqueue(None)
    await app.worker().run(burst=True)
    done = await app.get_job(ref.id)
    assert done is not None and (done.state, done.attempt, done.result) == ("done", 2, "ok")
    assert [(s["name"], s["state"], s["attempt"], s["error"]) for s in done.steps] == [("pay", "done", 2, None)]
    assert done.last_error is not None and done.last_error["type"] == "ConnectionError"


async def test_step_retry_and_timeout_stay_inside_the_attempt(app: App) -> None:
    tries = {"n": 0}

    def sometimes() -> int:
        tries["n"] += 1
        if tries["n"] < 3:
            raise OSError("try again")
        return tries["n"]

    async def slow() -> None:
        await asyncio.sleep(10)

    @app.job(name="patient", tenant="none", retry=Retry(attempts=1))
    async def patient(ctx: JobContext, payload: None) -> int:
        value = await ctx.step.run("sometimes", sometimes, retry=Retry(attempts=3, base=0))
        assert isinstance(value, int)
        await ctx.step.run("slow", slow, timeout="50ms", retry=Retry(attempts=2, base=0))
        return value

    ref = await patient.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert job.last_error is not None and job.last_error["type"] == "StepTimeoutError"
    assert "'slow' ran past its timeout of 0.05s" in job.last_error["message"]
    assert [(s["name"], s["state"]) for s in job.steps] == [("sometimes", "done"), ("slow", "failed")]
    assert job.steps[0]["result"] == 3


async def test_a_duplicate_step_name_is_refused_and_parks_the_job(app: App) -> None:
    @app.job(name="twice", tenant="none", retry=Retry(attempts=5, base=0))
    async def twice(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("same", lambda: 1)
        await ctx.step.run("same", lambda: 2)

    ref = await twice.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)  # retrying cannot fix code
    assert job.last_error is not None and job.last_error["type"] == "StepDuplicateError"
    assert "STEP_DUPLICATE" in job.last_error["message"] and "'same'" in job.last_error["message"]
    assert [(s["name"], s["result"]) for s in job.steps] == [("same", 1)]  # never overwritten


def test_duplicate_error_carries_code_cause_fix() -> None:
    error = StepDuplicateError("order", "charge")
    assert (error.code, error.terminal) == ("STEP_DUPLICATE", True)
    assert "'charge'" in error.cause and "f'charge:{i}'" in error.fix


async def test_a_result_that_is_not_json_is_refused_naming_the_step(app: App) -> None:
    @app.job(name="odd", tenant="none", retry=Retry(attempts=1))
    async def odd(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("load", lambda: {"at": object()})

    ref = await odd.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "dead"
    assert job.last_error is not None and job.last_error["type"] == "StepResultError"
    assert "STEP_RESULT_INVALID" in job.last_error["message"] and "step 'load'" in job.last_error["message"]
    assert [(s["name"], s["state"]) for s in job.steps] == [("load", "failed")]


async def test_a_run_whose_steps_changed_order_is_parked_not_misreplayed(app: App) -> None:
    version = {"n": 1}
    charged: list[str] = []

    @app.job(name="evolving", tenant="none", retry=Retry(attempts=3, base=0))
    async def evolving(ctx: JobContext, payload: None) -> None:
        name = "charge" if version["n"] == 1 else "charge-card"  # a rename between deploys
        await ctx.step.run(name, lambda: charged.append(name))
        raise ValueError("fails after its step")

    ref = await evolving.enqueue(None)
    await app.worker().run(burst=True)  # version 1 records "charge", then fails three times
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "dead" and charged == ["charge"]
    version["n"] = 2
    await app.requeue(ref.id)  # a plain requeue replays the recorded steps with the new code
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert job.last_error is not None and job.last_error["type"] == "StepReplayError"
    assert "STEP_REPLAY_MISMATCH" in job.last_error["message"]
    assert charged == ["charge"]  # the renamed step never ran: no second charge
    error = StepReplayError("evolving", ref.id, 0, "charge", "charge-card")
    assert error.fix == f"workhorse requeue {ref.id} --from-step charge   # re-run from there with the new code"


async def test_a_plain_def_body_is_told_steps_need_async(app: App) -> None:
    @app.job(name="plain", tenant="none", retry=Retry(attempts=3, base=0))
    def plain(ctx: JobContext, payload: None) -> None:
        ctx.step.run("x", lambda: 1)

    ref = await plain.enqueue(None)
    await app.worker().run(burst=True)
    job = await app.get_job(ref.id)
    assert job is not None and (job.state, job.attempt) == ("dead", 1)
    assert job.last_error is not None and "STEPS_NEED_ASYNC" in job.last_error["message"]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda ctx: ctx.step.run("", lambda: 1), "STEP_NAME_INVALID"),
        (lambda ctx: ctx.step.run("x" * 201, lambda: 1), "STEP_NAME_INVALID"),
        (lambda ctx: ctx.step.run("x", 42), "STEP_FUNCTION_INVALID"),
        (lambda ctx: ctx.step.run("x", lambda: 1, retry=3), "CONFIG_INVALID"),
        (lambda ctx: ctx.step.run("x", lambda: 1, timeout="soon"), "CONFIG_INVALID"),
        (lambda ctx: ctx.step.sleep("x", -1), "CONFIG_INVALID"),
        (lambda ctx: ctx.step.sleep_until("x", "tomorrow"), "CONFIG_INVALID"),
        (lambda ctx: ctx.step.sleep("x", "3000000d"), "DELAY_TOO_LONG"),  # past the year 9999 (issue 27)
        (lambda ctx: ctx.step.sleep_until("x", datetime(9999, 12, 31, tzinfo=UTC)), "RUN_AT_TOO_LATE"),
        (lambda ctx: ctx.step.wait_for_event("x", "e", timeout=1e12), "DELAY_TOO_LONG"),
        (lambda ctx: ctx.step.wait_for_event("x", "", key="k"), "EVENT_NAME_INVALID"),
        (lambda ctx: ctx.step.wait_for_event("x", "e", key=7), "EVENT_KEY_INVALID"),
    ],
)
async def test_step_arguments_are_refused_before_anything_runs(app: App, call: Any, code: str) -> None:
    codes: list[str] = []

    @app.job(name="bad", tenant="none", retry=Retry(attempts=1))
    async def bad(ctx: JobContext, payload: None) -> None:
        try:
            call(ctx)
        except Exception as error:
            codes.append(getattr(error, "code", type(error).__name__))

    await bad.enqueue(None)
    await app.worker().run(burst=True)
    assert codes == [code]


async def test_a_cancelled_attempt_writes_no_step(app: App) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    outcome: list[str] = []

    async def slow_step() -> str:
        started.set()
        await release.wait()
        return "late"

    @app.job(name="cancelled", tenant="none")
    async def cancelled(ctx: JobContext, payload: None) -> None:
        try:
            await ctx.step.run("slow", slow_step)
        except BaseException as error:
            outcome.append(type(error).__name__)
            raise

    ref = await cancelled.enqueue(None)
    worker = app.worker(visibility_timeout="1s", handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await app.cancel(ref.id)
    for _ in range(200):  # the next heartbeat finds the fence moved and cancels the body
        if outcome:
            break
        await asyncio.sleep(0.02)
    release.set()
    await worker.stop()
    await task
    assert outcome == ["CancelledError"]
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "cancelled" and job.steps == []


async def test_a_step_that_finds_its_lease_gone_raises_lease_lost_and_the_attempt_writes_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The step's own fence is under test: keep the cancel's `beat:` NOTIFY (on the memory driver,
    # its cancel subscriber) from making the worker's heartbeat find the lost claim first (it
    # would cancel the body before the step writes).
    monkeypatch.setattr(listener_module, "WAKE_BEAT", "never-sent:")
    subscribe = MemoryDriver.subscribe

    def without_cancel_wake(self: MemoryDriver, callback: Callable[[], None], **_: object) -> Callable[[], None]:
        return subscribe(self, callback)

    monkeypatch.setattr(MemoryDriver, "subscribe", without_cancel_wake)
    raised: list[BaseException] = []

    @app.job(name="lost", tenant="none")
    async def lost(ctx: JobContext, payload: None) -> str:
        await app.cancel(ctx.id)  # the claim moves before the heartbeat can notice
        try:
            await ctx.step.run("after", lambda: "never stored")
        except LeaseLostError as error:
            raised.append(error)
            raise
        return "unreachable"

    ref = await lost.enqueue(None)
    stats = await app.worker().run(burst=True)
    assert len(raised) == 1 and raised[0].code == "JOB_LEASE_LOST"
    job = await app.get_job(ref.id)
    assert job is not None and job.state == "cancelled" and job.steps == []
    assert stats.lease_lost == 1 and stats.settle_missed == 0


async def test_terminal_error_in_a_step_dead_letters_now(app: App) -> None:
    def declined() -> None:
        raise TerminalError("card declined")

    @app.job(name="declined", tenant="none", retry=Retry(attempts=5, base=0))
    async def job(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("charge", declined, retry=Retry(attempts=3, base=0))

    ref = await job.enqueue(None)
    await app.worker().run(burst=True)
    done = await app.get_job(ref.id)
    assert done is not None and (done.state, done.attempt) == ("dead", 1)
    assert [(s["name"], s["state"], s["error"]["type"]) for s in done.steps] == [("charge", "failed", "TerminalError")]


async def test_steps_need_a_worker_made_context() -> None:
    import logging

    ctx = JobContext(
        id="x", name="n", queue="q", tenant=None, attempt=1, max_attempts=1, worker_id="w", logger=logging.getLogger()
    )
    with pytest.raises(ConfigurationError) as refused:
        _ = ctx.step
    assert refused.value.code == "STEPS_UNAVAILABLE"
