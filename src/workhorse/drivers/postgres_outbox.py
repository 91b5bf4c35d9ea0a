"""The PostgreSQL driver's outbox role (``PostgresOutbox``): the relay's one statement in the
queue, a claimed batch of staged rows inserted under their own ids (``_db/queries/outbox.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workhorse._db.queries import outbox as sql
from workhorse.drivers.base import NewJob
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.drivers.postgres_enqueue import _insert_params


class PostgresOutbox(PostgresCore):
    """The outbox role: ``enqueue_staged``, one statement and its own transaction per batch."""

    async def enqueue_staged(self, jobs: Sequence[NewJob]) -> list[str]:
        """Insert ``jobs`` keeping their ids; answer each one's outcome, in order: ``enqueued``,
        ``present`` (a job with its id exists: moved before) or ``duplicate`` (a live job holds its
        idempotency key). Committed when it returns (the pool's connections are in autocommit)."""
        if not jobs:
            return []
        params: dict[str, Any] = _insert_params(jobs, self.channel)
        rows = await self.fetch(sql.ENQUEUE_STAGED, params)
        outcome = {row["id"]: row["outcome"] for row in rows}
        return [outcome[job.id] for job in jobs]
