"""The counter folds: minute counters older than two hours become hours, hours older than two
days become days (``Driver.rollup_counters``, one delete-and-insert statement per tier, so a fold
never counts twice whoever runs it).

The leader folds at most once an hour of the database clock (``CounterFolds``, a ``Duty``); a
process whose app declares no task stands for no election, and folds once an hour on its own
instead (``fold_hourly``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime

from workhorse.errors import WorkhorseError
from workhorse.leader.store import RoundStore

log = logging.getLogger("workhorse.scheduler")

FOLD_INTERVAL = 3600.0  # seconds between counter folds by an idle (task-less) scheduler role


class CounterFolds:
    """The leader's fold, at most once an hour of the database clock (leading just keeps it to
    one process; the fold itself is safe from any number)."""

    def __init__(self, scheduler_id: str) -> None:
        self.scheduler_id = scheduler_id
        self._folded_hour: datetime | None = None

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        hour = db_now.replace(minute=0, second=0, microsecond=0)
        if hour != self._folded_hour:
            self._folded_hour = hour
            folded = await store.rollup()
            if folded:
                log.info("scheduler %s: folded %d counter bucket(s) into hours and days", self.scheduler_id, folded)


async def fold_hourly(scheduler_id: str, rollup: Callable[[], Awaitable[int]], stopping: asyncio.Event) -> None:
    """With no task there is no election, and every idle role folds the counters once an hour
    instead (the fold is exactly-once whoever runs it), until ``stopping`` is set."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=FOLD_INTERVAL * random.uniform(0.9, 1.1))
            return
        try:
            await rollup()
        except WorkhorseError as error:
            log.warning("scheduler %s: folding counters failed (%s)", scheduler_id, error.cause)
