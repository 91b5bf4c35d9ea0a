"""The PostgreSQL driver's steps and events roles (``PostgresSteps``): durable steps, each write
fenced on the claim, and stored events, published and waited for under the event's lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import workhorse.steps.queries as step_sql
from workhorse.drivers.postgres_core import PostgresCore, _is_uuid
from workhorse.types import PublishedEvent, StepAnswer, StepFence, StepRecord

PURGE_BATCH = 1_000  # expired events deleted per statement: short locks, a loop until done


class PostgresSteps(PostgresCore):
    """The steps and events roles: a run's recorded steps read once, fenced step writes, sleeps
    and waits that suspend the job in their own statement, events that wake matching waits."""

    # -- durable steps and events -----------------------------------------------------------------

    async def list_steps(self, job_id: str) -> list[StepRecord]:
        if not _is_uuid(job_id):
            return []
        rows = await self.fetch(step_sql.LIST, {"job_id": job_id})
        return [
            StepRecord(
                name=r["name"],
                seq=r["seq"],
                state=r["state"],
                result=r["result"],
                error=r["error"],
                attempt=r["attempt"],
                started_at=r["started_at"],
                finished_at=r["finished_at"],
                wake_at=r["wake_at"],
                event=r["event"],
                key=r["event_key"],
            )
            for r in rows
        ]

    async def put_step(
        self,
        fence: StepFence,
        *,
        name: str,
        seq: int,
        state: Literal["done", "failed"],
        result: str | None,
        error: str | None,
        elapsed: float,
    ) -> bool:
        rows = await self.fetch(
            step_sql.PUT,
            {
                **_fence(fence),
                "name": name,
                "seq": seq,
                "state": state,
                "result": result,
                "error": error,
                "elapsed": max(elapsed, 0.0),
            },
        )
        return bool(rows)

    async def sleep_step(
        self, fence: StepFence, *, name: str, seq: int, delay: float | None, until: datetime | None
    ) -> StepAnswer | None:
        rows = await self.fetch(
            step_sql.SLEEP, {**_fence(fence), "name": name, "seq": seq, "delay": delay or 0.0, "until": until}
        )
        return _answer(rows)

    async def wait_step(
        self, fence: StepFence, *, name: str, seq: int, event: str, key: str | None, within: float
    ) -> StepAnswer | None:
        params = {**_fence(fence), "name": name, "seq": seq, "event": event, "key": key, "timeout": within}
        rows = await self._under_event_lock(event, key, step_sql.WAIT, params)
        return _answer(rows)

    async def _under_event_lock(
        self, name: str, key: str | None, statement: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """EVENT_LOCK then ``statement`` in one transaction, pipelined: one round trip (see fetch_locked)."""
        return await self.fetch_locked(step_sql.EVENT_LOCK, {"name": name, "key": key}, statement, params)

    async def publish_event(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        params = {"name": name, "key": key, "payload": payload, "ttl": ttl, "channel": self.channel}
        rows = await self._under_event_lock(name, key, step_sql.PUBLISH, params)
        return _published(name, key, rows[0])

    def publish_event_sync(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        params = {"name": name, "key": key, "payload": payload, "ttl": ttl, "channel": self.channel}
        rows = self.fetch_locked_sync(step_sql.EVENT_LOCK, {"name": name, "key": key}, step_sql.PUBLISH, params)
        row = rows[0]
        return _published(name, key, row)

    async def purge_expired_events(self) -> int:
        removed = 0
        while True:
            rows = await self.fetch(step_sql.PURGE_EXPIRED, {"batch": PURGE_BATCH})
            batch = int(rows[0]["removed"]) if rows else 0
            removed += batch
            if batch < PURGE_BATCH:
                return removed


def _fence(fence: StepFence) -> dict[str, Any]:
    return {"job_id": fence.job_id, "worker_id": fence.worker_id, "claims": fence.claims}


def _answer(rows: list[dict[str, Any]]) -> StepAnswer | None:
    """No row: the fence missed (the claim is gone)."""
    if not rows:
        return None
    r = rows[0]
    return StepAnswer(state=r["state"], result=r["result"], wake_at=r["wake_at"], matched=bool(r["matched"]))


def _published(name: str, key: str | None, row: dict[str, Any]) -> PublishedEvent:
    return PublishedEvent(
        id=row["id"],
        name=name,
        key=key,
        published_at=row["published_at"],
        expires_at=row["expires_at"],
        woken=int(row["woken"]),
    )
