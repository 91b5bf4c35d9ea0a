"""The leadership role of a driver (``LeadershipRole``, one of ``Driver``'s bases): the scheduler's
lease row and its rounds. It runs what the scheduler role asks of its storage, each call one
statement on PostgreSQL (``leader/queries.py``; ``leader/postgres.py``); the
memory driver refuses them (``POSTGRES_ONLY``):

``leader_round``    renew (or take) the lease with its epoch fence, fire what the last round
                    planned (watermark moved and job inserted together), register declarations,
                    and read back the database clock and the watermarks the next round plans from
``release_leader``  end the lease now and wake the standbys (a clean hand-over)
``open_handover``   a standby's wake-up for a released lease (a LISTEN session; a subscription)
``read_schedule``   every task row and the lease as they stand, for ``workhorse tasks``

The records below are what those calls speak. Nothing here knows a schedule: the planner
(``workhorse.leader.cron``) decides what is due, the driver only fences and writes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from workhorse.types import NewJob

ROLE = "scheduler"  # the leaders row the scheduler role competes for
LISTEN_PROBE = 60.0  # seconds between same-session probes of a standby's LISTEN connection (PostgreSQL)


def channel_for(schema: str) -> str:
    """The NOTIFY channel a released lease is announced on (identifiers stop at 63 bytes)."""
    return f"{schema}_scheduler"[:63]


class Occurrence(Protocol):
    """What a round needs of a planned occurrence (``workhorse.leader.tasks.Fire`` is one): the occurrence
    (the job's key and the new watermark), the first one owed, and the one after it."""

    @property
    def occurrence(self) -> datetime: ...

    @property
    def first(self) -> datetime: ...

    @property
    def next_at(self) -> datetime | None: ...

    @property
    def missed(self) -> bool: ...


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
    fire: Occurrence
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


@dataclass(frozen=True)
class TaskRecord:
    """One row of ``{schema}.tasks`` as it stands (``watermark``: the latest occurrence accounted for)."""

    name: str
    schedule: str
    timezone: str
    catch_up: str
    watermark: datetime
    next_at: datetime | None
    last_fired_at: datetime | None
    last_job_id: str | None
    fired: int


@dataclass(frozen=True)
class LeaseRecord:
    """The scheduler's lease row. ``live``: unexpired on the driver's clock."""

    holder: str
    epoch: int
    host: str | None
    pid: int | None
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    live: bool


@dataclass(frozen=True)
class ScheduleState:
    """What ``read_schedule`` answers: every task row by name, the lease (None when never taken),
    and the driver's clock to judge them against."""

    tasks: list[TaskRecord]
    lease: LeaseRecord | None
    db_now: datetime


class Handover(Protocol):
    """A standby's wake-up for a released lease, opened by ``LeadershipRole.open_handover``."""

    async def close(self) -> None:
        """Stop listening (end the session, for a database driver)."""


@runtime_checkable
class LeadershipRole(Protocol):
    """The leadership role: hold the scheduler's lease and run its rounds."""

    async def leader_round(self, request: RoundRequest) -> RoundAnswer:
        """One round: lease, fenced fires, registrations, and the state the next round plans from."""

    async def release_leader(self, holder: str, epoch: int) -> bool:
        """End ``holder``'s lease of ``epoch`` now and wake the standbys; answers whether it was held."""

    def open_handover(self, wake: asyncio.Event) -> Handover:
        """On the running loop: set ``wake`` whenever a lease is released (and when the wake-up
        itself was down, since a release may have been missed)."""

    async def read_schedule(self) -> ScheduleState:
        """Every task row and the lease, for ``workhorse tasks``."""
