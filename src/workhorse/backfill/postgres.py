"""The backfill ledger on PostgreSQL (``workhorse.backfill``): one dedicated connection per pass
or dry run, its statements (``backfill/queries.py``), and the transactions a batch runs in.

Design: docs/guides/backfills.md
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row

import workhorse.backfill.queries as sql
from workhorse.drivers.pooler import TIMEZONE_UTC, connect_options, pooled
from workhorse.drivers.postgres_core import translated


class PassLedger:
    """The ledger's statements on one connection (``open_ledger``)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], schema: str) -> None:
        self.conn = conn
        self.schema = schema

    def transaction(self, *, rollback: bool = False) -> AbstractAsyncContextManager[Any]:
        return _batch(self.conn, rollback)

    async def _rows(self, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        text: Any = statement.replace("{schema}", self.schema)  # the schema name is checked where the App is built
        with translated():
            cur = self.conn.cursor(row_factory=dict_row)
            await cur.execute(text, params)
            return await cur.fetchall() if cur.description is not None else []

    async def lock_name(self, name: str) -> None:
        await self._rows(sql.LOCK_NAME, {"schema": self.schema, "name": name})

    async def running(self, name: str) -> dict[str, Any] | None:
        rows = await self._rows(sql.RUNNING_ROW, {"name": name})
        return rows[0] if rows else None

    async def completed(self, name: str, environment: str) -> dict[str, Any] | None:
        rows = await self._rows(sql.COMPLETED_ROW, {"name": name, "environment": environment})
        return rows[0] if rows else None

    async def insert(self, name: str, checksum: str, environment: str, forced: bool) -> int:
        rows = await self._rows(
            sql.INSERT_ROW, {"name": name, "checksum": checksum, "environment": environment, "forced": forced}
        )
        return int(rows[0]["id"])

    async def set_job(self, pass_id: int, job_id: str) -> None:
        await self._rows(sql.SET_JOB, {"id": pass_id, "job_id": job_id})

    async def lock_pass(self, pass_id: int) -> dict[str, Any] | None:
        rows = await self._rows(sql.LOCK_ROW, {"id": pass_id})
        return rows[0] if rows else None

    async def rows_written(self) -> int | None:
        """Rows the open transaction has written so far, in any table (None: not counted)."""
        found = await self._rows(sql.ROWS_WRITTEN, {})
        written = found[0]["written"] if found else None
        return None if written is None else int(written)

    async def checkpoint(
        self, pass_id: int, *, cursor: Any, rows: int | None, status: str, remaining: int | None, error: str | None
    ) -> None:
        await self._rows(
            sql.CHECKPOINT,
            {
                "id": pass_id,
                "cursor": None if cursor is None else json.dumps(cursor),
                "rows": rows,
                "status": status,
                "remaining": remaining,
                "error": error,
            },
        )

    async def ran_as(self, pass_id: int, checksum: str) -> None:
        await self._rows(sql.RAN_AS, {"id": pass_id, "checksum": checksum})

    async def fail(self, pass_id: int, error: str) -> None:
        await self._rows(sql.FAIL_ROW, {"id": pass_id, "error": error[:2000]})

    async def read(self, pass_id: int) -> dict[str, Any] | None:
        rows = await self._rows(sql.READ_ROW, {"id": pass_id})
        return rows[0] if rows else None

    async def latest(self, names: list[str]) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in await self._rows(sql.LATEST_ROWS, {"names": names})}

    async def completed_names(self, names: list[str], environment: str) -> set[str]:
        rows = await self._rows(sql.COMPLETED_NAMES, {"names": names, "environment": environment})
        return {row["name"] for row in rows}

    async def our_migration_applied(self, version: int) -> bool:
        rows = await self._rows(sql.OUR_MIGRATION, {"version": version})
        return bool(rows[0]["applied"])

    async def app_migration_applied(self, table: str, match: tuple[tuple[str, str], ...]) -> bool:
        """Whether ``table`` (``name`` or ``schema.name``) has a row with these column values; a table
        that does not exist has none."""
        with translated():
            cur = self.conn.cursor(row_factory=dict_row)
            await cur.execute(sql.TABLE_EXISTS, {"table": table})
            present = await cur.fetchone()
            if present is None or not present["present"]:
                return False
            where = pgsql.SQL(" and ").join(
                pgsql.SQL("{} = {}").format(pgsql.Identifier(column), pgsql.Literal(value)) for column, value in match
            )
            statement = pgsql.SQL(sql.APP_MIGRATION).format(table=pgsql.Identifier(*table.split(".")), where=where)
            await cur.execute(statement)
            row = await cur.fetchone()
            return bool(row is not None and row["applied"])


@asynccontextmanager
async def _batch(conn: psycopg.AsyncConnection[Any], rollback: bool) -> AsyncIterator[Any]:
    """One batch's transaction, which the server ends if it is left idle for ``IDLE_IN_BATCH``
    (a ``SET LOCAL``: nothing outlives the transaction, so a pooled connection's next client
    never inherits it)."""
    async with conn.transaction(force_rollback=rollback) as tx:
        with translated():
            await conn.execute(sql.IDLE_IN_BATCH)
        yield tx


@asynccontextmanager
async def open_ledger(url: str, schema: str) -> AsyncIterator[PassLedger]:
    """One connection for one pass (or dry run, or read), closed at the end. Each batch's
    transaction ends if left idle for ``IDLE_IN_BATCH`` (``_batch``): a runner frozen inside a batch (SIGSTOP, a
    VM paused) would otherwise hold the ledger row's lock, and the runner that re-claimed the job
    would wait on it for as long as the frozen process lived. The batch rolls back; its cursor was
    never moved."""
    with translated():
        conn = await psycopg.AsyncConnection.connect(
            url, **connect_options({"autocommit": True, "application_name": "workhorse:backfill"})
        )
        if pooled():
            await conn.execute(TIMEZONE_UTC)
    try:
        yield PassLedger(conn, schema)
    finally:
        await conn.close()
