"""The scheduler role: one leader across the fleet, elected by a lease row, runs the duties.

This is its face: ``Scheduler`` (``await Scheduler(app).run()`` until ``stop()`` or a signal),
``SchedulerStats``, and the read model of ``workhorse tasks`` (``read_tasks``). The parts behind
it are private modules, each owning its state:

    leader     Scheduler: options, run/stop, signals, the loop of rounds, standing by, stepping down
    election   the lease-row election and its epoch fence, as this process sees it (pure)
    cron       the cron duty: planning each round's fires, reading back what landed (pure)
    duty       the Duty protocol: what the leader runs after each round it leads
    folds      the counter folds duty (and the hourly fold of a task-less role)
    purge      the retention duty (and the purge of a task-less role)
    rescue     the rescue duty: lapsed leases, after each round it leads (``workhorse.rescue``)
    store      RoundStore: where rounds go (DriverRoundStore over the driver's leadership role, or a test's own)
    stats      SchedulerStats
    report     TaskStatus, LeaderStatus, TasksReport, tasks_report: what `workhorse tasks` prints (app.admin.tasks)

The records a round speaks (``RoundRequest``, ``RoundAnswer``...) are the driver's leadership
role's (``workhorse.drivers.leadership``); they are importable from here too.
"""

from workhorse.drivers.leadership import (
    LISTEN_PROBE,
    Declared,
    PlannedFire,
    RoundAnswer,
    RoundRequest,
    TaskState,
    channel_for,
)
from workhorse.scheduler.election import MIN_WAIT, WAKE_MARGIN
from workhorse.scheduler.folds import FOLD_INTERVAL
from workhorse.scheduler.leader import Scheduler
from workhorse.scheduler.report import LeaderStatus, TasksReport, TaskStatus, read_tasks, tasks_report
from workhorse.scheduler.stats import SchedulerStats
from workhorse.scheduler.store import DriverRoundStore, PostgresRoundStore, RoundStore

__all__ = [
    "FOLD_INTERVAL",
    "LISTEN_PROBE",
    "MIN_WAIT",
    "WAKE_MARGIN",
    "Declared",
    "DriverRoundStore",
    "LeaderStatus",
    "PlannedFire",
    "PostgresRoundStore",
    "RoundAnswer",
    "RoundRequest",
    "RoundStore",
    "Scheduler",
    "SchedulerStats",
    "TaskState",
    "TaskStatus",
    "TasksReport",
    "channel_for",
    "read_tasks",
    "tasks_report",
]
