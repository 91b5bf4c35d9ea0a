"""The memory driver's leadership role (``MemoryLeadership``): the scheduler's round as
``_db/queries/scheduler.py`` does it, in one step under the driver's lock, on its clock.

A round takes or renews the lease row (a lapsed lease, ours or not, is taken under a new epoch),
fires each planned occurrence only under the epoch it was planned with and only where the task's
watermark still holds the value it was planned from (moving it and inserting the job together,
``ON CONFLICT DO NOTHING`` against a live job holding the occurrence key), registers what only
the holder may register, and answers the state the next round plans from. Nothing is written
unless every planned job is well-formed, as one statement fails whole. A release ends the lease
now and calls the hand-over subscribers (the NOTIFY a standby LISTENs for on PostgreSQL).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from workhorse.drivers.base import LIVE_STATES, NewJob
from workhorse.drivers.memory_core import MemoryCore, _canonical, _json_text, _Row, log
from workhorse.drivers.wakeups import Subscription
from workhorse.errors import ConfigurationError
from workhorse.leader.rounds import (
    ROLE,
    LeaseRecord,
    PlannedFire,
    RoundAnswer,
    RoundRequest,
    ScheduleState,
    TaskRecord,
    TaskState,
)


@dataclass(frozen=True, slots=True)
class _LeaseRow:
    """One row of ``leaders``."""

    holder: str
    epoch: int
    host: str | None
    pid: int | None
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime


@dataclass(slots=True)
class _TaskRow:
    """One row of ``tasks``."""

    name: str
    schedule: str
    timezone: str
    catch_up: str
    watermark: datetime
    next_at: datetime | None
    registered_at: datetime
    updated_at: datetime
    last_fired_at: datetime | None = None
    last_job_id: str | None = None
    fired: int = 0

    @property
    def descriptor(self) -> tuple[str, str, str]:
        return (self.schedule, self.timezone, self.catch_up)

    def record(self) -> TaskRecord:
        return TaskRecord(
            name=self.name, schedule=self.schedule, timezone=self.timezone, catch_up=self.catch_up,
            watermark=self.watermark, next_at=self.next_at, last_fired_at=self.last_fired_at,
            last_job_id=self.last_job_id, fired=self.fired,
        )  # fmt: skip


class MemoryLeadership(MemoryCore):
    """The leadership role: the lease row with its epoch fence, the fire riding the watermark."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock=clock)
        self._leaders: dict[str, _LeaseRow] = {}
        self._tasks: dict[str, _TaskRow] = {}
        self._handovers: list[Callable[[], None]] = []

    async def leader_round(self, request: RoundRequest) -> RoundAnswer:
        ids = [_checked_id(planned) for planned in request.fires]  # refused whole, before any write
        woken = False
        with self._lock:
            now = self._now()
            before = self._leaders.get(ROLE)
            lease = self._take_lease(request, now, before)
            fired: set[str] = set()
            inserted: set[str] = set()
            if lease is not None and lease.epoch == request.epoch:  # fires land only under their epoch
                for planned, job_id in zip(request.fires, ids, strict=True):
                    if self._move(planned, job_id, now):
                        fired.add(planned.task)
                        if self._insert(planned.task, planned.job, job_id, now):
                            inserted.add(job_id)
            tasks: dict[str, TaskState] = {}
            if lease is not None:
                self._register(request, now)
                tasks = {
                    name: TaskState(name, row.watermark, row.descriptor)
                    for name in request.names
                    if (row := self._tasks.get(name)) is not None
                }
            woken = bool(inserted)
        if woken:
            self._notify()  # the round's NOTIFY of the queues it inserted into
        return RoundAnswer(
            db_now=now,
            epoch=None if lease is None else lease.epoch,
            expires_at=None if lease is None else lease.expires_at,
            holder=None if before is None else before.holder,
            holder_epoch=None if before is None else before.epoch,
            holder_expires_at=None if before is None else before.expires_at,
            tasks=tasks,
            fired=frozenset(fired),
            inserted=frozenset(inserted),
        )

    def _take_lease(self, request: RoundRequest, now: datetime, row: _LeaseRow | None) -> _LeaseRow | None:
        """ROUND's ``lease``: taken when free or lapsed (a new epoch), renewed when ours and live;
        None when another holder's lease is live."""
        expires = now + timedelta(seconds=request.ttl)
        if row is None:
            taken = _LeaseRow(request.holder, 1, request.host, request.pid, now, now, expires)
        elif row.holder == request.holder or row.expires_at <= now:
            kept = row.holder == request.holder and row.expires_at > now
            taken = _LeaseRow(
                holder=request.holder,
                epoch=row.epoch if kept else row.epoch + 1,
                host=request.host,
                pid=request.pid,
                acquired_at=row.acquired_at if kept else now,
                renewed_at=now,
                expires_at=expires,
            )
        else:
            return None
        self._leaders[ROLE] = taken
        return taken

    def _move(self, planned: PlannedFire, job_id: str, now: datetime) -> bool:
        """ROUND's ``moved``: the watermark's compare-and-set from the value planned with, never
        backwards, never before the occurrence on this driver's clock."""
        row = self._tasks.get(planned.task)
        occurrence = planned.fire.occurrence
        if row is None or row.watermark != planned.prev or not row.watermark < occurrence <= now:
            return False
        row.watermark, row.next_at = occurrence, planned.fire.next_at
        row.last_fired_at, row.last_job_id, row.fired, row.updated_at = now, job_id, row.fired + 1, now
        return True

    def _insert(self, task: str, job: NewJob, job_id: str, now: datetime) -> bool:
        """ROUND's ``inserted``: the job, ready now, unless its id exists or a live job of the same
        (name, tenant, key) holds the occurrence key (``ON CONFLICT DO NOTHING``)."""
        slot = None if job.key is None else (task, job.tenant or "", job.key)
        if job_id in self._rows or (
            slot is not None and any(r.state in LIVE_STATES and r.slot() == slot for r in self._rows.values())
        ):
            return False
        self._rows[job_id] = _Row(
            id=job_id, name=task, queue=job.queue, tenant=job.tenant, state="ready", priority=job.priority,
            payload=job.payload, key=job.key, max_attempts=job.max_attempts, dead_letter=job.dead_letter,
            run_at=now, created_at=now, updated_at=now,
        )  # fmt: skip
        return True

    def _register(self, request: RoundRequest, now: datetime) -> None:
        """ROUND's ``registered``: a new task starts with its watermark at now (nothing before its
        first sighting is owed); a changed declaration keeps its watermark; a task this round
        planned a fire for is left alone."""
        planned = {p.task for p in request.fires}
        for d in request.declared:
            if d.name in planned:
                continue
            row = self._tasks.get(d.name)
            if row is None:
                self._tasks[d.name] = _TaskRow(
                    name=d.name, schedule=d.schedule, timezone=d.timezone, catch_up=d.catch_up,
                    watermark=now, next_at=d.next_at, registered_at=now, updated_at=now,
                )  # fmt: skip
            elif row.descriptor != (d.schedule, d.timezone, d.catch_up):
                row.schedule, row.timezone, row.catch_up = d.schedule, d.timezone, d.catch_up
                row.next_at, row.updated_at = d.next_at, now

    async def release_leader(self, holder: str, epoch: int) -> bool:
        with self._lock:
            now = self._now()
            row = self._leaders.get(ROLE)
            released = row is not None and row.holder == holder and row.epoch == epoch
            if released and row is not None:
                self._leaders[ROLE] = replace(row, expires_at=now, renewed_at=now)
            callbacks = list(self._handovers) if released else []
        for callback in callbacks:  # RELEASE's NOTIFY, outside the lock
            try:
                callback()
            except Exception:  # a standby whose loop closed: it polls all the same
                log.debug("a memory-driver hand-over subscriber failed", exc_info=True)
        return released

    def open_handover(self, wake: asyncio.Event) -> Subscription:
        """A standby's wake-up, on the running loop: every release sets ``wake``."""
        loop = asyncio.get_running_loop()

        def released() -> None:
            loop.call_soon_threadsafe(wake.set)

        with self._lock:
            self._handovers.append(released)

        def unsubscribe() -> None:
            with self._lock:
                if released in self._handovers:
                    self._handovers.remove(released)

        return Subscription(unsubscribe)

    async def read_schedule(self) -> ScheduleState:
        with self._lock:
            now = self._now()
            tasks = [r.record() for r in sorted(self._tasks.values(), key=lambda r: r.name)]
            row = self._leaders.get(ROLE)
        lease = None
        if row is not None:
            lease = LeaseRecord(
                holder=row.holder, epoch=row.epoch, host=row.host, pid=row.pid, acquired_at=row.acquired_at,
                renewed_at=row.renewed_at, expires_at=row.expires_at, live=row.expires_at > now,
            )  # fmt: skip
        return ScheduleState(tasks=tasks, lease=lease, db_now=now)


def _checked_id(planned: PlannedFire) -> str:
    """A planned job's id as ``uuid::text`` spells it, its payload checked as ``::jsonb`` would."""
    job_id = _canonical(planned.job.id)
    if job_id is None:
        raise ConfigurationError(
            cause=f"task {planned.task!r}: the fired job's id {planned.job.id!r} is not a UUID",
            fix="build the job with TaskHandle.build_fire (workhorse.ids.new_job_id)",
        )
    _json_text(planned.job.payload, f"task {planned.task!r}: the fired job's payload")
    return job_id
