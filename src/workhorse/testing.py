"""Helpers for testing your jobs: run one body inline, list what was enqueued, drain the queue.

- ``await run_job(handle, payload, attempt=..., cancelled=..., cancel_after=...)`` (in a plain
  ``def`` test, ``run_job(...)`` with no await answers the result itself) runs one body
  with a real ``JobContext``: the payload goes through what ``enqueue`` checks (typed payloads,
  the tenant function, JSON) and comes back as a worker would hand it; ``ctx.step`` works on a
  private in-memory step store; the result must be storable JSON, as in a worker. Answers the
  result, or raises what the body raised (``TerminalError``, ``RetryAfter``, your own errors).
  ``run_job_async`` is the coroutine function; ``run_job_sync`` always runs to the end.
- ``await enqueued(app, handle=None)``: every job of the app (of one job when given), oldest first.
- ``await drain(app)``: on the memory driver, run every job until none is left waiting: due jobs
  run on a burst worker; then the driver's clock is moved to the next waiting job's due time (a
  retry's backoff, a delay, a ``ctx.step.sleep``) instead of sleeping, and again. Answers the
  summed ``WorkerStats``.
- ``with memory(app) as clock:`` switches an existing app (declared at import time on Postgres) to
  a fresh memory driver with a ``Clock`` you can ``advance``; the app's own driver comes back after.
  ``App(driver="memory")`` apps need no switch.
- ``with database_guard(allowed):`` refuses (``TEST_APP_UNBOUND``) any App but the ``allowed``
  ones that would reach a database: the plugin's ``app`` fixture runs each test inside it, so a
  job handle of your real App is refused instead of writing to your database.

The memory driver is a test double (``workhorse.drivers.memory``): enqueue, runs with their
retries and dead letters, steps and events, flow control and the reads. Caps ARE enforced there as
on PostgreSQL: ``concurrency=`` (keyed too, ``when_busy="fail"`` included) and every ``limits=``
cap and rate, a job over a cap left ready and unspent. (``drain`` moves the clock only to a
waiting job's due time, so a job a rate holds back stays ready when the round ends.) Flow
control's counts, stats, bulk verbs, pauses, cron leadership, retention, search, the outbox,
webhooks and backfills are refused there with ``POSTGRES_ONLY``: test those on PostgreSQL (the
plugin's ``pg_app``).

The pytest plugin (``workhorse.pytest_plugin``, entry point ``workhorse``) builds fixtures on these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from workhorse.context import JobContext
from workhorse.drivers.base import Driver
from workhorse.drivers.memory import MemoryDriver
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError
from workhorse.jobs import JobHandle
from workhorse.payload import encode_result
from workhorse.steps import Steps
from workhorse.types import Job, StepFence

if TYPE_CHECKING:
    from workhorse.app import App
    from workhorse.worker.records import WorkerStats

WORKER_ID = "workhorse.testing"
MAX_ROUNDS = 10_000  # drain: burst rounds before it gives up (a job that re-enqueues itself forever)
PAGE = 200  # admin.list's largest page


class Clock:
    """A memory driver's clock that moves only when told: ``advance("1h")`` or ``set(datetime)``."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = (start or datetime.now(UTC)).astimezone(UTC)  # clock-ok: the fake clock's start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: Duration) -> datetime:
        self.now += timedelta(seconds=to_seconds(by, what="advance"))
        return self.now

    def set(self, at: datetime) -> datetime:
        if at.utcoffset() is None:
            raise ConfigurationError(cause=f"Clock.set expected an aware datetime, got {at!r}", fix="tzinfo=UTC")
        self.now = max(self.now, at.astimezone(UTC))  # never backwards: leases and run_at assume it
        return self.now


# -- run_job ----------------------------------------------------------------------------------


class _Hooks:
    """The worker's part of a context (``context.RunHooks``): steps on a private store."""

    def __init__(self, ctx: JobContext, store: Driver, fence: StepFence, is_async: bool, draining: bool) -> None:
        self._ctx, self._store, self._fence, self._is_async = ctx, store, fence, is_async
        self._draining = draining

    def make_steps(self) -> Steps:
        return Steps(self._ctx, driver=lambda: self._store, fence=self._fence, is_async=self._is_async)

    def progress_requested(self) -> None:
        """Progress stays on the context (``ctx.take_progress()``); nothing to write."""

    def draining(self) -> bool:
        """What ``ctx.draining`` says: ``run_job(..., draining=True)`` plays a worker's drain."""
        return self._draining


def run_job(handle: JobHandle[Any, Any], payload: Any, **ctx_options: Any) -> Any:
    """Run ``handle``'s body once, inline: ``await run_job(...)`` in async code; called with no
    event loop running (a plain ``def`` test) it runs to the end and answers the result itself.
    Options: see ``run_job_async``."""
    call = run_job_async(handle, payload, **ctx_options)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call)
    return call


async def run_job_async(
    handle: JobHandle[Any, Any],
    payload: Any,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    cancelled: bool | str = False,
    cancel_after: Duration | None = None,
    timeout: Duration | None = None,  # noqa: ASYNC109  # the job's own timeout, as a worker applies it
    draining: bool = False,
) -> Any:
    """Run ``handle``'s body once, inline, and answer its result (or raise what it raised).

        ``attempt``/``max_attempts`` set what ``ctx.attempt`` and ``ctx.is_final_attempt`` say.
        ``cancelled`` starts the attempt cancelled (True, or the reason: ``"timeout"``, ``"lease lost"``);
        ``cancel_after`` cancels it that long after the body starts, as an operator's cancel would (an
        ``async def`` body gets ``CancelledError`` at its next await; a ``def`` body sees
        ``ctx.cancelled``). ``timeout`` (default: the job's own) bounds an ``async def`` body.
    ``draining`` makes ``ctx.draining`` true, as during a worker's drain; a body that then calls
    ``ctx.hand_back()`` raises ``workhorse.context.HandBack`` out of ``run_job``.
    """
    if not isinstance(handle, JobHandle):
        raise ConfigurationError(
            cause=f"run_job expected a declared job (what @app.job answers), got {handle!r}",
            fix="run_job(send_welcome, {'user_id': 7})",
        )
    store = MemoryDriver()
    (ref,) = await store.enqueue_many([handle.build(payload)])
    claim = await store.claim(
        worker_id=WORKER_ID, wants={handle.queue: 1}, names=[handle.name], visibility=365 * 86400.0
    )
    (claimed,) = [c for c in claim.claimed if c.id == ref.id]
    ctx = JobContext(
        id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        tenant=claimed.tenant,
        attempt=attempt,
        max_attempts=max_attempts if max_attempts is not None else max(handle.retry.attempts, attempt),
        worker_id=WORKER_ID,
        logger=handle.logger,
    )
    ctx._hooks = _Hooks(ctx, store, StepFence(claimed.id, WORKER_ID, claimed.claims), handle.is_async, draining)
    if cancelled:
        ctx.mark_cancelled(cancelled if isinstance(cancelled, str) else "cancelled")
    body_payload = handle.body_payload(claimed.payload)
    limit = handle.timeout if timeout is None else to_seconds(timeout, what="timeout", allow_zero=False)
    loop = asyncio.get_running_loop()
    if handle.is_async:
        task = asyncio.ensure_future(handle.fn(ctx, body_payload))

        def cancel() -> None:
            ctx.mark_cancelled("cancelled")
            task.cancel("cancelled")

        timer = None if cancel_after is None else loop.call_later(to_seconds(cancel_after, what="cancel_after"), cancel)
        try:
            value = await (task if limit is None else asyncio.wait_for(task, limit))
        finally:
            if timer is not None:
                timer.cancel()
            ctx.mark_cancelled("finished")
    else:
        timer = (
            None
            if cancel_after is None
            else loop.call_later(to_seconds(cancel_after, what="cancel_after"), ctx.mark_cancelled, "cancelled")
        )
        try:
            value = await asyncio.to_thread(handle.fn, ctx, body_payload)
        finally:
            if timer is not None:
                timer.cancel()
            ctx.mark_cancelled("finished")
    return json.loads(encode_result(value, job=handle.name))  # storable, and as get_job reads it back


def run_job_sync(handle: JobHandle[Any, Any], payload: Any, **ctx_options: Any) -> Any:
    """``run_job`` for a synchronous test (no event loop running)."""
    return asyncio.run(run_job_async(handle, payload, **ctx_options))


# -- enqueued, drain, memory --------------------------------------------------------------------


async def enqueued(app: App, handle: JobHandle[Any, Any] | str | None = None) -> list[Job]:
    """Every job of ``app`` in any state, oldest first; only ``handle``'s (or that name's) when given."""
    name = handle.name if isinstance(handle, JobHandle) else handle
    return (await _every(app, name=name))[::-1]


async def _every(app: App, *, name: str | None = None, state: str | None = None) -> list[Job]:
    """Every matching job, newest first, page by page."""
    jobs: list[Job] = []
    after: str | None = None
    while True:
        page = await app.admin.list(name=name, state=state, limit=PAGE, after=after)
        jobs.extend(page.jobs)
        if page.next is None:
            return jobs
        after = page.next


def clock_of(app: App) -> Clock:
    """The ``Clock`` of a memory app's driver, installed (from the driver's current time) if it has
    another clock."""
    driver = app.driver if app.is_memory else None
    if not isinstance(driver, MemoryDriver):
        raise ConfigurationError(
            code="TESTING_NEEDS_MEMORY",
            cause=f"this app runs on {type(app.driver).__name__ if app.is_memory else 'PostgreSQL'}; drain moves "
            "the memory driver's clock, and PostgreSQL's clock cannot be moved",
            fix="with workhorse.testing.memory(app): ... (or the pytest fixture `app`), "
            "or run a real worker: await app.worker().run(burst=True)",
        )
    current = driver._clock
    if not isinstance(current, Clock):
        current = Clock(current())
        driver._clock = current
    return current


async def drain(app: App, *, advance: bool = True, **worker_options: Any) -> WorkerStats:
    """Run the memory app's jobs until none is waiting, moving its clock instead of sleeping.

    Each round runs a burst worker (``app.worker(**worker_options)``; by default on every declared
    queue and every queue a waiting job was put on with ``enqueue(queue=)``) over
    what is due, then moves the clock to the earliest waiting job's due time. ``advance=False``:
    run only what is due now. A job waiting for an event with no timeout stays waiting."""
    from workhorse.worker.records import WorkerStats

    clock = clock_of(app)
    total = WorkerStats()
    worker_options.setdefault("handle_signals", False)
    chosen = worker_options.pop("queues", None)
    for _ in range(MAX_ROUNDS):
        queues = chosen or await _queues(app)
        if not queues:
            return total  # nothing declared and nothing enqueued
        stats = await app.worker(queues=queues, **worker_options).run(burst=True)
        for key, value in stats.as_dict().items():
            setattr(total, key, getattr(total, key) + value)
        upcoming = await _next_due(app)
        if not advance or upcoming is None:
            return total
        clock.set(upcoming)
    raise ConfigurationError(
        code="DRAIN_ENDLESS",
        cause=f"drain ran {MAX_ROUNDS} rounds and jobs are still waiting (a job that enqueues itself again?)",
        fix="drain(app, advance=False) runs only what is due now",
    )


async def _queues(app: App) -> list[str]:
    """Every declared queue and every queue a waiting job sits on (``enqueue(queue=)``)."""
    waiting = [j.queue for state in ("ready", "delayed", "suspended") for j in await _every(app, state=state)]
    return sorted({h.queue for h in app.jobs.values()} | set(waiting))


async def _next_due(app: App) -> datetime | None:
    """The earliest run_at among the jobs that wait for time (delayed, backing off, sleeping)."""
    times = [j.run_at for state in ("delayed", "suspended") for j in await _every(app, state=state)]
    far = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
    times = [t for t in times if t < far]  # a wait with no timeout
    return min(times) if times else None


@contextlib.contextmanager
def database_guard(allowed: set[App]) -> Iterator[None]:
    """Within the block, an App not in ``allowed`` that would reach a database (not on the memory
    driver) is refused with ``TEST_APP_UNBOUND``, naming where it is declared and how to give it
    to the fixtures. Add to ``allowed`` inside the block (``pg_app`` does)."""
    from workhorse import app as app_module

    def refuse(app: App) -> None:
        if app in allowed:
            return
        where = _declared_at(app)
        spec = where or "myproject.jobs:app"
        raise ConfigurationError(
            code="TEST_APP_UNBOUND",
            cause=f"this test runs on the `app` fixture (a fresh App on the memory driver), but used the App "
            f"{'declared at ' + where if where else '(schema ' + repr(app.schema) + ')'}, which is on a real "
            "database: a job handle (or a call) of that App would write there, not to the test's memory",
            fix=f"point the fixtures at it: workhorse_app = {spec}   # in [pytest] of pytest.ini, or "
            "[tool.pytest.ini_options] of pyproject.toml; or define a `workhorse_app` fixture returning it",
        )

    saved, app_module._database_guard = app_module._database_guard, refuse
    try:
        yield
    finally:
        app_module._database_guard = saved


def _declared_at(app: App) -> str | None:
    """``module:attribute`` of a module-level name bound to ``app`` (as ``--app`` spells it), if any."""
    import sys

    for name, module in list(sys.modules.items()):
        if module is None or name in ("workhorse", "__main__") or name.startswith(("workhorse.", "_")):
            continue
        try:
            found = next((attribute for attribute, value in list(vars(module).items()) if value is app), None)
        except TypeError:  # an object in sys.modules without a __dict__
            continue
        if found is not None:
            return f"{name}:{found}"
    return None


@contextlib.contextmanager
def memory(app: App, *, clock: Clock | None = None) -> Iterator[Clock]:
    """Switch ``app`` to a fresh memory driver (with a movable ``Clock``) for the block; its own
    driver comes back after. For an app declared at import time on PostgreSQL."""
    clock = clock or Clock()
    saved = app._memory
    app._memory = MemoryDriver(clock=clock)
    try:
        yield clock
    finally:
        app._memory = saved
