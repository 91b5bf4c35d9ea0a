"""The PostgreSQL driver's leadership role (``PostgresLeadership``): the scheduler's round, its
release and the read of ``workhorse tasks``, each one statement of ``leader/queries.py``;
a standby's hand-over wake-up is a LISTEN session on the lease's channel (``channel_for``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import workhorse.leader.queries as sql
from workhorse.drivers.listener import Listener
from workhorse.drivers.pooler import listen_url
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.leader.rounds import (
    LISTEN_PROBE,
    LeaseRecord,
    RoundAnswer,
    RoundRequest,
    ScheduleState,
    TaskRecord,
    TaskState,
    channel_for,
)


def _ts(value: Any) -> datetime:
    """A time read back through jsonb (ISO 8601 text), or as a timestamptz."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _round_params(request: RoundRequest, jobs_channel: str) -> dict[str, Any]:
    """ROUND's parameters: the planned fires and the declarations as parallel arrays."""
    fires = request.fires
    return {
        "holder": request.holder,
        "host": request.host,
        "pid": request.pid,
        "ttl": request.ttl,
        "epoch": request.epoch,
        "channel": jobs_channel,
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
    }


class PostgresLeadership(PostgresCore):
    """The leadership role: the lease row with its epoch fence, the fire riding the watermark."""

    async def leader_round(self, request: RoundRequest) -> RoundAnswer:
        row = (await self.fetch(sql.ROUND, _round_params(request, self.channel)))[0]
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

    async def release_leader(self, holder: str, epoch: int) -> bool:
        params = {"holder": holder, "epoch": epoch, "channel": channel_for(self.schema)}
        rows = await self.fetch(sql.RELEASE, params)
        return bool(rows and rows[0]["released"])

    def open_handover(self, wake: asyncio.Event) -> Listener:
        """A standby's LISTEN session of its own on the lease's channel, probed once a minute."""
        listener = Listener(listen_url(self.url), channel_for(self.schema), (), wake, probe_interval=LISTEN_PROBE)
        listener.start()
        return listener

    async def read_schedule(self) -> ScheduleState:
        rows = await self.fetch(sql.LIST_TASKS)
        lease = (await self.fetch(sql.LEADER))[0]
        tasks = [
            TaskRecord(
                name=r["name"],
                schedule=r["schedule"],
                timezone=r["timezone"],
                catch_up=r["catch_up"],
                watermark=r["watermark"],
                next_at=r["next_at"],
                last_fired_at=r["last_fired_at"],
                last_job_id=r["last_job_id"],
                fired=r["fired"],
            )
            for r in rows
        ]
        held = None
        if lease["holder"] is not None:
            held = LeaseRecord(
                holder=lease["holder"],
                epoch=lease["epoch"],
                host=lease["host"],
                pid=lease["pid"],
                acquired_at=lease["acquired_at"],
                renewed_at=lease["renewed_at"],
                expires_at=lease["expires_at"],
                live=lease["live"],
            )
        return ScheduleState(tasks=tasks, lease=held, db_now=lease["db_now"])
