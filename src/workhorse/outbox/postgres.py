"""The PostgreSQL driver's outbox role (``PostgresOutbox``): the relay's one statement in the
queue, a claimed batch of staged rows inserted under their own ids (``outbox/queries.py``), each
id recorded in ``{schema}.outbox_received`` so it never becomes a job twice; and the purge of those
tombstones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import workhorse.outbox.queries as sql
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.drivers.postgres_enqueue import _insert_params
from workhorse.types import NewJob


class PostgresOutbox(PostgresCore):
    """The outbox role: ``enqueue_staged``, one statement and its own transaction per batch, and
    ``purge_received``."""

    async def enqueue_staged(self, jobs: Sequence[NewJob]) -> list[str]:
        """Insert ``jobs`` keeping their ids; answer each one's outcome, in order: ``enqueued``,
        ``present`` (its id was received before, even if that job is gone since: moved before) or
        ``duplicate`` (a live job holds its idempotency key). Committed when it returns (the pool's
        connections are in autocommit)."""
        if not jobs:
            return []
        params: dict[str, Any] = _insert_params(jobs, self.channel)
        rows = await self.fetch(sql.ENQUEUE_STAGED, params)
        outcome = {row["id"]: row["outcome"] for row in rows}
        return [outcome[job.id] for job in jobs]

    async def purge_received(self, age: float, batch: int) -> int:
        """One batch of tombstones received more than ``age`` seconds ago removed; answers how many."""
        rows = await self.fetch(sql.PURGE_RECEIVED, {"age": age, "batch": batch})
        return int(rows[0]["removed"])
