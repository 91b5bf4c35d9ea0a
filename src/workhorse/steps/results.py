"""``await app.wait(ref, timeout=...)``: the finished job, without hand-written polling.

Answers the job once it is ``done``, ``failed``, ``dead`` or ``cancelled`` (read ``job.result``,
``job.last_error``); raises ``WAIT_TIMEOUT`` when ``timeout`` passes first (the job is untouched:
it keeps running) and ``JOB_NOT_FOUND`` for an id with no job (or one removed meanwhile).

It waits on the settle's wake-up, not in a tight loop: on PostgreSQL a LISTEN session on the
settled channel (``drivers/settled.py``: SETTLE_MANY notifies the ids of the runs it finished),
on the memory driver a subscription to its settles. NOTIFY is a hint: the job is also re-read
every ``POLL`` seconds, which is how an operator's cancel, a burial by the claim or a notification
queue over half full are seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from workhorse.durations import Duration, to_seconds
from workhorse.errors import JobNotFoundError, WorkhorseError
from workhorse.types import Job, JobRef

if TYPE_CHECKING:
    from workhorse._ports import DriverSource

FINAL = frozenset({"done", "failed", "dead", "cancelled"})
POLL = 5.0  # seconds between re-reads when no wake-up came


class WaitTimeoutError(WorkhorseError):
    code = "WAIT_TIMEOUT"


async def wait(app: DriverSource, ref: JobRef | str, *, timeout: Duration | None = None) -> Job:  # noqa: ASYNC109
    """The job of ``ref`` (a ``JobRef`` or an id) once it finished; see the module."""
    job_id = ref.id if isinstance(ref, JobRef) else ref
    limit = None if timeout is None else to_seconds(timeout, what="timeout")
    deadline = None if limit is None else time.monotonic() + limit
    woke = asyncio.Event()
    close = await _subscribe(app, job_id, woke)
    try:
        while True:
            woke.clear()  # before the read: a settle after it sets the event again
            job = await app.driver.get_job(job_id)
            if job is None:
                raise JobNotFoundError(job_id)
            if job.state in FINAL:
                return job
            left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if left <= 0:
                raise WaitTimeoutError(
                    cause=f"job {job_id} ({job.name}) is still {job.state} after {limit:g}s",
                    fix="wait longer (timeout=...), or look at it: workhorse show " + job_id,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woke.wait(), left)
    finally:
        await close()


async def _subscribe(app: DriverSource, job_id: str, woke: asyncio.Event) -> Callable[[], Awaitable[None]]:
    driver = app.driver
    loop = asyncio.get_running_loop()
    subscribe = getattr(driver, "subscribe_settled", None)
    if subscribe is not None:  # the memory driver: its settles call back, from any thread
        unsubscribe = subscribe(lambda: loop.call_soon_threadsafe(woke.set))

        async def close() -> None:
            unsubscribe()

        return close
    from workhorse.drivers.postgres_core import PostgresCore

    if isinstance(driver, PostgresCore):
        from workhorse.drivers.settled import listen_settled

        return await listen_settled(driver.url, driver.schema, job_id, woke)

    async def nothing() -> None:  # a driver of your own: the poll alone
        return None

    return nothing
