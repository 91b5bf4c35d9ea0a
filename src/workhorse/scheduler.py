"""The scheduler role: one leader across the fleet fires the app's cron tasks.

Every process running the role (``workhorse worker`` unless ``--no-scheduler``, or
``workhorse scheduler``) runs ROUNDS, one at a time, each ONE statement (``_db/queries/scheduler``):

* it renews the lease row ``{schema}.leaders`` when this process holds it, or takes it when it is
  free or has lapsed (a new epoch). Never a session advisory lock: a pool would hand that lock's
  connection to someone else and every node would believe it leads;
* as the holder, it fires what the previous round planned: per due task, the task's watermark
  moves to the occurrence and its job is inserted, together, fenced by the lease epoch the plan
  was made under and by the watermark it was made from. A crash, a second leader or a leader
  frozen past its lease (SIGSTOP, a long GC pause) can therefore never fire an occurrence twice:
  its statement finds the lease taken or re-taken, fires nothing, and it learns it lost;
* it reads back the database clock and the watermarks the next round plans from.

Cadence: the holder runs a round every ``interval`` (15 s) or at the next due occurrence,
whichever is sooner, and renews its ``lease`` (30 s) on each. A standby runs a round every
``interval`` or when the holder's lease runs out, whichever is sooner, so a crashed leader is
replaced within one lease period; it also LISTENs, so a leader that steps down (SIGTERM: finish
the round, then release the lease) is replaced at once. Idle, a leader issues 4 statements a
minute, a standby 5 (its LISTEN session is probed once a minute).

Occurrences are computed in Python (``workhorse.tasks``, pure) from the DATABASE clock: each
round answers ``now()``, and between rounds the estimate advances on the monotonic clock. It
lags the database by a round trip, never leads it, and the fire itself checks
``occurrence <= now()``, so nothing fires early.

A process with no task declared takes no part in the election: a leader fires only the tasks it
knows, so every process running the role should declare the same tasks (the same app).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from workhorse._db.queries import scheduler as sql
from workhorse.drivers.base import NewJob
from workhorse.drivers.listener import Listener
from workhorse.drivers.postgres import PostgresDriver
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.tasks import Fire, TaskHandle, iso, plan_fire

if TYPE_CHECKING:
    from workhorse.app import App

log = logging.getLogger("workhorse.scheduler")

WAKE_MARGIN = 0.005  # seconds past a due time (or a lease expiry) before the round that acts on it
MIN_WAIT = 0.01  # the shortest sleep between two rounds unless the round itself asks for another now
FOLD_INTERVAL = 3600.0  # seconds between counter folds by an idle (task-less) scheduler role
LISTEN_PROBE = 60.0  # seconds between same-session probes of a standby's LISTEN connection


def channel_for(schema: str) -> str:
    """The NOTIFY channel a released lease is announced on (identifiers stop at 63 bytes)."""
    return f"{schema}_scheduler"[:63]


# -- what one round asks and answers -------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """A task to register (or whose changed schedule to record) in ``{schema}.tasks``."""

    name: str
    schedule: str
    timezone: str
    catch_up: str
    next_at: datetime | None


@dataclass(frozen=True)
class PlannedFire:
    """One occurrence to fire, planned from ``prev`` (the watermark read) under the round's epoch."""

    task: str
    fire: Fire
    prev: datetime
    job: NewJob


@dataclass(frozen=True)
class RoundRequest:
    holder: str
    host: str
    pid: int
    ttl: float
    epoch: int | None
    fires: Sequence[PlannedFire]
    declared: Sequence[Declared]
    names: Sequence[str]


@dataclass(frozen=True)
class TaskState:
    """A task row as the round left it."""

    name: str
    watermark: datetime
    descriptor: tuple[str, str, str]


@dataclass(frozen=True)
class RoundAnswer:
    """``epoch``/``expires_at`` are ours when this process holds the lease after the round, else
    None; ``holder*`` is the lease as it stood before the round (who leads, until when)."""

    db_now: datetime
    epoch: int | None
    expires_at: datetime | None
    holder: str | None
    holder_epoch: int | None
    holder_expires_at: datetime | None
    tasks: dict[str, TaskState]
    fired: frozenset[str]
    inserted: frozenset[str]


class RoundStore(Protocol):
    """Where rounds go. ``PostgresRoundStore`` in production; tests may pass their own."""

    async def check_schema(self) -> None: ...

    async def round(self, request: RoundRequest) -> RoundAnswer: ...

    async def release(self, holder: str, epoch: int) -> bool: ...

    async def rollup(self) -> int:
        """Fold old counter buckets (``Driver.rollup_counters``); answers rows folded."""

    async def close(self) -> None: ...


def _ts(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


class PostgresRoundStore:
    """Rounds on PostgreSQL, on one connection named ``workhorse:scheduler``."""

    def __init__(self, app: App) -> None:
        self.driver: PostgresDriver = app.postgres_driver("scheduler", max_size=1)
        self.channel = channel_for(app.schema)
        self.url = app.database_url

    async def check_schema(self) -> None:
        await self.driver.check_schema()

    async def round(self, request: RoundRequest) -> RoundAnswer:
        fires = request.fires
        rows = await self.driver.fetch(
            sql.ROUND,
            {
                "holder": request.holder,
                "host": request.host,
                "pid": request.pid,
                "ttl": request.ttl,
                "epoch": request.epoch,
                "channel": self.driver.channel,
                "f_names": [f.task for f in fires],
                "f_occurrences": [f.fire.occurrence for f in fires],
                "f_prevs": [f.prev for f in fires],
                "f_next_ats": [f.fire.next_at for f in fires],
                "f_ids": [f.job.id for f in fires],
                "f_queues": [f.job.queue for f in fires],
                "f_tenants": [f.job.tenant for f in fires],
                "f_payloads": [f.job.payload for f in fires],
                "f_keys": [f.job.key for f in fires],
                "f_priorities": [f.job.priority for f in fires],
                "f_max_attempts": [f.job.max_attempts for f in fires],
                "f_dead_letters": [f.job.dead_letter for f in fires],
                "d_names": [d.name for d in request.declared],
                "d_schedules": [d.schedule for d in request.declared],
                "d_timezones": [d.timezone for d in request.declared],
                "d_catch_ups": [d.catch_up for d in request.declared],
                "d_next_ats": [d.next_at for d in request.declared],
                "names": list(request.names),
            },
        )
        row = rows[0]
        tasks = {
            t["name"]: TaskState(
                name=t["name"],
                watermark=_ts(t["watermark"]),
                descriptor=(t["schedule"], t["timezone"], t["catch_up"]),
            )
            for t in row["tasks"]
        }
        return RoundAnswer(
            db_now=row["db_now"],
            epoch=row["epoch"],
            expires_at=row["expires_at"],
            holder=row["holder"],
            holder_epoch=row["holder_epoch"],
            holder_expires_at=row["holder_expires_at"],
            tasks=tasks,
            fired=frozenset(row["fired"]),
            inserted=frozenset(row["inserted"]),
        )

    async def release(self, holder: str, epoch: int) -> bool:
        rows = await self.driver.fetch(sql.RELEASE, {"holder": holder, "epoch": epoch, "channel": self.channel})
        return bool(rows and rows[0]["released"])

    async def rollup(self) -> int:
        return await self.driver.rollup_counters()

    async def close(self) -> None:
        await self.driver.close()


# -- the role -------------------------------------------------------------------------------------


@dataclass
class SchedulerStats:
    """What one scheduler did. ``fenced`` counts planned fires a round refused (lease or watermark
    moved); ``duplicates`` fires whose occurrence key was already held by a live job."""

    rounds: int = 0
    fired: int = 0
    fenced: int = 0
    duplicates: int = 0
    elections: int = 0
    lost: int = 0
    failed_rounds: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class _Anchor:
    db_now: datetime
    mono: float


@dataclass
class _Due:
    watermark: datetime
    next_at: datetime | None


@dataclass
class _View:
    """What this process believes between rounds."""

    epoch: int | None = None
    known: dict[str, TaskState] | None = None
    lease_deadline: float | None = None  # monotonic time our lease runs out
    holder_deadline: float | None = None  # monotonic time the other holder's lease runs out
    due: dict[str, _Due] = field(default_factory=dict)
    misses: int = 0  # consecutive rounds whose fires or registrations all failed to land
    broken: set[str] = field(default_factory=set)  # tasks whose due job could not be built


class Scheduler:
    """Runs the scheduler role for ``app``'s tasks. ``await run()`` until ``stop()`` or a signal.

    ``lease``: how long a leadership lasts without renewal (a crashed leader is replaced within
    it); ``interval``: the longest gap between two rounds, at most half the lease.
    ``store``/``clock``/``waiter`` are seams for tests (a store of rounds, a monotonic clock, and
    an awaitable sleep); by default PostgreSQL, ``time.monotonic`` and a wakeable sleep.
    """

    def __init__(
        self,
        app: App,
        *,
        lease: Duration = "30s",
        interval: Duration = "15s",
        handle_signals: bool = True,
        store: RoundStore | None = None,
        clock: Callable[[], float] | None = None,
        waiter: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.lease = to_seconds(lease, what="lease", allow_zero=False)
        self.interval = to_seconds(interval, what="interval", allow_zero=False)
        if self.lease < 2:
            raise ConfigurationError(
                cause=f"the scheduler lease must be at least 2s (a shorter one lapses between rounds), got {lease!r}",
                fix="Scheduler(app, lease='30s')",
            )
        if self.interval > self.lease / 2:
            raise ConfigurationError(
                cause=f"the scheduler interval ({self.interval:g}s) must be at most half its lease "
                f"({self.lease:g}s), so the lease is renewed before it can lapse",
                fix="Scheduler(app, lease='30s', interval='15s')",
            )
        if store is None and app.is_memory:
            raise ConfigurationError(
                code="SCHEDULER_NEEDS_POSTGRES",
                cause="the scheduler role elects its leader and fires its tasks in PostgreSQL; this app uses "
                "the in-process memory driver",
                fix="run the scheduler on an App with a database; in unit tests, call task.enqueue() by hand",
            )
        self.handle_signals = handle_signals
        self.id = f"s-{uuid.uuid4().hex[:16]}"  # a fresh incarnation per process, never the hostname
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.stats = SchedulerStats()
        self._store = store
        self._clock = clock or time.monotonic
        self._waiter = waiter
        self._view = _View()
        self._anchor: _Anchor | None = None
        self._folded_hour: datetime | None = None
        self._wake = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._stopped = asyncio.Event()
        self._running = False
        self._signals = 0
        self._listener: Listener | None = None

    @property
    def tasks(self) -> dict[str, TaskHandle[Any]]:
        return self.app.tasks

    @property
    def leading(self) -> bool:
        """Whether the last round left this process holding the lease."""
        return self._view.epoch is not None

    @property
    def epoch(self) -> int | None:
        return self._view.epoch

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> SchedulerStats:
        """Run rounds until ``stop()`` (or SIGTERM/SIGINT): then finish the round and release the lease."""
        if self._running:
            raise ConfigurationError(
                code="SCHEDULER_RUNNING",
                cause="this scheduler is already running",
                fix="create a second Scheduler(app) instead",
            )
        self._running = True
        self._stopped.clear()
        loop = asyncio.get_running_loop()
        installed = self._install_signals(loop) if self.handle_signals else []
        try:
            if not self.tasks:
                log.info("scheduler %s: no task is declared on this app; the role stays idle", self.id)
                await self._fold_hourly()
                return self.stats
            store = self._store if self._store is not None else PostgresRoundStore(self.app)
            try:
                await store.check_schema()
                log.info(
                    "scheduler %s: standing for election (lease %gs, round every %gs) with %d task(s): %s",
                    self.id,
                    self.lease,
                    self.interval,
                    len(self.tasks),
                    ", ".join(sorted(self.tasks)),
                )
                await self._loop(store)
            finally:
                await self._step_down(store)
                await self._stop_listening()
                if self._store is None:
                    await store.close()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._running = False
            self._stopped.set()
        return self.stats

    async def stop(self) -> None:
        """Finish the round in flight, release the lease, and return once ``run()`` has ended."""
        self._stop_requested.set()
        self._wake.set()
        if self._running:
            await self._stopped.wait()

    async def _fold_hourly(self) -> None:
        """With no task there is no election, and every idle role folds the counters once an hour
        instead (the fold is exactly-once whoever runs it)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_requested.wait(), timeout=FOLD_INTERVAL * random.uniform(0.9, 1.1))
                return
            try:
                await self.app.admin.rollup()
            except WorkhorseError as error:
                log.warning("scheduler %s: folding counters failed (%s)", self.id, error.cause)

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        installed: list[signal.Signals] = []
        if threading.current_thread() is not threading.main_thread():
            return installed
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not on this platform
                pass
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        log.warning(
            "scheduler %s: %s received, %s",
            self.id,
            sig.name,
            "finishing the round, then releasing the lease" if self._signals == 1 else "still finishing the round",
        )
        self._stop_requested.set()
        self._wake.set()

    # -- rounds -------------------------------------------------------------------------------

    async def _loop(self, store: RoundStore) -> None:
        failures = 0
        while not self._stop_requested.is_set():
            self._wake.clear()
            try:
                wait = await self._round(store)
                failures = 0
                await self._fold_counters(store)
            except WorkhorseError as error:
                failures += 1
                self.stats.failed_rounds += 1
                self._lapse_if_silent()
                wait = min(self.interval, 0.5 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                log.warning("scheduler %s: round failed (%s); next try in %.1fs", self.id, error.cause, wait)
            if self._stop_requested.is_set():
                break
            await self._manage_listener(store)
            if wait > 0:
                await self._sleep(wait)

    async def _round(self, store: RoundStore) -> float:
        """One statement. Answers how long to wait before the next round."""
        now = self._estimate_now()
        fires, declared = self._plan(now)
        request = RoundRequest(
            holder=self.id,
            host=self.host,
            pid=self.pid,
            ttl=self.lease,
            epoch=self._view.epoch,
            fires=fires,
            declared=declared,
            names=sorted(self.tasks),
        )
        answer = await store.round(request)
        self._anchor = _Anchor(answer.db_now, self._clock())
        self.stats.rounds += 1
        became = self._absorb(request, answer)
        return self._next_wait(became)

    async def _fold_counters(self, store: RoundStore) -> None:
        """The leader folds old minute counters into hours and days, at most once an hour of the
        database clock (the fold is safe from any number of processes; leading just keeps it to one)."""
        if not self.leading or self._anchor is None:
            return
        hour = self._anchor.db_now.replace(minute=0, second=0, microsecond=0)
        if hour != self._folded_hour:
            self._folded_hour = hour
            folded = await store.rollup()
            if folded:
                log.info("scheduler %s: folded %d counter bucket(s) into hours and days", self.id, folded)

    def _estimate_now(self) -> datetime | None:
        """The database clock now: the last round's ``now()`` moved on by the monotonic clock."""
        if self._anchor is None:
            return None
        return self._anchor.db_now + timedelta(seconds=self._clock() - self._anchor.mono)

    def _plan(self, now: datetime | None) -> tuple[list[PlannedFire], list[Declared]]:
        known = self._view.known
        if known is None or now is None:
            return [], []  # not leading (or not yet): nothing to fire, nothing to register
        fires: list[PlannedFire] = []
        declared: list[Declared] = []
        self._view.broken.clear()
        for name in sorted(self.tasks):
            task = self.tasks[name]
            row = known.get(name)
            if row is None or row.descriptor != task.descriptor:
                base = now if row is None else row.watermark
                schedule, zone, catch_up = task.descriptor
                declared.append(Declared(name, schedule, zone, catch_up, task.schedule.next_after(base)))
                continue
            fire = plan_fire(task.schedule, row.watermark, now)
            if fire is None:
                continue
            try:
                job = task.build_fire(fire)
            except WorkhorseError as error:
                self._view.broken.add(name)  # retried each round, but it no longer sets the pace
                log.error(  # noqa: TRY400 - a refusal with its own cause and fix, not a crash
                    "scheduler %s: task %s: occurrence %s cannot be fired: %s (fix: %s)",
                    self.id,
                    name,
                    iso(fire.occurrence),
                    error.cause,
                    error.fix,
                )
                continue
            fires.append(PlannedFire(task=name, fire=fire, prev=row.watermark, job=job))
        return fires, declared

    def _absorb(self, request: RoundRequest, answer: RoundAnswer) -> bool:
        """Take in what the round did. Answers whether this round made us the leader."""
        view = self._view
        mono = self._clock()
        became = False
        if answer.epoch is not None:
            if view.epoch is None:
                became = True
                self.stats.elections += 1
                log.info("scheduler %s: leading (epoch %d)", self.id, answer.epoch)
            elif answer.epoch != view.epoch:
                became = True
                self.stats.lost += 1
                log.warning(
                    "scheduler %s: its lease lapsed before this round (epoch %d, now %d): the fires planned "
                    "under the old epoch were fenced out and are planned again",
                    self.id,
                    view.epoch,
                    answer.epoch,
                )
            view.epoch = answer.epoch
            view.known = answer.tasks
            view.holder_deadline = None
            if answer.expires_at is not None:
                view.lease_deadline = mono + (answer.expires_at - answer.db_now).total_seconds()
        else:
            if view.epoch is not None:
                self.stats.lost += 1
                log.warning(
                    "scheduler %s: lost leadership to %s (epoch %s); it fired nothing this round and stands by",
                    self.id,
                    answer.holder,
                    answer.holder_epoch,
                )
            view.epoch = None
            view.known = None
            view.lease_deadline = None
            view.due.clear()
            view.holder_deadline = (
                None
                if answer.holder_expires_at is None
                else mono + (answer.holder_expires_at - answer.db_now).total_seconds()
            )
        landed = 0
        for planned in request.fires:
            occurrence = iso(planned.fire.occurrence)
            if planned.task not in answer.fired:
                self.stats.fenced += 1
                log.warning(
                    "scheduler %s: task %s: occurrence %s was not fired by this round (the lease epoch or the "
                    "watermark moved); the next round decides again",
                    self.id,
                    planned.task,
                    occurrence,
                )
                continue
            landed += 1
            self.stats.fired += 1
            if planned.job.id not in answer.inserted:
                self.stats.duplicates += 1
                log.warning(
                    "scheduler %s: task %s: occurrence %s fired, but a live job already holds key %s: no second job",
                    self.id,
                    planned.task,
                    occurrence,
                    planned.job.key,
                )
                continue
            note = ""
            if planned.fire.missed:
                task = self.tasks[planned.task]
                what = "one catch-up run for" if task.catch_up == "run-once" else "skipping"
                note = f" ({what} the missed occurrences from {iso(planned.fire.first)})"
            log.info(
                "scheduler %s: task %s: fired occurrence %s as job %s%s",
                self.id,
                planned.task,
                occurrence,
                planned.job.id,
                note,
            )
        unregistered = [d.name for d in request.declared if d.name not in answer.tasks]
        stuck = (request.fires and not landed) or unregistered
        view.misses = view.misses + 1 if stuck and view.epoch is not None else 0
        return became

    def _next_wait(self, became: bool) -> float:
        view = self._view
        if view.epoch is None:
            wait = self.interval
            if view.holder_deadline is not None:
                wait = min(wait, max(view.holder_deadline - self._clock(), 0.0) + WAKE_MARGIN)
            return max(wait, MIN_WAIT)
        known = view.known or {}
        pending = any(n not in known or known[n].descriptor != t.descriptor for n, t in self.tasks.items())
        if became or (pending and not view.misses):
            return 0.0  # read the state just taken over (or register) and fire what is due, now
        now = self._estimate_now()
        assert now is not None
        wait = self.interval
        for name, task in self.tasks.items():
            if name not in known or name in view.broken:
                continue
            due = self._due(name, task, known[name].watermark)
            if due is not None:
                wait = min(wait, max((due - now).total_seconds(), 0.0) + WAKE_MARGIN)
        if view.misses:
            wait = max(wait, min(0.1 * 2**view.misses, self.interval))  # a fire that keeps missing: back off
        return max(wait, MIN_WAIT)

    def _due(self, name: str, task: TaskHandle[Any], watermark: datetime) -> datetime | None:
        cached = self._view.due.get(name)
        if cached is None or cached.watermark != watermark:
            cached = _Due(watermark, task.schedule.next_after(watermark))
            self._view.due[name] = cached
        return cached.next_at

    def _lapse_if_silent(self) -> None:
        """No round landed for a whole lease: whatever we held is gone (and fenced anyway)."""
        view = self._view
        if view.epoch is not None and view.lease_deadline is not None and self._clock() >= view.lease_deadline:
            log.warning("scheduler %s: no round landed within the lease; no longer leading", self.id)
            self.stats.lost += 1
            view.epoch = None
            view.known = None
            view.due.clear()

    async def _sleep(self, seconds: float) -> None:
        if self._waiter is not None:
            await self._waiter(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    # -- standing by and stepping down --------------------------------------------------------

    async def _manage_listener(self, store: RoundStore) -> None:
        """A standby LISTENs for a released lease; the leader needs no such session."""
        if not isinstance(store, PostgresRoundStore):
            return
        if self.leading and self._listener is not None:
            await self._stop_listening()
        elif not self.leading and self._listener is None:
            self._listener = Listener(store.url, store.channel, (), self._wake, probe_interval=LISTEN_PROBE)
            self._listener.start()

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()

    async def _step_down(self, store: RoundStore) -> None:
        epoch = self._view.epoch
        self._view.epoch = None
        self._view.known = None
        if epoch is None:
            return
        try:
            released = await store.release(self.id, epoch)
        except WorkhorseError as error:
            log.warning(
                "scheduler %s: could not release the lease (%s); it lapses on its own within %gs",
                self.id,
                error.cause,
                self.lease,
            )
            return
        if released:
            log.info("scheduler %s: released the lease (epoch %d)", self.id, epoch)


# -- reading the state, for `workhorse tasks` -------------------------------------------------------


@dataclass(frozen=True)
class TaskStatus:
    """One task as the database and (when given) the app see it.

    ``registered``: a leader has recorded it; ``declared``: the app given declares it (None when
    no app was given). ``last_occurrence`` is the latest occurrence fired (None before the first).
    """

    name: str
    schedule: str
    timezone: str
    catch_up: str
    registered: bool
    declared: bool | None
    last_occurrence: datetime | None
    last_fired_at: datetime | None
    last_job_id: str | None
    next_at: datetime | None
    fired: int

    def to_dict(self) -> dict[str, Any]:
        def when(value: datetime | None) -> str | None:
            return None if value is None else iso(value)

        return {
            "name": self.name,
            "schedule": self.schedule,
            "timezone": self.timezone,
            "catch_up": self.catch_up,
            "registered": self.registered,
            "declared": self.declared,
            "last_occurrence": when(self.last_occurrence),
            "last_fired_at": when(self.last_fired_at),
            "last_job_id": self.last_job_id,
            "next_at": when(self.next_at),
            "fired": self.fired,
        }


@dataclass(frozen=True)
class LeaderStatus:
    """The scheduler lease row. ``live``: unexpired on the database clock."""

    holder: str
    epoch: int
    host: str | None
    pid: int | None
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    live: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "epoch": self.epoch,
            "host": self.host,
            "pid": self.pid,
            "acquired_at": iso(self.acquired_at),
            "renewed_at": iso(self.renewed_at),
            "expires_at": iso(self.expires_at),
            "live": self.live,
        }


@dataclass(frozen=True)
class TasksReport:
    tasks: list[TaskStatus]
    leader: LeaderStatus | None
    db_now: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.to_dict() for t in self.tasks],
            "leader": None if self.leader is None else self.leader.to_dict(),
            "now": iso(self.db_now),
        }


async def read_tasks(app: App, *, declared: bool = True) -> TasksReport:
    """Every task the database knows, plus (with ``declared``) those ``app`` declares that no leader
    has registered yet; and the scheduler lease. Two statements on the app's own connection."""
    driver = app.driver
    if not isinstance(driver, PostgresDriver):
        raise ConfigurationError(
            code="SCHEDULER_NEEDS_POSTGRES",
            cause="task state lives in PostgreSQL; this app uses the in-process memory driver",
            fix="read tasks through an App with a database",
        )
    rows = await driver.fetch(sql.LIST_TASKS)
    lease = (await driver.fetch(sql.LEADER))[0]
    db_now: datetime = lease["db_now"]
    mine = app.tasks if declared else {}
    seen: set[str] = set()
    out: list[TaskStatus] = []
    for r in rows:
        seen.add(r["name"])
        fired = r["last_fired_at"] is not None
        out.append(
            TaskStatus(
                name=r["name"],
                schedule=r["schedule"],
                timezone=r["timezone"],
                catch_up=r["catch_up"],
                registered=True,
                declared=(r["name"] in mine) if declared else None,
                last_occurrence=r["watermark"] if fired else None,
                last_fired_at=r["last_fired_at"],
                last_job_id=r["last_job_id"],
                next_at=r["next_at"],
                fired=r["fired"],
            )
        )
    for name, task in sorted(mine.items()):
        if name in seen:
            continue
        schedule, zone, catch_up = task.descriptor
        out.append(
            TaskStatus(
                name=name,
                schedule=schedule,
                timezone=zone,
                catch_up=catch_up,
                registered=False,
                declared=True,
                last_occurrence=None,
                last_fired_at=None,
                last_job_id=None,
                next_at=task.schedule.next_after(db_now),
                fired=0,
            )
        )
    out.sort(key=lambda t: t.name)
    leader = None
    if lease["holder"] is not None:
        leader = LeaderStatus(
            holder=lease["holder"],
            epoch=lease["epoch"],
            host=lease["host"],
            pid=lease["pid"],
            acquired_at=lease["acquired_at"],
            renewed_at=lease["renewed_at"],
            expires_at=lease["expires_at"],
            live=lease["live"],
        )
    return TasksReport(tasks=out, leader=leader, db_now=db_now)
