"""The cron duty: what the leader's round fires, and what it learns from the answer (pure).

The occurrences come from ``leader/tasks`` (pure) and the DATABASE clock: each round answers
``now()``, and between rounds the leader's estimate advances on the monotonic clock, so it lags
the database by a round trip and never leads it; the fire itself checks ``occurrence <= now()``,
so nothing fires early. ``CronDuty`` plans each round from the task rows the last one read back
(one ``PlannedFire`` per due task, a ``Declared`` per task not yet registered or whose schedule
changed), counts what the answer says landed, and times the next round to the next due occurrence.

A leader fires only the tasks its own app declares: every process running the role should
declare the same tasks (the same app).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workhorse.errors import WorkhorseError
from workhorse.leader.election import MIN_WAIT, WAKE_MARGIN
from workhorse.leader.rounds import Declared, PlannedFire, RoundAnswer, RoundRequest, TaskState
from workhorse.leader.stats import SchedulerStats
from workhorse.leader.tasks import TaskHandle, iso, plan_fire

log = logging.getLogger("workhorse.scheduler")


@dataclass
class _Due:
    watermark: datetime
    next_at: datetime | None


class CronDuty:
    """Plans the fires of each round the leader runs, and reads back what landed."""

    def __init__(self, scheduler_id: str, tasks: Mapping[str, TaskHandle[Any]], stats: SchedulerStats) -> None:
        self.scheduler_id = scheduler_id
        self.tasks = tasks
        self.stats = stats
        self.misses = 0  # consecutive rounds whose fires or registrations all failed to land
        self._due: dict[str, _Due] = {}
        self._broken: set[str] = set()  # tasks whose due job could not be built

    def forget(self) -> None:
        """Not leading any more: the next leadership reads the task rows afresh."""
        self._due.clear()

    def plan(
        self, known: dict[str, TaskState] | None, now: datetime | None
    ) -> tuple[list[PlannedFire], list[Declared]]:
        """The fires and registrations of the next round, from the task rows the holder read last
        (``known``) and the database clock's estimate (``now``); nothing when not leading."""
        if known is None or now is None:
            return [], []  # not leading (or not yet): nothing to fire, nothing to register
        fires: list[PlannedFire] = []
        declared: list[Declared] = []
        self._broken.clear()
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
                self._broken.add(name)  # retried each round, but it no longer sets the pace
                log.error(  # noqa: TRY400 - a refusal with its own cause and fix, not a crash
                    "scheduler %s: task %s: occurrence %s cannot be fired: %s (fix: %s)",
                    self.scheduler_id,
                    name,
                    iso(fire.occurrence),
                    error.cause,
                    error.fix,
                )
                continue
            fires.append(PlannedFire(task=name, fire=fire, prev=row.watermark, job=job))
        return fires, declared

    def absorb(self, request: RoundRequest, answer: RoundAnswer, *, leading: bool) -> None:
        """Count and log what the round fired (``leading``: whether it left us holding the lease)."""
        landed = 0
        for planned in request.fires:
            occurrence = iso(planned.fire.occurrence)
            if planned.task not in answer.fired:
                self.stats.fenced += 1
                log.warning(
                    "scheduler %s: task %s: occurrence %s was not fired by this round (the lease epoch or the "
                    "watermark moved); the next round decides again",
                    self.scheduler_id,
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
                    self.scheduler_id,
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
                self.scheduler_id,
                planned.task,
                occurrence,
                planned.job.id,
                note,
            )
        unregistered = [d.name for d in request.declared if d.name not in answer.tasks]
        stuck = (request.fires and not landed) or unregistered
        self.misses = self.misses + 1 if stuck and leading else 0

    def holder_wait(
        self, known: dict[str, TaskState] | None, now: datetime | None, *, became: bool, interval: float
    ) -> float:
        """The holder's wait before its next round: at once after an election (or while a task
        waits to be registered), else until the next due occurrence, at most ``interval``; a fire
        that keeps missing backs off."""
        rows = known or {}
        pending = any(n not in rows or rows[n].descriptor != t.descriptor for n, t in self.tasks.items())
        if became or (pending and not self.misses):
            return 0.0  # read the state just taken over (or register) and fire what is due, now
        assert now is not None
        wait = interval
        for name, task in self.tasks.items():
            if name not in rows or name in self._broken:
                continue
            due = self._next_due(name, task, rows[name].watermark)
            if due is not None:
                wait = min(wait, max((due - now).total_seconds(), 0.0) + WAKE_MARGIN)
        if self.misses:
            wait = max(wait, min(0.1 * 2**self.misses, interval))  # a fire that keeps missing: back off
        return max(wait, MIN_WAIT)

    def _next_due(self, name: str, task: TaskHandle[Any], watermark: datetime) -> datetime | None:
        cached = self._due.get(name)
        if cached is None or cached.watermark != watermark:
            cached = _Due(watermark, task.schedule.next_after(watermark))
            self._due[name] = cached
        return cached.next_at
