"""Where rounds go: the ``RoundStore`` protocol, and the store on PostgreSQL.

A store runs a round (``round``), ends a lease (``release``), folds counters (``rollup``), and,
when it can, wakes a standby on a released lease (``HandoverSource.open_handover``). Tests pass
their own store (a virtual clock); by default the scheduler opens ``PostgresRoundStore``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from workhorse._db.queries import scheduler as sql
from workhorse.drivers.base import Driver
from workhorse.drivers.leadership import Handover, RoundAnswer, RoundRequest, TaskState, channel_for
from workhorse.drivers.listener import Listener
from workhorse.drivers.postgres import PostgresDriver

LISTEN_PROBE = 60.0  # seconds between same-session probes of a standby's LISTEN connection


class StoreSource(Protocol):
    """What opening a store needs of the ``workhorse.App`` (this package never imports it)."""

    @property
    def is_memory(self) -> bool: ...

    @property
    def driver(self) -> Driver:
        """The driver for the calling event loop."""
        ...

    def postgres_driver(self, role: str, *, max_size: int = 10, generic_plans: bool = False) -> Driver:
        """A fresh Postgres driver whose connections are named ``workhorse:<role>``."""
        ...


class RoundStore(Protocol):
    """Where rounds go. ``PostgresRoundStore`` in production; tests may pass their own."""

    async def check_schema(self) -> None: ...

    async def round(self, request: RoundRequest) -> RoundAnswer: ...

    async def release(self, holder: str, epoch: int) -> bool: ...

    async def rollup(self) -> int:
        """Fold old counter buckets (``Driver.rollup_counters``); answers rows folded."""

    async def close(self) -> None: ...


@runtime_checkable
class HandoverSource(Protocol):
    """A store that can wake a standby when the lease is released (a store without it is polled)."""

    def open_handover(self, wake: asyncio.Event) -> Handover: ...


def _ts(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


class PostgresRoundStore:
    """Rounds on PostgreSQL, on one connection named ``workhorse:scheduler``."""

    def __init__(self, app: StoreSource) -> None:
        driver = app.postgres_driver("scheduler", max_size=1)
        assert isinstance(driver, PostgresDriver)
        self.driver: PostgresDriver = driver
        self.channel = channel_for(driver.schema)
        self.url = driver.url

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

    def open_handover(self, wake: asyncio.Event) -> Handover:
        """A standby LISTENs for a released lease on a session of its own."""
        listener = Listener(self.url, self.channel, (), wake, probe_interval=LISTEN_PROBE)
        listener.start()
        return listener

    async def close(self) -> None:
        await self.driver.close()
