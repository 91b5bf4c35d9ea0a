"""One claimed job, run on the body loop: the body, its deadline, and the verdict it earns.

A deadline CANCELS the body first, then fails the attempt. An async body is cancelled at its next
await; a sync body runs in the worker's thread pool, is told through ``ctx.cancelled``, and keeps
its slot until its thread returns — whatever it returns after its deadline is never written.

A run that suspends itself (``ctx.step.sleep``, ``ctx.step.wait_for_event``) has already written
its row ``suspended`` in the step's own fenced statement; its verdict writes nothing more. A step
write that finds the claim gone (``LeaseLostError``) ends the attempt with nothing written.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from workhorse.context import HandBack, JobContext
from workhorse.errors import JobCancelledError, LeaseLostError, PayloadError, StepError
from workhorse.failures import error_json
from workhorse.jobs import JobHandle
from workhorse.payload import encode_result
from workhorse.retry import Decision, decide
from workhorse.steps import StepSuspension
from workhorse.tracing import attempt_span
from workhorse.types import Claimed, Outcome

log = logging.getLogger("workhorse.worker")


# Why a run went back unspent, as `show` and the dashboard print it (jobs.handed_back.reason).
CUT_OFF = "its worker drained and the run did not end within the drain timeout: cancelled, handed back"
HANDED_ITSELF_BACK = "its worker drained and the body handed itself back (ctx.hand_back())"
NOT_STARTED = "claimed ahead by a worker that drained before starting it"


@dataclass(slots=True)
class Verdict:
    """What the worker settles for one attempt. ``outcome`` None: write nothing (lease lost, cancelled,
    or ``suspended``: the step statement already moved the row)."""

    outcome: Outcome | None
    result: str | None = None
    error: str | None = None
    delay: float = 0.0
    result_value: Any = None
    suspended: bool = False
    reason: str | None = None  # "interrupted": why it goes back (kept on the job: jobs.handed_back)


@dataclass(slots=True)
class Run:
    """One attempt in flight. The control thread cancels it through ``cancel``."""

    claimed: Claimed
    handle: JobHandle[Any]
    ctx: JobContext
    task: asyncio.Task[Any] | None = None
    thread_done: asyncio.Future[Any] | None = None
    started: float = 0.0
    ended: float = 0.0  # time.monotonic() when the body's verdict came back (0: it never ran)
    reasons: list[str] = field(default_factory=list)

    def cancel(self, reason: str) -> None:
        """Cancel the attempt (call on the body loop). The first reason wins."""
        self.ctx.mark_cancelled(reason)
        if not self.reasons:
            self.reasons.append(reason)
        if self.task is not None and not self.task.done():
            self.task.cancel(reason)


class DeadlinePassed(Exception):
    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(f"job {name!r} ran past its timeout of {seconds:g}s and was cancelled")


async def execute(
    run: Run, pool: Executor, on_thread_exit: Callable[[], None], lease_open: Callable[[], bool]
) -> Verdict:
    """Run the body and decide its verdict. Never raises (but for the loop's own CancelledError).

    The body is not started at all when the run was cancelled before its turn came (an operator's
    cancel, a lease found lost, a drain's cut-off) or when ``lease_open`` says its lease window
    is (nearly) closed by this process's clock: a run claimed ahead by a process that was then
    frozen (SIGSTOP, a GC pause, a VM migration, a laptop's sleep) may be another worker's by
    now. A sync body's thread asks ``lease_open`` again before it calls the body. Its verdict is
    the cancel's (nothing written; a drain's hands it back unspent)."""
    handle, ctx = run.handle, run.ctx
    if not run.reasons and not lease_open():
        run.cancel("lease lost")
    if run.reasons:
        if not handle.is_async:
            on_thread_exit()  # no thread was started: its slot is free now
        ctx.mark_cancelled("finished")
        return _cancelled_verdict(run)  # a timeout cannot come first: its timer starts with the body
    try:
        payload = handle.body_payload(run.claimed.payload)  # a typed body's payload (workhorse.typed)
    except PayloadError as error:  # a stored payload that no longer fits never will: end it now
        if not handle.is_async:
            on_thread_exit()
        ctx.mark_cancelled("finished")
        return _failure(run, error, terminal=True)
    if log.isEnabledFor(logging.DEBUG):
        c = run.claimed
        log.debug(
            "job %s %s started (queue %s, attempt %d)", c.id, c.name, c.queue, c.attempt,
            extra={"job_id": c.id, "job": c.name, "queue": c.queue, "attempt": c.attempt, "worker_id": ctx.worker_id},
        )  # fmt: skip
    try:
        c = run.claimed
        with attempt_span(c.name, c.id, c.queue, c.attempt, c.traceparent):  # nothing without OpenTelemetry
            value = await _call(run, pool, on_thread_exit, lease_open, payload)
        if run.reasons:  # a cancel landed but the body swallowed it and returned
            return _cancelled_verdict(run)
        try:
            encoded = encode_result(value, job=handle.name)
        except PayloadError as error:
            # The same value would fail the same way on every attempt, after the body's side
            # effects ran again: end the job now (dead-lettered, or failed without dead letters).
            return _failure(run, error, terminal=True)
        return Verdict("done", result=encoded, result_value=value)
    except StepSuspension:
        return Verdict(None, suspended=True)  # control flow: the row is already suspended
    except asyncio.CancelledError:
        if run.reasons:
            return _cancelled_verdict(run)
        raise
    except JobCancelledError:
        return _cancelled_verdict(run)
    except HandBack:  # ctx.hand_back() during a drain: back ready, unspent, like the cut-off's
        if not run.reasons:
            run.reasons.append("hand back")
        return _cancelled_verdict(run)
    except (LeaseLostError, NotStarted):
        if not run.reasons:  # a fenced step write found the claim gone before the heartbeat did,
            run.reasons.append("lease lost")  # or the pool's thread took the call past the window
        return _cancelled_verdict(run)
    except Exception as error:
        if run.reasons and run.reasons[0] != "timeout":
            return _cancelled_verdict(run)
        return _failure(run, error)
    finally:
        ctx.mark_cancelled("finished")  # a sync body still polling learns the attempt is over


def _cancelled_verdict(run: Run) -> Verdict:
    reason = run.reasons[0] if run.reasons else "cancelled"
    if reason == "timeout":
        assert run.handle.timeout is not None
        return _failure(run, DeadlinePassed(run.handle.name, run.handle.timeout))
    if reason == "drain":
        return Verdict("interrupted", reason=CUT_OFF)
    if reason == "hand back":
        return Verdict("interrupted", reason=HANDED_ITSELF_BACK)
    return Verdict(None)  # lease lost or cancelled by an operator: the row is not ours to write


def _failure(run: Run, error: BaseException, *, terminal: bool = False) -> Verdict:
    if terminal or (isinstance(error, StepError) and error.terminal):  # retrying cannot help
        decision = Decision("dead" if run.handle.retry.dead_letter else "failed")
    else:
        decision = decide(run.handle.retry, run.claimed.attempt, error)
    outcome: Outcome = "retry" if decision.verdict == "retry" else decision.verdict
    return Verdict(outcome, error=error_json(error), delay=decision.delay)


class NotStarted(Exception):
    """The pool's thread took a sync body's call once its lease window had closed: not run."""


def _on_thread(fn: Callable[..., Any], lease_open: Callable[[], bool], ctx: JobContext, payload: Any) -> Any:
    if not lease_open():  # checked again where the body runs: a frozen process's pool takes calls late
        raise NotStarted
    return fn(ctx, payload)


async def _call(
    run: Run, pool: Executor, on_thread_exit: Callable[[], None], lease_open: Callable[[], bool], payload: Any
) -> Any:
    handle, ctx = run.handle, run.ctx
    loop = asyncio.get_running_loop()
    if handle.is_async:
        run.task = asyncio.current_task()
        if handle.timeout is None:
            return await handle.fn(ctx, payload)
        deadline = loop.call_later(handle.timeout, run.cancel, "timeout")
        try:
            return await handle.fn(ctx, payload)
        finally:
            deadline.cancel()
    # The thread runs in a copy of this task's context (as asyncio.to_thread does): the attempt's
    # tracing span, and any context variable a hook or middleware set, are current in a def body too.
    context = contextvars.copy_context()
    future = loop.run_in_executor(pool, context.run, _on_thread, handle.fn, lease_open, ctx, payload)
    run.thread_done = future
    future.add_done_callback(lambda _f: on_thread_exit())
    run.task = None
    waiter = asyncio.ensure_future(asyncio.shield(future))
    run.task = waiter  # cancelling the waiter never touches the thread; ctx.cancelled tells it
    timer = loop.call_later(handle.timeout, run.cancel, "timeout") if handle.timeout is not None else None
    try:
        return await waiter
    finally:
        if timer is not None:
            timer.cancel()
