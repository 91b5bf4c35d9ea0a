"""The rescue of lapsed leases: a running job whose worker stopped renewing its lease (it died, was
killed, froze, lost its network) is recovered whatever the app declares and whoever serves its
queue. River's job rescuer and Oban's Lifeline are the models.

Who recovers what:

* **A claim** re-takes a lapsed job it may run (its queue, a name it knows, the queue not paused,
  its caps' room): the plain claim's and the flow claim's lapsed arms, spending an attempt. An idle
  worker wakes when the next lease of its queues could lapse, so this is within the visibility
  timeout of the lapse.
* **The rescuer** recovers every other one: a paused queue's, a name no live worker knows, a queue
  no live worker serves, a run a full cap keeps from being re-taken. It does what the claim does
  short of running the job: the attempt stays spent and the job goes back ``ready``, due at once
  (the next claim runs attempt + 1); on its final attempt it is buried ``dead`` (``failed``
  without a dead-letter queue) with "the lease lapsed". The same counters move (``lapsed``;
  ``dead``/``failed``), the freed slots of every cap go with the lease (a cap counts running
  rows), and the rescued jobs' queues are woken.

Where the rescuer runs: on the scheduler's leader every fourth round it leads (``LeaseRescue`` below,
once a minute), and on every worker every ``rescue_interval(visibility)`` (twice its visibility
timeout, at most a minute: one statement a minute on an idle worker at the default 30 s), so a
fleet with no leader (no task declared, ``--no-scheduler``, ``--burst``, workers started from code)
rescues too. A worker whose own process's scheduler role leads skips its turns (``skip``): the
leader's rescue stands for it, and that process's idle cost grows by one statement a minute, like
every other worker's. A lapsed job is therefore recovered within one visibility timeout plus one
rescue interval of its worker's death: ``visibility + min(2 x visibility, 60 s)`` at the latest
(90 s at the defaults), sooner where several workers share the turns.

Each turn is ONE statement (``leader/queries.RESCUE``) when nothing lapsed: an index probe. A
batch that comes back full is followed by another, at most MAX_BATCHES a turn. Every write is
fenced on the claim it revokes, so a late settle or renewal of that claim writes nothing, and rows
another statement holds locked (a claim re-taking them) are skipped: any number of rescuers and
claims may run at once. The memory driver has no rescuer (its claim recovers its lapsed leases).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

from workhorse.errors import WorkhorseError
from workhorse.hooks import Hooks
from workhorse.jobs import JobHandle, Outcome, OutcomeKind
from workhorse.leader.store import RoundStore
from workhorse.types import Buried, Rescued

log = logging.getLogger("workhorse.rescue")
scheduler_log = logging.getLogger("workhorse.scheduler")  # the leader's duty logs as its scheduler

RESCUE_BATCH = 100  # lapsed leases one statement recovers at most
MAX_BATCHES = 20  # statements a turn runs at most while batches come back full (the rest: next turn)
MAX_RESCUE_INTERVAL = 60.0  # seconds: a worker's rescue interval, whatever its visibility timeout
ON_SETTLED_TRIES = 3

Rescue = Callable[[int], Awaitable[Rescued]]  # a RescueRole's rescue_lapsed
Announce = Callable[[list[Buried]], None]


def rescue_interval(visibility: float) -> float:
    """How often a worker runs the rescue: twice its visibility timeout, at most a minute (one
    statement a minute on an idle worker with the default 30 s)."""
    return min(2 * visibility, MAX_RESCUE_INTERVAL)


async def rescue_lapsed(rescue: Rescue, *, by: str, announce: Announce) -> int:
    """One turn: rescue batches until one comes back short (at most MAX_BATCHES). Buried jobs go to
    ``announce``; answers how many jobs were rescued. ``by`` names the rescuer in the log."""
    total = 0
    for _ in range(MAX_BATCHES):
        rescued = await rescue(RESCUE_BATCH)
        total += rescued.count
        if rescued.readied:
            log.warning(
                "%s: rescued %d job(s) whose lease lapsed (their worker stopped renewing it: it died or "
                "froze); back to ready, the attempt spent: %s",
                by,
                len(rescued.readied),
                ", ".join(rescued.readied[:5]) + (" ..." if len(rescued.readied) > 5 else ""),
            )
        if rescued.buried:
            announce(rescued.buried)
        if rescued.count < RESCUE_BATCH:
            break
    return total


async def rescue_every(
    rescue: Rescue,
    *,
    every: float,
    by: str,
    announce: Announce,
    skip: Callable[[], bool] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """A worker's rescuer, until cancelled: a turn soon after the start (a fleet restarted after a
    crash recovers at once), then one every ``every`` seconds, each wait jittered (+-10%) so a
    fleet's workers spread out; a turn ``skip()`` answers True for is passed over (the process's
    scheduler leads, and its leader rescues). A failed turn is logged and tried at the next."""
    wait = every * random.uniform(0.0, 0.2)
    while True:
        await sleep(wait)
        wait = every * random.uniform(0.9, 1.1)
        if skip is not None and skip():
            continue
        try:
            await rescue_lapsed(rescue, by=by, announce=announce)
        except WorkhorseError as error:
            log.warning("%s: rescuing lapsed leases failed (%s); trying again in %gs", by, error.cause, every)


def announce_buried(
    rows: list[Buried],
    *,
    role: str,
    by: str,
    jobs: Mapping[str, JobHandle[Any]],
    hooks: Hooks | None,
    call: Callable[[Coroutine[Any, Any, None]], None],
    logger: logging.Logger = log,
) -> None:
    """What a burial of a lapsed final attempt says, whoever buried it (a claim or a rescuer: the
    ``role`` whose id is ``by``): an ERROR line, the lifecycle event (``dead-lettered`` or
    ``failed``, its ``worker_id`` ``by``), and the job's ``on_settled`` (run by ``call`` on the loop
    its caller chose), when the app declares the job."""
    for row in rows:
        logger.error(
            "%s %s: job %s (%s) buried %s: its lease lapsed on its final attempt (%d of %d)",
            role,
            by,
            row.id,
            row.name,
            row.state,
            row.attempt,
            row.max_attempts,
        )
        if hooks:
            hooks.job("dead-lettered" if row.state == "dead" else "failed", by, row, error=row.last_error)
        handle = jobs.get(row.name)
        if handle is None or handle.on_settled is None:
            continue
        kind: OutcomeKind = "dead-lettered" if row.state == "dead" else "dropped"
        outcome = Outcome(
            kind=kind, job_id=row.id, name=row.name, attempt=row.attempt, payload=row.payload, error=row.last_error
        )
        call(on_settled(handle.on_settled, outcome))


async def on_settled(hook: Any, outcome: Outcome) -> None:
    """Call a job's ``on_settled`` hook, up to ON_SETTLED_TRIES times while it raises."""
    for attempt in range(1, ON_SETTLED_TRIES + 1):
        try:
            value = hook(outcome)
            if asyncio.iscoroutine(value):
                await value
        except Exception:
            log.exception("on_settled of %s failed (try %d of %d)", outcome.name, attempt, ON_SETTLED_TRIES)
            await asyncio.sleep(0.05 * attempt)
        else:
            return


def spawn_on(loop: asyncio.AbstractEventLoop | None = None) -> Callable[[Coroutine[Any, Any, None]], None]:
    """``announce_buried``'s ``call`` for code already on ``loop`` (default: the running one): each
    hook runs as a task of its own, kept until it ends."""
    tasks: set[asyncio.Task[None]] = set()

    def call(coroutine: Coroutine[Any, Any, None]) -> None:
        task = (loop or asyncio.get_running_loop()).create_task(coroutine)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return call


# -- the leader's duty -----------------------------------------------------------------------------
# The fleet's leader rescues after a round it leads, at most once per ``every`` seconds of the
# database clock (four times the scheduler's ``interval``: every fourth round, once a minute by
# default; one statement when nothing lapsed, so an idle leader's 4 rounds and its rescue stay
# within its budget of 6 a minute). Every worker rescues too, at its own cadence (a worker beside
# the leading role skips its turns: this duty stands for them); a process whose app declares no
# task stands for no election and leaves the rescue to its workers. The duty catches its own
# errors: a failed rescue is logged and tried after the next round, and never counts as a failed
# round (it must not cost the leadership).

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
            scheduler_log.warning(
                "%s: rescuing lapsed leases failed (%s); tried again after the next round", by, error.cause
            )
