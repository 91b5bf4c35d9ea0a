"""The rescue duty: the fleet's leader recovers lapsed leases (``workhorse.rescue``) after a round
it leads, at most once per ``every`` seconds of the database clock (four times the scheduler's
``interval``: every fourth round, once a minute by default; one statement when nothing lapsed, so
an idle leader's 4 rounds and its rescue stay within its budget of 6 a minute).

Every worker rescues too, at its own cadence (a worker beside the leading role skips its turns:
this duty stands for them); a process whose app declares no task stands for no election and
leaves the rescue to its workers. The duty catches its own errors: a failed rescue is logged and tried after the next
round, and never counts as a failed round (it must not cost the leadership).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from workhorse.errors import WorkhorseError
from workhorse.hooks import Hooks
from workhorse.jobs import JobHandle
from workhorse.rescue import announce_buried, rescue_lapsed, spawn_on
from workhorse.scheduler.store import RoundStore

log = logging.getLogger("workhorse.scheduler")

EVERY_SHARE = 0.8  # of `every`: a round a little early still rescues (rounds are not evenly spaced)


class LeaseRescue:
    """A ``Duty``: rescue lapsed leases through the store's driver; announce what it buried with the
    app's hooks and each job's ``on_settled``, on the scheduler's loop."""

    def __init__(
        self, scheduler_id: str, *, every: float, jobs: Mapping[str, JobHandle[Any]], hooks: Hooks | None
    ) -> None:
        self.scheduler_id = scheduler_id
        self.every = every
        self.jobs = jobs
        self.hooks = hooks
        self.rescued = 0  # jobs this duty rescued, for tests and logs
        self._last: datetime | None = None
        self._spawn = spawn_on()  # on_settled hooks run as tasks of the scheduler's loop, kept here

    async def after_round(self, store: RoundStore, db_now: datetime) -> None:
        if self._last is not None and (db_now - self._last).total_seconds() < self.every * EVERY_SHARE:
            return
        self._last = db_now
        by = f"scheduler {self.scheduler_id}"
        try:
            self.rescued += await rescue_lapsed(
                store.rescue,
                by=by,
                announce=lambda rows: announce_buried(
                    rows, role="scheduler", by=self.scheduler_id, jobs=self.jobs, hooks=self.hooks, call=self._spawn
                ),
            )
        except WorkhorseError as error:
            log.warning("%s: rescuing lapsed leases failed (%s); tried again after the next round", by, error.cause)
