"""The read model of ``workhorse tasks``: every task with its schedule, last and next fire, and
the scheduler's lease (``TaskStatus``, ``LeaderStatus``, ``TasksReport``).

The driver reads the rows (``LeadershipRole.read_schedule``); ``tasks_report`` joins them with the
tasks an app declares (pure); ``app.admin.tasks()`` is the two together, and ``read_tasks(app)``
the same for callers holding an app.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from workhorse.leader.rounds import ScheduleState
from workhorse.leader.tasks import TaskHandle, iso


class TasksReader(Protocol):
    """What ``read_tasks`` calls: ``app.admin`` (``workhorse.admin.Admin``)."""

    async def tasks(self, *, declared: bool = True) -> TasksReport: ...


class TasksSource(Protocol):
    """What ``read_tasks`` needs of the ``workhorse.App``: its operator API."""

    @property
    def admin(self) -> TasksReader: ...


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


def tasks_report(state: ScheduleState, declared: Mapping[str, TaskHandle[Any]] | None) -> TasksReport:
    """The report of ``state`` (what the driver read), joined with the app's ``declared`` tasks
    when given: those no leader has registered yet are listed too, and every registered one says
    whether the app declares it (None when no app was given). Pure."""
    mine = declared if declared is not None else {}
    seen: set[str] = set()
    out: list[TaskStatus] = []
    for r in state.tasks:
        seen.add(r.name)
        fired = r.last_fired_at is not None
        out.append(
            TaskStatus(
                name=r.name,
                schedule=r.schedule,
                timezone=r.timezone,
                catch_up=r.catch_up,
                registered=True,
                declared=(r.name in mine) if declared is not None else None,
                last_occurrence=r.watermark if fired else None,
                last_fired_at=r.last_fired_at,
                last_job_id=r.last_job_id,
                next_at=r.next_at,
                fired=r.fired,
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
                next_at=task.schedule.next_after(state.db_now),
                fired=0,
            )
        )
    out.sort(key=lambda t: t.name)
    lease = state.lease
    leader = None
    if lease is not None:
        leader = LeaderStatus(
            holder=lease.holder,
            epoch=lease.epoch,
            host=lease.host,
            pid=lease.pid,
            acquired_at=lease.acquired_at,
            renewed_at=lease.renewed_at,
            expires_at=lease.expires_at,
            live=lease.live,
        )
    return TasksReport(tasks=out, leader=leader, db_now=state.db_now)


async def read_tasks(app: TasksSource, *, declared: bool = True) -> TasksReport:
    """Every task the driver knows, plus (with ``declared``) those ``app`` declares that no leader
    has registered yet; and the scheduler lease: ``app.admin.tasks(declared=...)``."""
    return await app.admin.tasks(declared=declared)
