"""The transactional outbox: jobs staged in the caller's own transaction, in any PostgreSQL
database, and moved into the queue by a relay (``workhorse.outbox.relay.Relay``, ``workhorse relay``).

``Outbox(app).stage(conn, handle, payload, ...)`` validates exactly as ``handle.enqueue`` does
(``JobHandle.build``: payload, tenant, key, delay, priority), then writes ONE row to
``{schema}.outbox`` on ``conn`` and nothing anywhere else: the job exists in the queue if and only
if that transaction commits. The row's id (a UUIDv7, ``workhorse.ids``) is the job's id. The stage
statement also sends a NOTIFY, delivered at COMMIT, that wakes the relay.

``outbox.migrate(conn)`` (``workhorse outbox migrate --source URL``) installs the staging table
from ``_db/outbox_migrations/``, recorded in ``{schema}.outbox_migrations`` under an advisory lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, LiteralString

import workhorse.outbox.queries as sql
from workhorse._db.migrate import available
from workhorse.connections import driver_connection, driver_connection_sync
from workhorse.drivers.postgres_enqueue import _insert_params
from workhorse.durations import Duration
from workhorse.errors import ConfigurationError
from workhorse.jobs import JobHandle
from workhorse.outbox.source import (
    Plan,
    check_conn,
    execute_on_callers,
    execute_on_callers_sync,
    migrate_on_callers,
    migrate_on_callers_sync,
    migrate_url,
)
from workhorse.types import JobRef, NewJob

if TYPE_CHECKING:
    from workhorse.app import App

OUTBOX_CHANNEL_SUFFIX = "_outbox"


def outbox_channel(schema: str) -> str:
    """The NOTIFY channel a stage wakes and a relay LISTENs on, in the source database."""
    return f"{schema}{OUTBOX_CHANNEL_SUFFIX}"


class Outbox:
    """Stage jobs in another database's transactions; ``relay()`` moves them into ``app``'s queue.

    The staging table lives in the schema of the app (``App(schema=)``, ``workhorse`` by default)
    of whatever database ``conn`` is connected to."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.schema = app.schema
        self.channel = outbox_channel(self.schema)
        self._statements: dict[str, LiteralString] = {}

    def q(self, statement: str) -> LiteralString:
        cached = self._statements.get(statement)
        if cached is None:
            cached = self._statements[statement] = statement.replace("{schema}", self.schema)
        return cached

    # -- staging ------------------------------------------------------------------------------------

    async def stage(
        self,
        conn: Any,
        handle: JobHandle[Any],
        payload: Any,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> JobRef:
        """Stage one job on ``conn`` (a psycopg ``AsyncConnection`` or ``Connection``), inside its
        open transaction. Answers the ref the job will have: its id, ``duplicate`` False (whether a
        live job holds its key is known when the relay moves it). Refused before anything is written
        when the payload, tenant, key or options would be refused by ``enqueue``."""
        job = _handle(handle).build(payload, key=key, delay=delay, run_at=run_at, priority=priority)
        await self._write(conn, [job])
        return JobRef(job.id)

    def stage_sync(
        self,
        conn: Any,
        handle: JobHandle[Any],
        payload: Any,
        *,
        key: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> JobRef:
        """``stage`` for synchronous code, on a psycopg ``Connection``."""
        job = _handle(handle).build(payload, key=key, delay=delay, run_at=run_at, priority=priority)
        self._write_sync(conn, [job])
        return JobRef(job.id)

    async def stage_many(
        self,
        conn: Any,
        handle: JobHandle[Any],
        payloads: Sequence[Any],
        *,
        keys: Sequence[str | None] | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> list[JobRef]:
        """Stage a batch in one statement on ``conn``: every row validated first, so a refused one
        stages none. ``keys``, when given, pairs one key with each payload."""
        jobs = _handle(handle)._build_many(payloads, keys=keys, delay=delay, run_at=run_at, priority=priority)
        await self._write(conn, jobs)
        return [JobRef(job.id) for job in jobs]

    def stage_many_sync(
        self,
        conn: Any,
        handle: JobHandle[Any],
        payloads: Sequence[Any],
        *,
        keys: Sequence[str | None] | None = None,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> list[JobRef]:
        """``stage_many`` for synchronous code, on a psycopg ``Connection``."""
        jobs = _handle(handle)._build_many(payloads, keys=keys, delay=delay, run_at=run_at, priority=priority)
        self._write_sync(conn, jobs)
        return [JobRef(job.id) for job in jobs]

    async def _write(self, conn: Any, jobs: Sequence[NewJob]) -> None:
        conn = await driver_connection(conn)  # a SQLAlchemy or Django connection: its psycopg one
        check_conn(conn, "stage")  # an empty batch writes nothing, and still checks what it was handed
        if jobs:
            await execute_on_callers(conn, self.schema, self.q(sql.STAGE), _insert_params(jobs, self.channel))

    def _write_sync(self, conn: Any, jobs: Sequence[NewJob]) -> None:
        conn = driver_connection_sync(conn)
        check_conn(conn, "stage", sync=True)
        if jobs:
            execute_on_callers_sync(conn, self.schema, self.q(sql.STAGE), _insert_params(jobs, self.channel))

    # -- the staging table ----------------------------------------------------------------------

    async def migrate(self, conn: Any) -> list[int]:
        """Install or upgrade the staging table in ``conn``'s database (sync or async psycopg
        connection); answers the versions applied now. Safe to run concurrently and again."""
        return await migrate_on_callers(await driver_connection(conn), self.schema, self._migration_plan())

    def migrate_sync(self, conn: Any) -> list[int]:
        """``migrate`` on a synchronous psycopg ``Connection``."""
        return migrate_on_callers_sync(driver_connection_sync(conn), self.schema, self._migration_plan())

    def migrate_source(self, url: str, *, shown: str | None = None) -> list[int]:
        """``migrate`` on a connection of its own to ``url`` (``workhorse outbox migrate --source``);
        ``shown`` is the URL as a refusal prints it (a password hidden)."""
        return migrate_url(url, self.schema, self._migration_plan(), url if shown is None else shown)

    def _migration_plan(self) -> Plan:
        """The migration as statements, free of I/O: each is sent its rows; returns what it applied."""
        applied: list[int] = []
        yield sql.LOCK, {"schema": self.schema}
        yield self.q(sql.CREATE_SCHEMA), None
        yield self.q(sql.CREATE_LEDGER), None
        rows = yield self.q(sql.APPLIED), None
        done = {row[0] if isinstance(row, tuple | list) else row["version"] for row in rows}
        for migration in available("outbox_migrations"):
            if migration.version in done:
                continue
            yield migration.statement(self.schema), None
            yield self.q(sql.RECORD), {"version": migration.version, "name": migration.name}
            applied.append(migration.version)
        return applied


def _handle(handle: Any) -> JobHandle[Any]:
    if not isinstance(handle, JobHandle):
        raise ConfigurationError(
            cause=f"stage expected a declared job (the handle @app.job returns), got {type(handle).__name__}",
            fix="outbox.stage(conn, send_welcome, payload)   # send_welcome declared with @app.job",
        )
    return handle
