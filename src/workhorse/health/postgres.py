"""The PostgreSQL driver's health role (``PostgresHealth``): the table statistics and horizon
holders (``health/queries.py``) on the pool, and one table's vacuum on a connection of its own.

Design: docs/guides/vacuum.md
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import sql as pgsql

import workhorse.health.queries as sql
from workhorse.drivers.postgres_core import PostgresCore, translated
from workhorse.health.report import SLOT_AGE, HorizonHolder

CANCEL_GRACE = 5.0  # seconds past the server's statement_timeout before the client cancels itself


class PostgresHealth(PostgresCore):
    async def table_health(self) -> tuple[bool, list[tuple[str, int, int, float | None]]]:
        rows = await self.fetch(sql.TABLE_HEALTH, {"schema": self.schema})
        autovacuum = bool(rows[0]["autovacuum"]) if rows else True
        return autovacuum, [(r["table"], int(r["live"]), int(r["dead"]), r["vacuumed_ago"]) for r in rows]

    async def horizon_holders(self, after: float, slot_age: int = SLOT_AGE) -> list[HorizonHolder]:
        rows = await self.fetch(sql.HORIZON_HOLDERS, {"after": after, "slot_age": slot_age})
        return [HorizonHolder(**row) for row in rows]

    async def vacuum_table(self, table: str, limit: float) -> float:
        """A fresh connection, closed after: no session state reaches a pooled connection. Direct,
        the server's ``statement_timeout`` comes as a startup option; behind a transaction pooler
        (which refuses startup options, and would hand a SET on to its next client) the client
        cancels the statement at ``limit`` instead."""
        kwargs: dict[str, Any] = self.connect_kwargs()
        kwargs["application_name"] = "workhorse:vacuum"
        wait = limit
        if "options" in kwargs:
            kwargs["options"] += f" -c statement_timeout={max(1, int(limit * 1000))}"
            wait = limit + CANCEL_GRACE
        statement = pgsql.SQL(sql.VACUUM_TABLE).format(
            schema=pgsql.Identifier(self.schema), table=pgsql.Identifier(table)
        )
        started = time.monotonic()
        with translated():
            conn = await psycopg.AsyncConnection.connect(self.url, **kwargs)
            try:
                await asyncio.wait_for(conn.execute(statement), timeout=wait)
            except TimeoutError:
                raise psycopg.errors.QueryCanceled(f"the vacuum of {table} ran past {limit:g}s") from None
            finally:
                await conn.close()
        return time.monotonic() - started
