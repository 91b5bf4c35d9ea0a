"""The PostgreSQL driver's retention role (``PostgresRetention``): the purge, a small batch per
statement (``retention/queries.py``), each its own transaction on a pooled connection, so
no lock is held longer than one batch takes and claims and settles go on beside it.
"""

from __future__ import annotations

import workhorse.retention.queries as sql
from workhorse.drivers.postgres_core import PostgresCore
from workhorse.types import Purged, PurgePolicy


class PostgresRetention(PostgresCore):
    async def purge(self, policy: PurgePolicy, *, dry_run: bool = False) -> Purged:
        removed: dict[str, int] = {}
        steps = 0
        for target, age in policy.ages.items():
            if target in sql.JOB_TARGETS:
                purge, count = sql.PURGE_JOBS, sql.COUNT_JOBS
                params = {"state": target, "age": age, "batch": policy.batch}
            else:
                purge, count = sql.STATEMENTS[target]
                params = {"age": age, "batch": policy.batch}
            if dry_run:
                row = (await self.fetch(count, params))[0]
                removed[target], steps = int(row["removed"]), steps + int(row["steps"])
                continue
            total = 0
            while True:  # until a batch comes back short: what is left is younger, or held right now
                row = (await self.fetch(purge, params))[0]
                total, steps = total + int(row["removed"]), steps + int(row["steps"] or 0)
                if int(row["removed"]) < policy.batch:
                    break
            removed[target] = total
        return Purged(removed, steps)
