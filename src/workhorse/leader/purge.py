"""The retention duty: the fleet's leader purges what the app's retention policy says has aged
out (``workhorse.retention``), at most once per ``Retention.every`` of the database clock.

The purge runs beside the rounds, never inside one: a purge of millions of rows takes minutes,
and a round held up that long would let the lease lapse. A purge still running when the next one
is due is left to finish; one that fails is logged and tried at the next due time (it removes
each row once, whoever runs it, so a retry or a second purger is harmless). A process whose app
declares no task stands for no election, and purges on its own clock instead (``purge_every``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from workhorse.errors import WorkhorseError
from workhorse.leader.store import RoundStore
from workhorse.retention.policy import PurgeReport, Retention

log = logging.getLogger("workhorse.scheduler")


class Purger(Protocol):
    """What the duty needs of ``app.admin``."""

    async def purge(self, *, dry_run: bool = False) -> PurgeReport: ...


class RetentionPurge:
    """A ``Duty``: start a purge when one is due on the database clock and none is running."""

    def __init__(self, scheduler_id: str, retention: Callable[[], Retention | None], purger: Purger) -> None:
        self.scheduler_id = scheduler_id
        self.retention = retention  # read at each round: the app's policy as it is now
        self.purger = purger
        self._last: datetime | None = None
        self._task: asyncio.Task[None] | None = None

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        retention = self.retention()
        if retention is None or (self._task is not None and not self._task.done()):
            return
        if self._last is not None and (db_now - self._last).total_seconds() < retention.every:
            return
        self._last = db_now
        self._task = asyncio.create_task(purge_once(self.scheduler_id, self.purger), name="retention-purge")

    async def close(self) -> None:
        """Stop a purge in flight (each batch is its own transaction: nothing is left half done)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def purge_once(scheduler_id: str, purger: Purger) -> None:
    try:
        report = await purger.purge()
    except WorkhorseError as error:
        log.warning(
            "scheduler %s: the retention purge failed (%s); it runs again when next due", scheduler_id, error.cause
        )
        return
    if report.total:
        removed = ", ".join(f"{target} {n}" for target, n in sorted(report.removed.items()) if n)
        log.info("scheduler %s: purged %s (and %d steps)", scheduler_id, removed, report.steps)


FIRST_PURGE = 60.0  # an idle role's first purge comes within this many seconds of its start


async def purge_every(
    scheduler_id: str, retention: Callable[[], Retention | None], purger: Purger, stopping: asyncio.Event
) -> None:
    """With no task there is no election: every idle role purges soon after it starts (within
    FIRST_PURGE, so a fleet restarted more often than ``every`` still purges), then once per
    ``every``, each wait jittered so a fleet's idle roles spread out, until ``stopping`` is set."""
    wait = FIRST_PURGE * random.uniform(0.1, 1.0)
    while True:
        policy = retention()
        if policy is not None:
            wait = min(wait, policy.every)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=wait)
            return
        if retention() is not None:
            await purge_once(scheduler_id, purger)
        policy = retention()
        wait = (policy.every if policy is not None else FIRST_PURGE) * random.uniform(0.9, 1.1)
