"""The PostgreSQL driver: psycopg 3 with a connection pool per role.

Each instance owns one async pool whose connections carry ``application_name`` ``workhorse:<role>``
(``app``, ``claim``, ``settle``, ``heartbeat``...), so an operator can find and kill one role's
backend. Connections run in autocommit: every statement is its own transaction, and no workhorse
connection ever sits ``idle in transaction`` while a job body runs. psycopg errors are translated
at this seam into ``DatabaseError``/``SchemaError``; nothing psycopg-shaped escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, LiteralString

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from workhorse._db import migrate as migrations
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import jobs as sql
from workhorse._db.queries import steps as step_sql
from workhorse._db.queries import workers as worker_sql
from workhorse.drivers import refusals
from workhorse.drivers._wire import WireStatement
from workhorse.drivers.base import (
    LIVE_STATES,
    Beat,
    BulkFilter,
    BulkResult,
    BulkVerb,
    Buried,
    Claimed,
    ClaimResult,
    CounterSum,
    Job,
    JobRef,
    Lease,
    ListFilter,
    NewJob,
    Page,
    PublishedEvent,
    QueuePause,
    Settlement,
    Snapshot,
    StateCount,
    StepAnswer,
    StepFence,
    StepRecord,
    WorkerInfo,
    shown_step,
)
from workhorse.drivers.listener import Listener
from workhorse.errors import ConfigurationError, DatabaseError, SchemaError, WorkhorseError

SHOWN_LIMIT = 1_000  # characters of a step's result or error message that `show` prints
PURGE_BATCH = 1_000  # expired events deleted per statement: short locks, a loop until done
BULK_TRIES = 3  # a bulk requeue racing a keyed enqueue (or another requeue) of the same key is run again
Statement = tuple[LiteralString, dict[str, Any]]


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


def translate(error: psycopg.Error) -> WorkhorseError:
    """Map a psycopg error to the workhorse error a person can act on."""
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
    return DatabaseError(
        cause=f"PostgreSQL refused a statement ({type(error).__name__}): {error}".strip(),
        fix="read the message above; if it names a workhorse table, run: workhorse migrate",
    )


@contextlib.contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as error:
        raise translate(error) from error


def _job(row: dict[str, Any]) -> Job:
    return Job(
        id=row["id"],
        name=row["name"],
        queue=row["queue"],
        tenant=row["tenant"],
        state=row["state"],
        priority=row["priority"],
        payload=row["payload"],
        result=row["result"],
        last_error=row["last_error"],
        progress=row["progress"],
        errors=row["errors"] or [],
        key=row["idempotency_key"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        dead_letter=row["dead_letter"],
        claims=row["claims"],
        worker_id=row["worker_id"],
        lease_expires_at=row["lease_expires_at"],
        run_at=row["run_at"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        updated_at=row["updated_at"],
    )


def _insert_params(jobs: Sequence[NewJob], channel: str) -> dict[str, Any]:
    return {
        "ids": [j.id for j in jobs],
        "names": [j.name for j in jobs],
        "queues": [j.queue for j in jobs],
        "tenants": [j.tenant for j in jobs],
        "payloads": [j.payload for j in jobs],
        "keys": [j.key for j in jobs],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "dead_letters": [j.dead_letter for j in jobs],
        "run_ats": [j.run_at for j in jobs],
        "delays": [j.delay for j in jobs],
        "channel": channel,
    }


COPY_THRESHOLD = 64  # below this, one INSERT ... unnest beats the COPY protocol's extra round trips


_ARRAY_ESCAPES = str.maketrans({'"': '\\"', "\\": "\\\\"})


def pg_array(values: Iterable[str | int | float | None]) -> str:
    """A one-dimensional array in PostgreSQL's text input format, for a parameter the statement
    casts to an array type (``%(ids)s::uuid[]``). psycopg adapts a list element by element in
    Python; on the worker's hot path (every claim and settle) that cost about 250 us of client CPU
    per 8-array settle of 24 rows, against one join here. Every element is quoted, so commas,
    braces, spaces and the word NULL stay data; None is NULL. Only an element holding a quote or
    a backslash is escaped: ``str.translate`` costs about a microsecond even when it changes
    nothing, and ids and numbers never need it."""
    out: list[str] = []
    for v in values:
        if v is None:
            out.append("NULL")
            continue
        text = v if type(v) is str else str(v)
        if '"' in text or "\\" in text:
            text = text.translate(_ARRAY_ESCAPES)
        out.append('"' + text + '"')
    return "{" + ",".join(out) + "}"


async def _on_callers(
    conn: Any,
    run_async: Callable[[psycopg.AsyncConnection[Any]], Awaitable[list[JobRef]]],
    run_sync: Callable[[psycopg.Connection[Any]], list[JobRef]],
) -> list[JobRef]:
    """An enqueue on the caller's connection (``conn=``), async or sync, errors translated."""
    if isinstance(conn, psycopg.AsyncConnection):
        with translated():
            return await run_async(conn)
    if isinstance(conn, psycopg.Connection):
        with translated():
            return run_sync(conn)
    raise _bad_conn(conn)


def _numbered(statement: str) -> str:
    """``%s`` placeholders as ``$1``, ``$2``, ... for a statement prepared through libpq."""
    count = iter(range(1, statement.count("%s") + 1))
    return re.sub("%s", lambda _: f"${next(count)}", statement)


def _wire_text(value: str | int | bool | None) -> bytes | None:
    """One parameter in PostgreSQL's text format: a boolean as t/f, None as NULL."""
    if value is None:
        return None
    if value is True or value is False:
        return b"t" if value else b"f"
    return str(value).encode()


def _plain(job: NewJob) -> bool:
    """No key and due now: INSERT_READY carries it."""
    return job.key is None and job.run_at is None and not job.delay


def _copyable(jobs: Sequence[NewJob]) -> bool:
    """A batch COPY can carry: large, no idempotency key (COPY cannot skip a conflict), due now."""
    return len(jobs) >= COPY_THRESHOLD and all(_plain(j) for j in jobs)


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_field(text: str | None) -> str:
    """One field in COPY's text format: a null is \\N; backslash, tab, newline and CR are escaped."""
    if text is None:
        return "\\N"
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_ESCAPES)
    return text


COPY_CHUNK = 256  # rows per COPY write: small enough that building and ingesting overlap


def _copy_line(j: NewJob) -> str:
    """One row of COPY_READY in COPY's text format (cheaper than a write_row per job)."""
    return (
        f"{j.id}\t{_copy_field(j.name)}\t{_copy_field(j.queue)}\t{_copy_field(j.tenant)}\tready\t{j.priority}\t"
        f"{_copy_field(j.payload)}\t{j.max_attempts}\t{'t' if j.dead_letter else 'f'}\n"
    )


class _Copied:
    """What a streamed COPY took: the refs in order and the queues to wake."""

    __slots__ = ("queues", "refs")

    def __init__(self) -> None:
        self.refs: list[JobRef] = []
        self.queues: set[str] = set()

    def chunks(self, rows: Iterator[NewJob]) -> Iterator[str]:
        """COPY text for ``rows``, COPY_CHUNK rows at a time; a row that fails to build raises here."""
        lines: list[str] = []
        for job in rows:
            lines.append(_copy_line(job))
            self.refs.append(JobRef(job.id))
            self.queues.add(job.queue)
            if len(lines) == COPY_CHUNK:
                yield "".join(lines)
                lines = []
        if lines:
            yield "".join(lines)


def _key_of(job: NewJob) -> tuple[str, str, str]:
    return (job.name, job.tenant or "", job.key or "")


class _Batch:
    """Maps an enqueue batch to refs: in-batch duplicates first, then what the insert answered."""

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self.jobs = list(jobs)
        self.first: dict[tuple[str, str, str], str] = {}
        self.to_insert: list[NewJob] = []
        for job in self.jobs:
            if job.key is not None and _key_of(job) in self.first:
                continue
            if job.key is not None:
                self.first[_key_of(job)] = job.id
            self.to_insert.append(job)

    def missing(self, inserted: set[str]) -> list[NewJob]:
        return [j for j in self.to_insert if j.id not in inserted]

    def lookup_params(self, missing: list[NewJob]) -> dict[str, Any]:
        return {
            "names": [j.name for j in missing],
            "tenants": [j.tenant or "" for j in missing],
            "keys": [j.key for j in missing],
        }

    def refs(self, inserted: set[str], live: dict[tuple[str, str, str], str]) -> list[JobRef] | None:
        """Answer the refs, or None when a key's holder vanished in between (insert again)."""
        out: list[JobRef] = []
        for job in self.jobs:
            if job.id in inserted:
                out.append(JobRef(job.id, duplicate=False))
                continue
            key = _key_of(job)
            holder = self.first.get(key) if key in self.first and self.first[key] in inserted else live.get(key)
            if holder is None:
                return None
            out.append(JobRef(holder, duplicate=True))
        return out


# A driver keeps a couple of idle connections borrowed from its pool, so the next statement skips
# the pool's getconn/putconn: about 30 us of client CPU and 50 us of wall time per statement on a
# 2-core machine, a sixth of a single enqueue. Every HOT_USES-th return goes back through the pool
# after all, so its lifetime and health policies still see every connection. A connection never
# goes on the stack while a caller waits in the pool: with a one-connection pool (each worker role)
# that caller would otherwise wait for its pool timeout.
HOT_CONNECTIONS = 2
HOT_USES = 1000


class _Borrowed:
    """What ``PostgresDriver.connection()`` answers: a connection taken from the driver's hot
    stack or from the pool, and given back (getconn/putconn, without the pool's own context
    manager: every workhorse connection is in autocommit, so its commit-or-rollback on exit has
    nothing to do, and the pool still rolls back and warns about a connection returned inside a
    transaction). Only a connection that ended cleanly, idle, goes back on the hot stack; any
    other goes to the pool, which resets or discards it. psycopg errors, raised inside or by the
    pool, become workhorse errors. A class, not a generator: it sits on every statement."""

    __slots__ = ("_conn", "_driver")

    def __init__(self, driver: PostgresDriver) -> None:
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
            else:  # the driver closed while this connection was out
                await conn.close()
        except psycopg.Error as failed:
            if error is None:
                raise translate(failed) from failed
        if isinstance(error, psycopg.Error):
            raise translate(error) from error
        if isinstance(error, TimeoutError):
            raise translate(psycopg.OperationalError(str(error))) from error


class PostgresDriver:
    """The default driver. ``role`` names the pool's connections (``workhorse:<role>``)."""

    kind = "postgres"

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
        self._returns = 0
        self._insert_ready = WireStatement("workhorse_insert_ready", _numbered(self.q(sql.INSERT_READY)))

    # -- plumbing -------------------------------------------------------------------------------

    def connect_kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,
            "application_name": f"workhorse:{self.role}",
            # A worker role runs the same few statements thousands of times: a generic plan is
            # planned once per connection (the claim's CTE costs more to plan than to run).
            "options": "-c TimeZone=UTC" + (" -c plan_cache_mode=force_generic_plan" if self.generic_plans else ""),
            "row_factory": dict_row,
            "connect_timeout": 10,
            "client_encoding": "UTF8",  # the enqueue's wire statement sends UTF-8 text
        }

    def q(self, statement: str) -> LiteralString:
        """A named statement with the schema filled in (cached)."""
        cached = self._statements.get(statement)
        if cached is None:
            cached = statement.replace("{schema}", self.schema)
            self._statements[statement] = cached
        return cached

    async def _open_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]:
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
            )
            self._pool = pool
            with translated():
                await pool.open(wait=False)
        return self._pool

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
                kwargs=self.connect_kwargs(),
                open=True,
                name=f"workhorse:{self.role}:sync",
                timeout=30,
            )
        try:
            with self._sync_pool.connection() as conn:
                yield conn
        except psycopg.Error as error:
            raise translate(error) from error

    async def fetch(self, statement: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with self.connection() as conn:
            cur = await conn.execute(self.q(statement), params)
            return await cur.fetchall() if cur.description else []

    def open_wakeups(self, queues: Sequence[str], wake: asyncio.Event, beat: asyncio.Event) -> Listener:
        """Wake-ups for a worker: a LISTEN session of its own on this driver's channel."""
        listener = Listener(self.url, self.channel, queues, wake, beat=beat)
        listener.start()
        return listener

    async def close(self) -> None:
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

    # -- enqueue --------------------------------------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        if not jobs:
            return []
        if conn is None:
            async with self.connection() as own:
                if len(jobs) == 1 and _plain(job := jobs[0]):
                    await self._insert_ready.execute(own, self._ready_wire(job))
                    return [JobRef(job.id)]
                return await self._enqueue_async(own, jobs)
        return await _on_callers(conn, lambda c: self._enqueue_async(c, jobs), lambda c: self._enqueue_sync(c, jobs))

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        if not jobs:
            return []
        if conn is None:
            with self.sync_connection() as own:
                return self._enqueue_sync(own, jobs)
        if isinstance(conn, psycopg.Connection):
            with translated():
                return self._enqueue_sync(conn, jobs)
        raise _bad_conn(conn)

    async def enqueue_ready(self, count: int, rows: Iterator[NewJob], *, conn: Any = None) -> list[JobRef]:
        """COPY, a chunk at a time: the server ingests one chunk while the next is built, so a big
        batch costs about the larger of the two sides rather than their sum. A small batch takes
        the one-statement insert."""
        if count < COPY_THRESHOLD:
            return await self.enqueue_many(list(rows), conn=conn)
        if conn is None:
            async with self.connection() as own:
                return await self._copy_async(own, rows)
        return await _on_callers(conn, lambda c: self._copy_async(c, rows), lambda c: self._copy_sync(c, rows))

    async def _copy_async(self, conn: psycopg.AsyncConnection[Any], rows: Iterator[NewJob]) -> list[JobRef]:
        copied = _Copied()
        cur = conn.cursor()
        async with conn.transaction():  # BEGIN/COMMIT on our connection; a savepoint inside the caller's
            async with cur.copy(self.q(sql.COPY_READY)) as copy:
                for text in copied.chunks(rows):
                    await copy.write(text)
            await cur.execute(self.q(sql.WAKE_QUEUES), {"channel": self.channel, "queues": sorted(copied.queues)})
        return copied.refs

    def _copy_sync(self, conn: psycopg.Connection[Any], rows: Iterator[NewJob]) -> list[JobRef]:
        copied = _Copied()
        cur = conn.cursor()
        with conn.transaction():
            with cur.copy(self.q(sql.COPY_READY)) as copy:
                for text in copied.chunks(rows):
                    copy.write(text)
            cur.execute(self.q(sql.WAKE_QUEUES), {"channel": self.channel, "queues": sorted(copied.queues)})
        return copied.refs

    def _insert(self, pending: Sequence[NewJob]) -> Statement:
        """INSERT_ONE with plain parameters for one job (the common case), else INSERT_MANY."""
        if len(pending) == 1:
            job = pending[0]
            return self.q(sql.INSERT_ONE), {
                "id": job.id,
                "name": job.name,
                "queue": job.queue,
                "tenant": job.tenant,
                "payload": job.payload,
                "key": job.key,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "dead_letter": job.dead_letter,
                "run_at": job.run_at,
                "delay": job.delay,
                "channel": self.channel,
            }
        return self.q(sql.INSERT_MANY), _insert_params(pending, self.channel)

    def _enqueue_plan(self, jobs: Sequence[NewJob]) -> Generator[Statement, list[dict[str, Any]], list[JobRef]]:
        """The keyed-insert conversation, free of I/O: yields each statement, is sent its rows,
        returns the refs. The async and the sync enqueue drive the same plan."""
        batch = _Batch(jobs)
        pending = batch.to_insert
        inserted: set[str] = set()
        for _ in range(3):  # a key's holder can finish between our insert and our lookup
            rows = yield self._insert(pending)
            inserted |= {row["id"] for row in rows}
            missing = batch.missing(inserted)
            live: dict[tuple[str, str, str], str] = {}
            if missing:
                rows = yield self.q(sql.LIVE_BY_KEYS), batch.lookup_params(missing)
                live = {(r["name"], r["tenant"], r["idempotency_key"]): r["id"] for r in rows}
            refs = batch.refs(inserted, live)
            if refs is not None:
                return refs
            pending = [j for j in missing if _key_of(j) not in live]
        raise _key_race()

    def _ready_wire(self, job: NewJob) -> list[bytes | None]:
        """INSERT_READY's parameters (``_ready_params``) as text for the wire: every pool
        connection speaks UTF-8, and each parameter is cast to its type in the statement."""
        return [_wire_text(value) for value in self._ready_params(job)]

    def _ready_params(self, job: NewJob) -> tuple[Any, ...]:
        """INSERT_READY's parameters, in its order."""
        return (
            job.id,
            job.name,
            job.queue,
            job.tenant,
            job.priority,
            job.payload,
            job.max_attempts,
            job.dead_letter,
            self.channel,
        )

    async def _enqueue_async(self, conn: psycopg.AsyncConnection[Any], jobs: Sequence[NewJob]) -> list[JobRef]:
        if len(jobs) == 1 and _plain(job := jobs[0]):
            await conn.execute(self.q(sql.INSERT_READY), self._ready_params(job))
            return [JobRef(job.id)]
        if _copyable(jobs):
            return await self._copy_async(conn, iter(jobs))
        cur = conn.cursor(row_factory=dict_row)
        plan = self._enqueue_plan(jobs)
        statement = next(plan)
        while True:
            await cur.execute(*statement)
            try:
                statement = plan.send(await cur.fetchall())
            except StopIteration as done:
                refs: list[JobRef] = done.value
                return refs

    def _enqueue_sync(self, conn: psycopg.Connection[Any], jobs: Sequence[NewJob]) -> list[JobRef]:
        if len(jobs) == 1 and _plain(job := jobs[0]):
            conn.execute(self.q(sql.INSERT_READY), self._ready_params(job))
            return [JobRef(job.id)]
        if _copyable(jobs):
            return self._copy_sync(conn, iter(jobs))
        cur = conn.cursor(row_factory=dict_row)
        plan = self._enqueue_plan(jobs)
        statement = next(plan)
        while True:
            cur.execute(*statement)
            try:
                statement = plan.send(cur.fetchall())
            except StopIteration as done:
                refs: list[JobRef] = done.value
                return refs

    # -- claim, heartbeat, settle -----------------------------------------------------------------

    async def claim(
        self,
        *,
        worker_id: str,
        wants: Mapping[str, int],
        names: Sequence[str],
        visibility: float,
        sweep: bool = True,
    ) -> ClaimResult:
        if not wants:
            raise refusals.claim_queues_empty()
        wanted = {q: n for q, n in wants.items() if n > 0}
        if not wanted or not names:
            return ClaimResult([], [])
        rows = await self.fetch(
            sql.CLAIM if sweep else sql.CLAIM_DUE,
            {
                "worker_id": worker_id,
                "queues": pg_array(wanted),
                "slots": pg_array(wanted.values()),
                "names": pg_array(names),
                "visibility": visibility,
            },
        )
        claimed: list[Claimed] = []
        buried: list[Buried] = []
        next_due: float | None = None
        for r in rows:
            if r["kind"] == "next":
                next_due = r["next_due"] if next_due is None else min(next_due, r["next_due"])
            elif r["kind"] == "buried":
                buried.append(
                    Buried(
                        id=r["id"],
                        name=r["name"],
                        queue=r["queue"],
                        tenant=r["tenant"],
                        state=r["state"],
                        payload=r["payload"],
                        attempt=r["attempt"],
                        max_attempts=r["max_attempts"],
                        last_error=r["last_error"],
                    )
                )
            else:
                claimed.append(
                    Claimed(
                        id=r["id"],
                        name=r["name"],
                        queue=r["queue"],
                        tenant=r["tenant"],
                        payload=r["payload"],
                        attempt=r["attempt"],
                        max_attempts=r["max_attempts"],
                        claims=r["claims"],
                        priority=r["priority"],
                        created_at=r["created_at"],
                        run_at=r["run_at"],
                    )
                )
        # The statement does not promise an order across arms; hand jobs out in claim order.
        claimed.sort(key=lambda c: (-c.priority, c.run_at, c.id))
        return ClaimResult(claimed, buried, next_due)

    async def heartbeat(self, worker_id: str, leases: Sequence[Lease], visibility: float) -> Beat:
        rows = await self.fetch(
            sql.HEARTBEAT,
            {
                "worker_id": worker_id,
                "ids": [lease.job_id for lease in leases],
                "claims": [lease.claims for lease in leases],
                "visibility": visibility,
            },
        )
        return Beat(
            held={r["id"] for r in rows if r["kind"] == "job"},
            registered=any(r["kind"] == "worker" for r in rows),
        )

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        await self.fetch(
            worker_sql.REGISTER,
            {
                "id": info.id,
                "host": info.host,
                "pid": info.pid,
                "queues": list(info.queues),
                "concurrency": json.dumps(info.concurrency),
                "ttl": ttl,
            },
        )

    async def deregister_worker(self, worker_id: str) -> None:
        await self.fetch(worker_sql.DEREGISTER, {"id": worker_id})

    async def list_workers(self) -> list[WorkerInfo]:
        rows = await self.fetch(worker_sql.LIVE)
        return [
            WorkerInfo(
                id=r["id"],
                host=r["host"],
                pid=r["pid"],
                queues=list(r["queues"]),
                concurrency=r["concurrency"],
                started_at=r["started_at"],
                last_seen_at=r["last_seen_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]

    async def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        if not settlements:
            return []
        rows = await self.fetch(
            sql.SETTLE_MANY,
            {
                "ids": pg_array([s.job_id for s in settlements]),
                "worker_ids": pg_array([s.worker_id for s in settlements]),
                "claims": pg_array([s.claims for s in settlements]),
                "outcomes": pg_array([s.outcome for s in settlements]),
                "results": pg_array([s.result for s in settlements]),
                "errors": pg_array([s.error for s in settlements]),
                "delays": pg_array([s.delay for s in settlements]),
                "progresses": pg_array([s.progress for s in settlements]),
                "channel": self.channel,
            },
        )
        landed = {r["id"] for r in rows}
        return [s.job_id in landed for s in settlements]

    # -- reads and operator verbs ---------------------------------------------------------------

    async def get_job(self, job_id: str) -> Job | None:
        """The job with its steps as ``show`` lists them (a second read, only when the job exists)."""
        job = await self._get_job(job_id)
        if job is None:
            return None
        rows = await self.fetch(step_sql.LIST_SHOWN, {"job_id": job.id, "limit": SHOWN_LIMIT})
        return replace(job, steps=[_shown(r) for r in rows])

    async def _get_job(self, job_id: str) -> Job | None:
        if not _is_uuid(job_id):
            return None
        rows = await self.fetch(sql.GET, {"id": job_id})
        return _job(rows[0]) if rows else None

    async def list_jobs(
        self, filters: ListFilter, *, limit: int, after: str | None = None, before: str | None = None
    ) -> Page:
        """One keyset page in one statement; a second read only when it came back empty with a
        cursor (to tell "no more rows" from "no such cursor")."""
        params: dict[str, Any] = {
            "queue": filters.queue,
            "name": filters.name,
            "tenant": filters.tenant,
            "state": filters.state,
            "created_from": filters.created_from,
            "created_to": filters.created_to,
            "after": after,
            "before": before,
            "limit": limit,
        }
        given = [name for name, value in params.items() if value is not None and name in admin_sql.LIST_FILTERS]
        if filters.id_prefix is not None:
            params["id_low"], params["id_high"] = _id_range(filters.id_prefix)
            given.append("id_prefix")
        cursor, which = (before, "before") if before is not None else (after, "after")
        if cursor is not None and not _is_uuid(cursor):
            raise refusals.bad_cursor(cursor, which=which)
        rows = await self.fetch(admin_sql.list_page(given, backwards=before is not None), params)
        if not rows and cursor is not None and not await self.fetch(sql.CURSOR_EXISTS, {"id": cursor}):
            raise refusals.bad_cursor(cursor, which=which)
        jobs = [_job(r) for r in rows]
        full = len(jobs) == limit
        if before is not None:
            jobs.reverse()
            return Page(jobs, next=jobs[-1].id if jobs else None, prev=jobs[0].id if full else None)
        return Page(
            jobs,
            next=jobs[-1].id if full else None,
            prev=jobs[0].id if after is not None and jobs else None,
        )

    async def bulk(self, verb: BulkVerb, filters: BulkFilter, *, limit: int, dry_run: bool) -> BulkResult:
        params = {
            "state": filters.state,
            "stored": ["ready", "delayed", "suspended"] if filters.state == "ready" else [filters.state],
            "queue": filters.queue,
            "name": filters.name,
            "tenant": filters.tenant,
            "limit": limit,
            "dry_run": dry_run,
            "channel": self.channel,
        }
        for attempt in range(1, BULK_TRIES + 1):
            try:
                (row,) = await self.fetch(admin_sql.BULK[verb], params)
                break
            except DatabaseError as error:
                # A keyed job took the key between our snapshot and our write: read again.
                if attempt == BULK_TRIES or not isinstance(error.__cause__, psycopg.errors.UniqueViolation):
                    raise
        movable, moved = int(row["movable"]), int(row["moved"])
        affected = min(limit, movable) if dry_run else moved
        return BulkResult(verb, affected=affected, remaining=max(movable - affected, 0), dry_run=dry_run)

    async def _verb(self, statement: str, job_id: str) -> tuple[Job | None, Job | None]:
        """Run a guarded verb; answers (job after, job before) — after is None when it missed."""
        before = await self._get_job(job_id)
        if before is None:
            raise refusals.not_found(job_id)
        rows = await self.fetch(statement, {"id": job_id, "channel": self.channel})
        if not rows:
            current = await self._get_job(job_id)
            if current is None:
                raise refusals.not_found(job_id)
            return None, current
        return await self.get_job(job_id), before

    async def cancel(self, job_id: str) -> Job:
        after, before = await self._verb(sql.CANCEL, job_id)
        if after is None:
            assert before is not None
            raise refusals.not_cancellable(job_id, before.state)
        return after

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> Job:
        if from_step is not None:
            return await self._requeue_from_step(job_id, from_step)
        try:
            after, before = await self._verb(sql.REQUEUE, job_id)
        except DatabaseError as error:
            if isinstance(error.__cause__, psycopg.errors.UniqueViolation):
                job = await self.get_job(job_id)
                assert job is not None
                assert job.key is not None
                holder = await self._live_holder(job)
                raise refusals.key_held(job_id, job.key, holder) from None
            raise
        if after is None:
            assert before is not None
            raise refusals.not_requeueable(job_id, before.state)
        return after

    async def _requeue_from_step(self, job_id: str, step: str) -> Job:
        before = await self._get_job(job_id)
        if before is None:
            raise refusals.not_found(job_id)
        try:
            rows = await self.fetch(sql.REQUEUE_FROM_STEP, {"id": job_id, "step": step, "channel": self.channel})
        except DatabaseError as error:
            if isinstance(error.__cause__, psycopg.errors.UniqueViolation):
                assert before.key is not None
                raise refusals.key_held(job_id, before.key, await self._live_holder(before)) from None
            raise
        if rows:
            after = await self.get_job(job_id)
            assert after is not None
            return after
        current = await self.get_job(job_id)  # the refusal: gone, live, or no such step
        if current is None:
            raise refusals.not_found(job_id)
        if current.state in LIVE_STATES:
            raise refusals.not_requeueable(job_id, current.state)
        raise refusals.step_unknown(job_id, step, [s["name"] for s in current.steps])

    async def _live_holder(self, job: Job) -> str | None:
        rows = await self.fetch(
            sql.LIVE_BY_KEYS, {"names": [job.name], "tenants": [job.tenant or ""], "keys": [job.key]}
        )
        return rows[0]["id"] if rows else None

    async def promote(self, job_id: str) -> Job:
        after, before = await self._verb(sql.PROMOTE, job_id)
        if after is None:
            assert before is not None
            raise refusals.not_promotable(job_id, before.state)
        return after

    async def remove(self, job_id: str) -> Job:
        after, before = await self._verb(sql.REMOVE, job_id)
        if after is None and before is not None and before.state == "running":
            raise refusals.not_removable(job_id)
        assert before is not None
        return before

    # -- queues, measuring, progress -------------------------------------------------------------

    async def pause_queue(self, queue: str, reason: str | None) -> QueuePause:
        (row,) = await self.fetch(admin_sql.PAUSE, {"queue": queue, "reason": reason})
        return QueuePause(row["queue"], row["paused_at"], row["reason"])

    async def resume_queue(self, queue: str) -> bool:
        rows = await self.fetch(admin_sql.RESUME, {"queue": queue, "channel": self.channel})
        return bool(rows[0]["resumed"])

    async def list_pauses(self) -> list[QueuePause]:
        return [QueuePause(r["queue"], r["paused_at"], r["reason"]) for r in await self.fetch(admin_sql.PAUSES)]

    async def snapshot(self, since: float | None) -> Snapshot:
        rows = await self.fetch(admin_sql.SNAPSHOT, {"since": since})
        head = next(r for r in rows if r["kind"] == "now")
        return Snapshot(
            now=head["at"],
            states=[
                StateCount(r["queue"], r["name"], r["state"], int(r["n"]), r["at"])
                for r in rows
                if r["kind"] == "state"
            ],
            counters=[
                CounterSum(
                    r["queue"],
                    r["name"],
                    completed=int(r["completed"]),
                    retried=int(r["retried"]),
                    failed=int(r["failed"]),
                    dead=int(r["dead"]),
                    lapsed=int(r["lapsed"]),
                )
                for r in rows
                if r["kind"] == "counter"
            ],
            paused=[QueuePause(r["queue"], r["at"], r["reason"]) for r in rows if r["kind"] == "pause"],
            workers=int(head["n"]),
        )

    async def rollup_counters(self) -> int:
        folded = 0
        for statement in (admin_sql.ROLLUP_MINUTES, admin_sql.ROLLUP_HOURS):  # minutes first: hours may gain
            rows = await self.fetch(statement)
            folded += int(rows[0]["folded"])
        return folded

    async def record_progress(self, reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        writable = [i for i, (fence, _) in enumerate(reports) if _is_uuid(fence.job_id)]
        landed: set[int] = set()
        if writable:
            rows = await self.fetch(
                admin_sql.RECORD_PROGRESS,
                {
                    "ids": [reports[i][0].job_id for i in writable],
                    "worker_ids": [reports[i][0].worker_id for i in writable],
                    "claims": [reports[i][0].claims for i in writable],
                    "progresses": [reports[i][1] for i in writable],
                },
            )
            landed = {writable[r["n"] - 1] for r in rows}
        return [i in landed for i in range(len(reports))]

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
        """EVENT_LOCK then ``statement`` in one transaction, pipelined: one round trip."""
        async with self.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                await conn.execute(self.q(step_sql.EVENT_LOCK), {"name": name, "key": key})
                cur = await conn.execute(self.q(statement), params)
            return await cur.fetchall()

    async def publish_event(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        params = {"name": name, "key": key, "payload": payload, "ttl": ttl, "channel": self.channel}
        rows = await self._under_event_lock(name, key, step_sql.PUBLISH, params)
        return _published(name, key, rows[0])

    def publish_event_sync(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        params = {"name": name, "key": key, "payload": payload, "ttl": ttl, "channel": self.channel}
        with self.sync_connection() as conn:
            with conn.pipeline(), conn.transaction():
                conn.execute(self.q(step_sql.EVENT_LOCK), {"name": name, "key": key})
                cur = conn.execute(self.q(step_sql.PUBLISH), params)
            row = cur.fetchone()
        assert row is not None
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


def _shown(r: dict[str, Any]) -> dict[str, Any]:
    return shown_step(
        name=r["name"],
        seq=r["seq"],
        state=r["state"],
        attempt=r["attempt"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        wake_at=r["wake_at"],
        event=r["event"],
        key=r["event_key"],
        result=r["result"],
        preview=r["result_preview"],
        error_type=r["error_type"],
        error_message=r["error_message"],
    )


_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


def _is_uuid(value: str) -> bool:
    """fullmatch: ``$`` would let a trailing newline through."""
    return isinstance(value, str) and bool(_UUID.fullmatch(value))


def _id_range(prefix: str) -> tuple[str, str]:
    """The inclusive uuid range of every id starting with ``prefix`` (lowercase hex, no dashes),
    which the primary key index serves."""
    return str(uuid.UUID(hex=prefix.ljust(32, "0"))), str(uuid.UUID(hex=prefix.ljust(32, "f")))


def _bad_conn(conn: Any) -> ConfigurationError:
    return ConfigurationError(
        code="CONN_INVALID",
        cause=f"conn= expected an open psycopg Connection or AsyncConnection, got {type(conn).__name__}",
        fix="pass the psycopg connection whose transaction the job must join: enqueue(payload, conn=conn)",
    )


def _key_race() -> DatabaseError:
    return DatabaseError(
        code="ENQUEUE_KEY_CONTENDED",
        cause="an idempotency key kept changing hands while enqueueing (held, then finished, three times)",
        fix="retry the enqueue",
    )
