"""The PostgreSQL driver's shared internals (``PostgresCore``): the pool of one role and the hot
connections in front of it, ``connection()``, ``q()``, ``fetch()``, psycopg errors translated at
this seam, and the schema role (migrate, check_schema, close). Every role mixin of
``PostgresDriver`` (``postgres_enqueue``, ``postgres_work``, ``postgres_operate``, ``steps/postgres``)
subclasses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, LiteralString

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from workhorse._db import migrate as migrations
from workhorse._db.queries import jobs as sql
from workhorse.drivers._wire import WireStatement
from workhorse.drivers.pooler import TIMEZONE_UTC, connect_options, pooled
from workhorse.drivers.wake_throttle import WakeThrottle
from workhorse.errors import ConfigurationError, DatabaseError, SchemaError, WorkhorseError


def jobs_channel(schema: str) -> str:
    """The NOTIFY channel every enqueue wakes and every worker LISTENs on."""
    return f"{schema}{sql.NOTIFY_CHANNEL_SUFFIX}"


_SCHEMA_NAME = re.compile(
    r"^[a-z_][a-z0-9_]{0,47}$"
)  # 48 at most: "<schema>_jobs" and friends stay NOTIFY channels (63)


def check_schema_name(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(
            cause="schema expected a lower-case SQL identifier of at most 48 characters (letters, digits, _), "
            f"got {schema!r}",
            fix="App(schema='workhorse')",
        )
    return schema


REBUILD_EVERY = 1.0  # seconds: a pool whose sessions cannot write is replaced at most this often


def read_only(error: BaseException | None) -> bool:
    """A statement refused because the session cannot write (a standby, a demoted primary, or
    default_transaction_read_only), raised as is or translated."""
    return isinstance(error, psycopg.errors.ReadOnlySqlTransaction) or isinstance(
        getattr(error, "__cause__", None), psycopg.errors.ReadOnlySqlTransaction
    )


def translate(error: psycopg.Error) -> WorkhorseError:
    """Map a psycopg error to the workhorse error a person can act on."""
    if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
        return DatabaseError(
            code="DATABASE_UNAVAILABLE",
            cause=f"the server's session is read-only (a standby, or a primary demoted by a failover): {error}".strip(),
            fix="point WORKHORSE_DATABASE_URL at the primary; workhorse replaces its connections once they can write",
        )
    if isinstance(error, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return SchemaError(
            cause=f"the workhorse tables are missing: {error}".strip(),
            fix="workhorse migrate   # or: await app.migrate()",
        )
    if isinstance(error, psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction):
        return DatabaseError(
            code="DATABASE_UNAVAILABLE",
            cause=f"PostgreSQL could not be reached or refused the connection: {error}".strip(),
            fix='check the server is up and WORKHORSE_DATABASE_URL is right: psql "$WORKHORSE_DATABASE_URL"',
        )
    refused = DatabaseError(
        cause=f"PostgreSQL refused a statement ({type(error).__name__}): {error}".strip(),
        fix="read the message above; if it names a workhorse table, run: workhorse migrate",
    )
    refused.refused_data = isinstance(error, psycopg.DataError | psycopg.IntegrityError)
    return refused


@contextlib.contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as error:
        raise translate(error) from error


def _numbered(statement: str) -> str:
    """``%s`` placeholders as ``$1``, ``$2``, ... for a statement prepared through libpq."""
    count = iter(range(1, statement.count("%s") + 1))
    return re.sub("%s", lambda _: f"${next(count)}", statement)


# A driver keeps a couple of idle connections borrowed from its pool, so the next statement skips
# the pool's getconn/putconn: about 30 us of client CPU and 50 us of wall time per statement on a
# 2-core machine, a sixth of a single enqueue. Every HOT_USES-th return goes back through the pool
# after all, so its lifetime and health policies still see every connection. A connection never
# goes on the stack while a caller waits in the pool: with a one-connection pool (each worker role)
# that caller would otherwise wait for its pool timeout.
HOT_CONNECTIONS = 2
HOT_USES = 1000


BEGIN: LiteralString = "begin"
COMMIT: LiteralString = "commit"


class _Borrowed:
    """What ``PostgresDriver.connection()`` answers: a connection taken from the driver's hot
    stack or from the pool, and given back (getconn/putconn, without the pool's own context
    manager: every workhorse connection is in autocommit, so its commit-or-rollback on exit has
    nothing to do, and the pool still rolls back and warns about a connection returned inside a
    transaction). Only a connection that ended cleanly, idle, goes back on the hot stack; any
    other goes to the pool, which resets or discards it. psycopg errors, raised inside or by the
    pool, become workhorse errors. A class, not a generator: it sits on every statement."""

    __slots__ = ("_conn", "_driver")

    def __init__(self, driver: PostgresCore) -> None:
        self._driver = driver

    async def __aenter__(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        driver = self._driver
        if driver._hot:
            self._conn = driver._hot.pop()
            return self._conn
        try:
            pool = driver._pool if driver._pool is not None else await driver._open_pool()
            self._conn = await pool.getconn()
        except psycopg.Error as error:
            raise translate(error) from error
        except TimeoutError as error:  # psycopg_pool.PoolTimeout subclasses OperationalError; belt and braces
            raise translate(psycopg.OperationalError(str(error))) from error
        return self._conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        driver, conn = self._driver, self._conn
        pool = driver._pool
        if (
            error is None
            and pool is not None
            and len(driver._hot) < HOT_CONNECTIONS
            and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
            and not pool.get_stats().get("requests_waiting")  # a caller queued in the pool gets it first
        ):
            driver._returns += 1
            if driver._returns % HOT_USES:
                driver._hot.append(conn)
                return
        try:
            if pool is not None:
                await pool.putconn(conn)
                if error is not None and conn.broken:
                    await driver.sweep(pool)
                elif read_only(error):
                    await driver.rebuild(pool)
            else:  # the driver closed while this connection was out
                await conn.close()
        except psycopg.Error as failed:
            if error is None:
                raise translate(failed) from failed
        if isinstance(error, psycopg.Error):
            raise translate(error) from error
        if isinstance(error, TimeoutError):
            raise translate(psycopg.OperationalError(str(error))) from error


class PostgresCore:
    """What every role of ``PostgresDriver`` builds on: one pool per ``role`` (its connections named
    ``workhorse:<role>``), the hot connections in front of it, the statements with the schema filled
    in, and the schema role. Every attribute of the driver is set here; the role mixins add methods."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = "workhorse",
        role: str = "app",
        min_size: int = 1,
        max_size: int = 10,
        generic_plans: bool = False,
    ) -> None:
        self.url = url
        self.pooled = pooled()  # WORKHORSE_POOLER=transaction (drivers/pooler.py)
        self.generic_plans = generic_plans
        self.schema = check_schema_name(schema)
        self.role = role
        self.channel = jobs_channel(self.schema)
        self._min_size = min_size
        self._max_size = max_size
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] | None = None
        self._sync_pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] | None = None
        self._statements: dict[str, LiteralString] = {}
        self._hot: list[psycopg.AsyncConnection[dict[str, Any]]] = []  # see HOT_CONNECTIONS
        self._opening: asyncio.Lock | None = None
        self._opened: weakref.WeakSet[psycopg.AsyncConnection[dict[str, Any]]] = weakref.WeakSet()  # for abandon()
        self._returns = 0
        self._rebuilt_at = -REBUILD_EVERY  # see rebuild()
        self._insert_ready = WireStatement("workhorse_insert_ready", _numbered(self.q(sql.INSERT_READY)))
        self._insert_quiet = WireStatement("workhorse_insert_quiet", _numbered(self.q(sql.INSERT_READY_QUIET)))
        self._wakes = WakeThrottle(self._send_wakes)

    # -- plumbing -------------------------------------------------------------------------------

    async def rebuild(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]) -> None:
        """A session could not write: after a failover the pool's connections are on a node that no
        longer takes writes, and each would fail every call for its lifetime. Replace them all (hot
        ones included), at most once a second, so new sessions reach whichever node now can."""
        now = time.monotonic()
        if now - self._rebuilt_at < REBUILD_EVERY:
            return
        self._rebuilt_at = now
        hot, self._hot = self._hot, []
        for conn in hot:
            await pool.putconn(conn)
        await pool.drain()

    async def sweep(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]) -> None:
        """A connection broke under a statement (the server restarted, or an operator terminated
        the sessions): its idle siblings may be dead too. Test each (hot ones included) and replace
        the dead, so the caller's retry gets a live connection instead of the next dead one."""
        hot, self._hot = self._hot, []
        for conn in hot:
            await pool.putconn(conn)
        await pool.check()

    def connect_kwargs(self) -> dict[str, Any]:
        return connect_options(
            {
                "autocommit": True,
                "application_name": f"workhorse:{self.role}",
                # A worker role runs the same few statements thousands of times: a generic plan is
                # planned once per connection (the claim's CTE costs more to plan than to run).
                "options": "-c TimeZone=UTC" + (" -c plan_cache_mode=force_generic_plan" if self.generic_plans else ""),
                "row_factory": dict_row,
                "connect_timeout": 10,
                "client_encoding": "UTF8",  # the enqueue's wire statement sends UTF-8 text
            }
        )

    def q(self, statement: str) -> LiteralString:
        """A named statement with the schema filled in (cached)."""
        cached = self._statements.get(statement)
        if cached is None:
            cached = statement.replace("{schema}", self.schema)
            self._statements[statement] = cached
        return cached

    async def _open_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]:
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()  # the callers that find no pool wait for the first to open one
        async with self._opening:
            if self._pool is None:
                pool: AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
                    self.url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    kwargs=self.connect_kwargs(),
                    open=False,
                    name=f"workhorse:{self.role}",
                    timeout=10,
                    reconnect_timeout=300,  # keep trying with backoff; our loops report each failure
                    configure=self._opened_one,
                )
                # Opened with its first connection made: a connect left in flight when a short-lived
                # loop ends (asyncio.run(job.enqueue(...))) is cancelled inside a pool worker, which
                # psycopg_pool 3.3 swallows, and asyncio.run then waits for that worker forever.
                try:
                    with translated():
                        await pool.open(wait=True, timeout=10)
                except BaseException:
                    await pool.close()  # the next call opens a fresh one; none is left retrying
                    raise
                self._pool = pool
        return self._pool

    async def _opened_one(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        self._opened.add(conn)
        if self.pooled:
            await conn.execute(TIMEZONE_UTC)  # a parameter PgBouncer carries (drivers/pooler.py)

    def _opened_sync(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        if self.pooled:
            conn.execute(TIMEZONE_UTC)

    def abandon(self) -> None:
        """The event loop this driver's pool ran on has ended, so the pool cannot be closed: close
        its connections now, synchronously (libpq's own close), and forget the pool. The sync pool
        is untouched (it belongs to no loop)."""
        pool, self._pool, self._hot, self._opening = self._pool, None, [], None
        if pool is not None:
            # Its worker tasks died with their loop; marked closed, its __del__ does not try to
            # stop them on a loop that is gone (psycopg_pool reads this flag there).
            pool._closed = True
        for conn in list(self._opened):
            if not conn.closed:
                with contextlib.suppress(Exception):  # already gone on the server's side: nothing to do
                    conn.pgconn.finish()
        self._opened = weakref.WeakSet()

    def connection(self) -> _Borrowed:
        """``async with driver.connection() as conn``: a pooled connection, psycopg errors translated."""
        return _Borrowed(self)

    @contextlib.contextmanager
    def sync_connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        if self._sync_pool is None:
            self._sync_pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self._max_size,
                configure=self._opened_sync,
                kwargs=self.connect_kwargs(),
                open=True,
                name=f"workhorse:{self.role}:sync",
                timeout=30,
            )
        borrowed: psycopg.Connection[dict[str, Any]] | None = None
        try:
            with self._sync_pool.connection() as borrowed:
                yield borrowed
        except psycopg.Error as error:
            if borrowed is not None and borrowed.broken:
                self._sync_pool.check()  # its idle siblings may be dead too (see sweep)
            elif read_only(error) and time.monotonic() - self._rebuilt_at >= REBUILD_EVERY:
                self._rebuilt_at = time.monotonic()
                self._sync_pool.drain()  # see rebuild
            raise translate(error) from error

    async def fetch(self, statement: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with self.connection() as conn:
            cur = await conn.execute(self.q(statement), params)
            return await cur.fetchall() if cur.description else []

    async def fetch_locked(
        self, lock: str, lock_params: dict[str, Any] | None, statement: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``lock`` (a transaction-scoped advisory lock), then ``statement`` under it, in one
        transaction whose BEGIN, both statements and COMMIT reach the server in one write: one
        round trip, and the server ends the transaction (releasing the lock) whatever becomes of
        this process once it has sent them. A transaction left open until its answer came back
        would hold the lock for as long as a frozen process stays frozen (SIGSTOP, a pause), and
        every other holder would wait."""
        async with self.connection() as conn:
            try:
                async with conn.pipeline() as pipeline:
                    await conn.execute(BEGIN)
                    await conn.execute(self.q(lock), lock_params)
                    cur = await conn.execute(self.q(statement), params)
                    await conn.execute(COMMIT)
                    await pipeline.sync()
                rows: list[dict[str, Any]] = await cur.fetchall()
            except psycopg.Error:
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    await conn.rollback()
                raise
            return rows

    def fetch_locked_sync(
        self, lock: str, lock_params: dict[str, Any] | None, statement: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``fetch_locked`` for synchronous callers, on the sync pool."""
        with self.sync_connection() as conn:
            try:
                with conn.pipeline() as pipeline:
                    conn.execute(BEGIN)
                    conn.execute(self.q(lock), lock_params)
                    cur = conn.execute(self.q(statement), params)
                    conn.execute(COMMIT)
                    pipeline.sync()
                rows: list[dict[str, Any]] = cur.fetchall()
            except psycopg.Error:
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            return rows

    async def _send_wakes(self, queues: Sequence[str]) -> None:
        """Wake ``queues`` (the enqueue role sends; other roles owe none)."""

    async def close(self) -> None:
        await self._wakes.close()  # owed wakes go out while the pool is still open
        self._opening = None  # an asyncio.Lock belongs to the loop it was first used on
        if self._pool is not None:
            pool, self._pool = self._pool, None
            hot, self._hot = self._hot, []
            for conn in hot:
                await pool.putconn(conn)
            await pool.close()
        if self._sync_pool is not None:
            sync_pool, self._sync_pool = self._sync_pool, None
            sync_pool.close()

    # -- schema ---------------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        with translated():
            conn = await psycopg.AsyncConnection.connect(
                self.url, **{**self.connect_kwargs(), "application_name": "workhorse:migrate"}
            )
        try:
            with translated():
                return await migrations.apply(conn, self.schema)
        finally:
            await conn.close()

    async def check_schema(self) -> None:
        async with self.connection() as conn:
            await migrations.check(conn, self.schema)


_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


def _is_uuid(value: str) -> bool:
    """fullmatch: ``$`` would let a trailing newline through."""
    return isinstance(value, str) and bool(_UUID.fullmatch(value))
