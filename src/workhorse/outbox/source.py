"""The outbox's PostgreSQL side in a source database: the stage on the caller's own connection,
the staging table's migration there, and ``OutboxSource``, the relay's one connection to a source
(claim, mark, release, purge, the LISTEN wait). psycopg errors become workhorse errors here; a
missing staging table is ``OUTBOX_NOT_MIGRATED``, whose fix is the outbox's migrate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator, Iterator
from typing import Any, LiteralString

import psycopg
import psycopg.errors
from psycopg.rows import dict_row

import workhorse.outbox.queries as sql
from workhorse.drivers.postgres_core import translate
from workhorse.errors import ConfigurationError, DatabaseError, SchemaError, WorkhorseError
from workhorse.types import NewJob

# A migration as statements, free of I/O: each statement is sent its rows; returns the versions applied.
Plan = Generator[tuple[LiteralString, dict[str, Any] | None], list[Any], list[int]]


def not_migrated(schema: str, detail: str = "") -> SchemaError:
    return SchemaError(
        code="OUTBOX_NOT_MIGRATED",
        cause=f"the staging table {schema}.outbox does not exist in this database{detail}",
        fix="workhorse outbox migrate --source URL   # or: await outbox.migrate(conn)",
    )


@contextlib.contextmanager
def translated(schema: str) -> Iterator[None]:
    try:
        yield
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as error:
        raise not_migrated(schema, f": {error}".rstrip()) from error
    except psycopg.Error as error:
        raise translate(error) from error


def bad_conn(conn: Any, verb: str) -> WorkhorseError:
    return ConfigurationError(
        code="CONN_INVALID",
        cause=f"outbox.{verb} expected an open psycopg Connection or AsyncConnection, got {type(conn).__name__}",
        fix=f"pass the psycopg connection whose transaction the job must join: outbox.{verb}(conn, ...)",
    )


def check_conn(conn: Any, verb: str, *, sync: bool = False) -> None:
    """Refuse anything but a psycopg connection (``sync``: a synchronous one)."""
    kinds = psycopg.Connection if sync else (psycopg.Connection, psycopg.AsyncConnection)
    if not isinstance(conn, kinds):
        raise bad_conn(conn, verb)


async def execute_on_callers(conn: Any, schema: str, statement: LiteralString, params: dict[str, Any]) -> None:
    """One statement on the caller's connection (async or sync), inside whatever it has open."""
    if isinstance(conn, psycopg.Connection):
        execute_on_callers_sync(conn, schema, statement, params)
        return
    if not isinstance(conn, psycopg.AsyncConnection):
        raise bad_conn(conn, "stage")
    with translated(schema):
        await conn.execute(statement, params)


def execute_on_callers_sync(conn: Any, schema: str, statement: LiteralString, params: dict[str, Any]) -> None:
    if not isinstance(conn, psycopg.Connection):
        raise bad_conn(conn, "stage")
    with translated(schema):
        conn.execute(statement, params)


async def migrate_on_callers(conn: Any, schema: str, plan: Plan) -> list[int]:
    """Drive ``plan`` on the caller's connection in one transaction (a savepoint inside its own)."""
    if isinstance(conn, psycopg.Connection):
        return migrate_on_callers_sync(conn, schema, plan)
    if not isinstance(conn, psycopg.AsyncConnection):
        raise bad_conn(conn, "migrate")
    statement, params = next(plan)
    with translated(schema):
        async with conn.transaction():
            while True:
                cur = await conn.execute(statement, params)
                rows = await cur.fetchall() if cur.description else []
                try:
                    statement, params = plan.send(rows)
                except StopIteration as done:
                    applied: list[int] = done.value
                    return applied


def migrate_on_callers_sync(conn: Any, schema: str, plan: Plan) -> list[int]:
    if not isinstance(conn, psycopg.Connection):
        raise bad_conn(conn, "migrate")
    statement, params = next(plan)
    with translated(schema), conn.transaction():
        while True:
            cur = conn.execute(statement, params)
            rows = cur.fetchall() if cur.description else []
            try:
                statement, params = plan.send(rows)
            except StopIteration as done:
                applied: list[int] = done.value
                return applied


def migrate_url(url: str, schema: str, plan: Plan, shown: str) -> list[int]:
    """``plan`` on a connection of its own to ``url`` (``workhorse outbox migrate --source URL``)."""
    with connect_direct(url, shown) as conn:
        return migrate_on_callers_sync(conn, schema, plan)


def source_unavailable(shown: str, error: BaseException) -> DatabaseError:
    return DatabaseError(
        code="OUTBOX_SOURCE_UNAVAILABLE",
        cause=f"the source database {shown} could not be reached: {error}".strip(),
        fix="check the server is up and the --source URL is right: psql 'URL'",
    )


def connect_direct(url: str, shown: str) -> psycopg.Connection[Any]:
    """One direct connection to a source, outside any pool; an unreachable source is
    OUTBOX_SOURCE_UNAVAILABLE with PostgreSQL's own reason (``shown``: the URL as printed)."""
    try:
        return psycopg.connect(url, connect_timeout=10, application_name="workhorse:cli", autocommit=True)
    except psycopg.Error as error:
        raise source_unavailable(shown, error) from error


def check_source(url: str, schema: str, shown: str) -> None:
    """Connect once, directly: an unreachable source is OUTBOX_SOURCE_UNAVAILABLE, a source
    without the staging table OUTBOX_NOT_MIGRATED (``workhorse relay`` checks before it starts)."""
    with translated(schema), connect_direct(url, shown) as conn:
        row = conn.execute(sql.TABLE_EXISTS, {"table": f"{schema}.outbox"}).fetchone()
    if not (row and row[0]):
        raise not_migrated(schema, f" ({shown})")


def _job(row: dict[str, Any]) -> NewJob:
    return NewJob(
        id=row["id"],
        name=row["name"],
        queue=row["queue"],
        tenant=row["tenant"],
        payload=row["payload"],
        key=row["idempotency_key"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        dead_letter=row["dead_letter"],
        run_at=row["run_at"],
        delay=float(row["delay"] or 0.0),
        flow_key=row["flow_key"],
        traceparent=row["traceparent"],
    )


class OutboxSource:
    """The relay's connection to one source database (``application_name`` ``workhorse:relay``),
    in autocommit, LISTENing on the outbox channel. Every method raises ``DatabaseError`` when
    the source is gone; ``connect`` raises ``OUTBOX_NOT_MIGRATED`` when the table is missing."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self._conn: psycopg.AsyncConnection[dict[str, Any]] | None = None
        self._statements: dict[str, LiteralString] = {}

    def q(self, statement: str) -> LiteralString:
        cached = self._statements.get(statement)
        if cached is None:
            cached = self._statements[statement] = statement.replace("{schema}", self.schema)
        return cached

    @property
    def conn(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        if self._conn is None:
            raise DatabaseError(code="DATABASE_UNAVAILABLE", cause="the source is not connected", fix="connect first")
        return self._conn

    async def connect(self) -> None:
        with translated(self.schema):
            conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                row_factory=dict_row,
                application_name="workhorse:relay",
                connect_timeout=10,
                options="-c TimeZone=UTC",
                # A session that went silent (half-open TCP) fails within about 25 s instead of
                # hanging the loop's next statement: the relay then reconnects.
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
            try:
                cur = await conn.execute(sql.TABLE_EXISTS, {"table": f"{self.schema}.outbox"})
                row = await cur.fetchone()
                if not (row and row["present"]):
                    raise not_migrated(self.schema)
                await conn.execute(self.q(sql.LISTEN))
            except BaseException:
                await conn.close()
                raise
        self._conn = conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def claim(self, batch: int, relay_id: str, lease: float) -> list[NewJob]:
        with translated(self.schema):
            cur = await self.conn.execute(self.q(sql.CLAIM), {"batch": batch, "relay_id": relay_id, "lease": lease})
            return [_job(row) for row in await cur.fetchall()]

    async def mark(self, ids: list[str], outcomes: list[str]) -> None:
        with translated(self.schema):
            await self.conn.execute(self.q(sql.MARK_PUBLISHED), {"ids": ids, "outcomes": outcomes})

    async def release(self, ids: list[str], relay_id: str) -> None:
        with translated(self.schema):
            await self.conn.execute(self.q(sql.RELEASE), {"ids": ids, "relay_id": relay_id})

    async def purge(self, age: float, batch: int) -> int:
        """One batch of published rows older than ``age`` seconds removed; answers how many."""
        with translated(self.schema):
            cur = await self.conn.execute(self.q(sql.PURGE_PUBLISHED), {"age": age, "batch": batch})
            return max(cur.rowcount, 0)

    async def backlog(self) -> dict[str, int]:
        with translated(self.schema):
            cur = await self.conn.execute(self.q(sql.BACKLOG))
            row = await cur.fetchone()
        return {"pending": int(row["pending"]), "published": int(row["published"])} if row else {}

    async def wait(self, seconds: float, stopping: asyncio.Event) -> None:
        """Until a NOTIFY on the channel, ``seconds``, or ``stopping``. A NOTIFY that arrived while
        a statement ran is kept by psycopg and answered here at once. On a stop the connection is
        closed (a wait cancelled mid-read leaves it unusable); the caller is leaving anyway."""
        conn = self.conn

        async def one_notify() -> None:
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                pass

        waiter = asyncio.ensure_future(one_notify())
        stopper = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                    await waiter
                await self.close()
        if not waiter.cancelled():
            with translated(self.schema):
                waiter.result()  # a connection that failed while waiting raises here
