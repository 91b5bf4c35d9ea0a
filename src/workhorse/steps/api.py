"""Durable steps: ``ctx.step.run``, ``sleep``, ``sleep_until`` and ``wait_for_event``.

A job body becomes a workflow by naming its units of work::

    charge = await ctx.step.run("charge", charge_card, order["id"])   # stored before it returns
    await ctx.step.sleep("cool-off", "1h")                           # suspends: no worker, no attempt
    shipped = await ctx.step.wait_for_event("shipped", "order.shipped", key=order["id"], timeout="7d")

How it works:

- **Replay by name.** A run reads every recorded step of its job with ONE query the first time it
  steps. A step recorded ``done`` answers its stored result without calling its function again, so
  a run that crashed, retried or resumed after a suspension continues where it left off. Step
  names are the replay key: a second step of the same name in one run is refused
  (``STEP_DUPLICATE``), never overwritten, and a run that reaches a recorded position under a
  different name (its code changed mid-flight) is parked (``STEP_REPLAY_MISMATCH``).
- **Fenced writes.** Each result is written before ``run`` returns, in a statement fenced on the
  run's claim: an attempt that was cancelled, or whose lease another worker took over, writes no
  step (``LeaseLostError`` inside the body).
- **Suspension is control flow.** ``sleep`` and a wait with nothing to answer it yet record the
  step AND suspend the job in one statement (state ``suspended`` until due, attempt given back),
  then end the body by raising ``StepSuspension`` — a ``BaseException``, so an ``except Exception``
  in the body does not swallow it. The worker's slot frees at once; a later claim resumes the run.
- **One clock.** Sleep ends, wait starts, deadlines and event times are the database's clock.

Steps need an ``async def`` body: a plain ``def`` body runs in a thread that cannot await them.
A step's function may be sync (run in a thread) or async.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, overload

from workhorse.drivers.base import Driver
from workhorse.durations import Duration, bounded_seconds, check_not_too_late, to_seconds
from workhorse.errors import (
    ConfigurationError,
    JobCancelledError,
    LeaseLostError,
    PayloadError,
    RetryAfter,
    StepDuplicateError,
    StepError,
    StepReplayError,
    StepResultError,
    StepTimeoutError,
    TerminalError,
)
from workhorse.failures import error_json
from workhorse.payload import DEFAULT_MAX_BYTES, encode
from workhorse.retry import Retry
from workhorse.steps.events import DEFAULT_TTL, check_event_key, check_event_name
from workhorse.storable import flaw
from workhorse.types import StepAnswer, StepFence, StepRecord

T = TypeVar("T")
MAX_STEP_NAME = 200
DEFAULT_WAIT_TIMEOUT: Duration = DEFAULT_TTL


class StepSuspension(BaseException):
    """Raised by ``sleep``/``wait_for_event`` once the job is suspended; the worker frees the slot.

    Control flow, not a failure: the job row is already ``suspended`` (written, fenced, with the
    step), so the executor writes nothing more, logs no error and spends no attempt. Do not catch
    it; if a body does, whatever it returns afterwards is never written (the claim is gone).
    """

    def __init__(self, step: str, answer: StepAnswer) -> None:
        until = "" if answer.wake_at is None else f" until {answer.wake_at.isoformat()}"
        super().__init__(f"the run suspended at step {step!r} ({answer.state}){until}")
        self.step = step
        self.state = answer.state
        self.wake_at = answer.wake_at


class StepContext(Protocol):
    """What the steps of a run need of its context (a ``JobContext``): the job's name and logger,
    its cancellation, and the flag that tells the heartbeat a suspending statement is in flight."""

    name: str
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    _releasing: bool

    @property
    def cancelled(self) -> bool: ...

    def raise_if_cancelled(self) -> None: ...

    def mark_cancelled(self, reason: str) -> None: ...

    def extra(self) -> dict[str, Any]: ...


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME or flaw(name):
        raise ConfigurationError(
            code="STEP_NAME_INVALID",
            cause=f"a step name must be a non-empty string of at most {MAX_STEP_NAME} characters PostgreSQL can "
            f"store (no NUL, no lone surrogate), got {name!r}",
            fix="await ctx.step.run('charge-card', charge, order_id)",
        )
    return name


class Steps:
    """``ctx.step``: the durable-step API of one run. Made by the worker for each claimed attempt."""

    def __init__(
        self,
        ctx: StepContext,
        *,
        driver: Callable[[], Driver],
        fence: StepFence,
        is_async: bool,
        max_result_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._ctx = ctx
        self._driver = driver
        self._fence = fence
        self._is_async = is_async
        self._max_bytes = max_result_bytes
        self._used: set[str] = set()
        self._positions = itertools.count()
        self._recorded: dict[str, StepRecord] | None = None
        self._by_position: dict[int, set[str]] = {}
        self._hydrating = asyncio.Lock()

    # -- the public API ---------------------------------------------------------------------------

    @overload
    def run(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def run(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]: ...

    def run(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """Run ``fn(*args, **kwargs)`` once for this job, durably: its JSON result is stored before
        this returns, and every later run of the job answers it from the store without calling ``fn``.

        ``retry=Retry(...)`` retries the function within the attempt before the step counts as
        failed; ``timeout=`` bounds each call. A step that still fails is recorded ``failed`` and its
        exception fails the attempt (retried per the job's policy; the next run calls it again).
        ``retry`` and ``timeout`` are taken by the step: pass a function that needs arguments of
        those names through ``functools.partial``.
        """
        position = self._claim(name)
        if not callable(fn):
            raise ConfigurationError(
                code="STEP_FUNCTION_INVALID",
                cause=f"step {name!r}: expected a function to call, got {fn!r}",
                fix=f"await ctx.step.run({name!r}, charge_card, order_id)   # the function, then its arguments",
            )
        if retry is not None and not isinstance(retry, Retry):
            raise ConfigurationError(
                cause=f"step {name!r}: retry expected a workhorse.Retry, got {retry!r}",
                fix=f"await ctx.step.run({name!r}, fn, retry=Retry(attempts=3, base='1s'))",
            )
        seconds = None if timeout is None else to_seconds(timeout, what=f"timeout of step {name!r}", allow_zero=False)
        return self._run(name, position, fn, args, kwargs, retry=retry, limit=seconds)

    def sleep(self, name: str, duration: Duration) -> Coroutine[Any, Any, None]:
        """Suspend the job for ``duration`` (the database's clock): the row leaves the worker, no
        attempt is spent, no slot is held; the run resumes after it, replaying earlier steps."""
        position = self._claim(name)
        seconds = bounded_seconds(
            duration,
            what=f"duration of step {name!r}",
            code="DELAY_TOO_LONG",
            fix=f"await ctx.step.sleep({name!r}, '30d')   # at most 36525 days",
        )
        return self._sleep(name, position, delay=seconds, until=None)

    def sleep_until(self, name: str, when: datetime) -> Coroutine[Any, Any, None]:
        """Suspend the job until ``when`` (a timezone-aware datetime); a time already past returns at once."""
        position = self._claim(name)
        if not isinstance(when, datetime) or when.utcoffset() is None:
            raise ConfigurationError(
                cause=f"step {name!r}: sleep_until expected a timezone-aware datetime, got {when!r}",
                fix=f"await ctx.step.sleep_until({name!r}, datetime(2030, 1, 1, 9, 0, tzinfo=UTC))",
            )
        check_not_too_late(when, what=f"sleep_until of step {name!r}", fix="sleep until a time within 100 years of now")
        return self._sleep(name, position, delay=None, until=when)

    def wait_for_event(
        self, name: str, event: str, key: str | None = None, timeout: Duration = DEFAULT_WAIT_TIMEOUT
    ) -> Coroutine[Any, Any, Any]:
        """Suspend until an event named ``event`` with this ``key`` (None: published without a key)
        is published at or after the wait began, and answer its payload; None once ``timeout``
        passes. The wait begins when a run first reaches this step; events are stored, so one
        published while the job was suspended, queued or between workers is still seen."""
        position = self._claim(name)
        event = check_event_name(event)
        key = check_event_key(key)
        seconds = bounded_seconds(
            timeout,
            what=f"timeout of step {name!r}",
            code="DELAY_TOO_LONG",
            fix=f"ctx.step.wait_for_event({name!r}, ..., timeout='30d')   # at most 36525 days",
        )
        return self._wait(name, position, event, key, within=seconds)

    # -- bookkeeping --------------------------------------------------------------------------------

    def _claim(self, name: str) -> int:
        """Take ``name`` for this run (synchronously, at call time) and answer its position."""
        name = _check_name(name)
        if not self._is_async:
            error = StepError(
                code="STEPS_NEED_ASYNC",
                cause=f"job {self._ctx.name!r} is a plain def body, which runs in a thread and cannot await "
                f"step {name!r}",
                fix=f"declare {self._ctx.name!r} with async def to use ctx.step; plain functions can still be "
                "steps: await ctx.step.run('name', some_sync_function)",
            )
            error.terminal = True
            raise error
        if name in self._used:
            raise StepDuplicateError(self._ctx.name, name)
        self._used.add(name)
        return next(self._positions)

    async def _hydrate(self) -> dict[str, StepRecord]:
        """Every recorded step of the job, read ONCE per run (concurrent first steps share the read)."""
        if self._recorded is None:
            async with self._hydrating:
                if self._recorded is None:
                    records = await self._driver().list_steps(self._fence.job_id)
                    for record in records:
                        if record.state != "failed":  # a failed step carries no result to misapply
                            self._by_position.setdefault(record.seq, set()).add(record.name)
                    self._recorded = {record.name: record for record in records}
        return self._recorded

    async def _replayed(self, name: str, position: int) -> StepRecord | None:
        """The step's record when it is done (replay it), after checking the run still calls its
        recorded steps in order; None when it must run."""
        recorded = await self._hydrate()
        there = self._by_position.get(position)
        if there and name not in there:
            raise StepReplayError(self._ctx.name, self._fence.job_id, position, sorted(there)[0], name)
        found = recorded.get(name)
        if found is not None and found.state == "done":
            self._ctx.logger.debug("step %r replayed from the store", name, extra=self._ctx.extra())
            return found
        self._ctx.raise_if_cancelled()
        return None

    def _lost(self) -> LeaseLostError:
        self._ctx.mark_cancelled("lease lost")
        return LeaseLostError(self._ctx.name, self._fence.job_id)

    # -- run --------------------------------------------------------------------------------------

    async def _run(
        self,
        name: str,
        position: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retry: Retry | None,
        limit: float | None,
    ) -> Any:
        found = await self._replayed(name, position)
        if found is not None:
            return found.result
        began = time.monotonic()
        try:
            value = await self._call(name, fn, args, kwargs, retry=retry, limit=limit)
            encoded = self._encode(name, value)
        except Exception as error:
            if not self._ctx.cancelled:  # a cancelled runner writes nothing, not even its failure
                await self._put(
                    name,
                    position,
                    state="failed",
                    result=None,
                    error=error_json(error),  # the same shape as a job's last_error
                    elapsed=time.monotonic() - began,
                    cause=error,
                )
            raise
        self._ctx.raise_if_cancelled()
        await self._put(
            name, position, state="done", result=encoded, error=None, elapsed=time.monotonic() - began, cause=None
        )
        return json.loads(encoded)  # what a replay answers: a tuple comes back a list, every time

    async def _call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retry: Retry | None,
        limit: float | None,
    ) -> Any:
        tries = 1 if retry is None else retry.attempts
        for number in itertools.count(1):
            try:
                return await self._once(name, fn, args, kwargs, limit)
            except (TerminalError, RetryAfter, JobCancelledError, LeaseLostError):
                raise  # the job's own signals: never retried inside the step
            except Exception as error:
                if retry is None or number >= tries:
                    raise
                delay = retry.backoff(number)
                self._ctx.logger.warning(
                    "step %r failed (try %d of %d): %s: %s; retrying in %.2fs",
                    name,
                    number,
                    tries,
                    type(error).__name__,
                    error,
                    delay,
                    extra=self._ctx.extra(),
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], limit: float | None
    ) -> Any:
        if limit is None:
            return await _invoke(fn, args, kwargs)
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                return await _invoke(fn, args, kwargs)
        except TimeoutError:
            if deadline.expired():
                raise StepTimeoutError(name, limit) from None
            raise

    def _encode(self, name: str, value: Any) -> str:
        try:
            return encode(value, max_bytes=self._max_bytes, what=f"the result of step {name!r}")
        except PayloadError as error:
            raise StepResultError(
                cause=f"step {name!r} of job {self._ctx.name!r} returned a value that cannot be stored: {error.cause}",
                fix=f"return JSON-compatible data from step {name!r} ({error.fix})",
            ) from None

    async def _put(
        self,
        name: str,
        position: int,
        *,
        state: Literal["done", "failed"],
        result: str | None,
        error: str | None,
        elapsed: float,
        cause: BaseException | None,
    ) -> None:
        landed = await self._driver().put_step(
            self._fence, name=name, seq=position, state=state, result=result, error=error, elapsed=elapsed
        )
        if not landed:
            raise self._lost() from cause

    # -- suspension -------------------------------------------------------------------------------

    async def _sleep(self, name: str, position: int, *, delay: float | None, until: datetime | None) -> None:
        if await self._replayed(name, position) is not None:
            return
        answer = await self._suspending(
            self._driver().sleep_step(self._fence, name=name, seq=position, delay=delay, until=until)
        )
        if answer.state != "done":
            self._ctx.logger.info("suspended by step %r until %s", name, answer.wake_at, extra=self._ctx.extra())
            raise StepSuspension(name, answer)

    async def _wait(self, name: str, position: int, event: str, key: str | None, *, within: float) -> Any:
        found = await self._replayed(name, position)
        if found is not None:
            return found.result
        answer = await self._suspending(
            self._driver().wait_step(self._fence, name=name, seq=position, event=event, key=key, within=within)
        )
        if answer.state != "done":
            self._ctx.logger.info(
                "suspended by step %r waiting for %r (key %r) until %s",
                name,
                event,
                key,
                answer.wake_at,
                extra=self._ctx.extra(),
            )
            raise StepSuspension(name, answer)
        return answer.result

    async def _suspending(self, statement: Awaitable[StepAnswer | None]) -> StepAnswer:
        """Run a statement that may suspend the job. While it runs the lease may vanish under the
        worker's heartbeat because WE released it: ``ctx`` says so, so that is not reported lost."""
        self._ctx._releasing = True
        answer: StepAnswer | None = None
        try:
            answer = await statement
        finally:
            if answer is None or answer.state == "done":
                self._ctx._releasing = False
        if answer is None:
            raise self._lost()
        return answer


async def _invoke(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call a step's function: async on this loop, sync in a thread (a slow one never blocks the loop)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
        value = await fn(*args, **kwargs)
    else:
        value = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value
