"""The PostgreSQL driver's enqueue role (``PostgresEnqueue``): the single enqueue on the wire,
keyed batches in one statement, big keyless batches streamed with COPY, in the caller's
transaction when it hands its connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

from workhorse._db.queries import jobs as sql
from workhorse.connections import driver_connection, driver_connection_sync
from workhorse.deps import queries as dep_sql
from workhorse.deps import unknown
from workhorse.drivers.postgres_core import PostgresCore, translated
from workhorse.errors import ConfigurationError, DatabaseError
from workhorse.types import JobRef, NewJob

Statement = tuple[LiteralString, dict[str, Any]]


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
        "flow_keys": [j.flow_key for j in jobs],
        "traceparents": [j.traceparent for j in jobs],
        "channel": channel,
    }


COPY_THRESHOLD = 64  # below this, one INSERT ... unnest beats the COPY protocol's extra round trips


async def _on_callers(
    conn: Any,
    run_async: Callable[[psycopg.AsyncConnection[Any]], Awaitable[list[JobRef]]],
    run_sync: Callable[[psycopg.Connection[Any]], list[JobRef]],
) -> list[JobRef]:
    """An enqueue on the caller's connection (``conn=``), async or sync, errors translated. A
    SQLAlchemy or Django connection is unwrapped to its psycopg one (``workhorse.connections``)."""
    if not isinstance(conn, psycopg.AsyncConnection | psycopg.Connection):
        conn = await driver_connection(conn)  # refuses, naming what was given, when nothing fits
    if isinstance(conn, psycopg.AsyncConnection):
        with translated():
            return await run_async(conn)
    if isinstance(conn, psycopg.Connection):
        with translated():
            return run_sync(conn)
    raise _bad_conn(conn)


def _wire_text(value: str | int | bool | None) -> bytes | None:
    """One parameter in PostgreSQL's text format: a boolean as t/f, None as NULL."""
    if value is None:
        return None
    if value is True or value is False:
        return b"t" if value else b"f"
    return str(value).encode()


def _plain(job: NewJob) -> bool:
    """No key (idempotency or concurrency), due now, no trace, no dependency: INSERT_READY carries it."""
    return (
        job.key is None
        and job.run_at is None
        and not job.delay
        and job.flow_key is None
        and job.traceparent is None
        and not job.after
    )


def _after_params(jobs: Sequence[NewJob], channel: str) -> dict[str, Any]:
    """INSERT_AFTER's parameters: INSERT_MANY's, each job's `when`, and the edges as parallel arrays."""
    if any(j.key is not None for j in jobs):
        raise ConfigurationError(
            cause="a batch with dependencies (after=) holds a job with an idempotency key; the two are refused "
            "together",
            fix="enqueue the keyed jobs in a batch of their own, without after=",
        )
    params = _insert_params(jobs, channel)
    params["whens"] = [j.when for j in jobs]
    children: list[str] = []
    positions: list[int] = []
    parents: list[str] = []
    for job in jobs:
        for position, parent in enumerate(job.after):
            children.append(job.id)
            positions.append(position)
            parents.append(parent)
    params.update(edge_children=children, edge_positions=positions, edge_parents=parents)
    return params


def _after_refs(jobs: Sequence[NewJob], rows: list[dict[str, Any]]) -> list[JobRef]:
    """The refs of INSERT_AFTER's answer, or DEPENDENCY_UNKNOWN naming what no row answered."""
    missing = [r["id"] for r in rows if r["kind"] == "unknown"]
    if missing:
        raise unknown(sorted(missing))
    return [JobRef(j.id) for j in jobs]


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


class PostgresEnqueue(PostgresCore):
    """The enqueue role: one plain job on the prepared wire statement, a keyed batch in one
    statement (then its live holders), a big keyless batch streamed with COPY; on the caller's
    connection when it hands one (``conn=``), else on the pool's."""

    # -- enqueue --------------------------------------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        if not jobs:
            return []
        if conn is None:
            if len(jobs) == 1 and _plain(job := jobs[0]):
                lead = self._wakes.lead(job.queue)
                async with self.connection() as own:
                    if self.pooled:  # no prepared statement behind a transaction pooler: psycopg's unnamed one
                        params = self._ready_params(job)
                        statement = sql.INSERT_READY if lead else sql.INSERT_READY_QUIET
                        await own.execute(self.q(statement), params if lead else params[:-1])
                    elif lead:
                        await self._insert_ready.execute(own, self._ready_wire(job))
                    else:
                        await self._insert_quiet.execute(own, self._ready_wire(job)[:-1])
                if not lead:
                    self._wakes.owe(job.queue)  # committed: its wake trails (drivers/wake_throttle.py)
                return [JobRef(job.id)]
            async with self.connection() as own:
                return await self._enqueue_async(own, jobs)
        return await _on_callers(conn, lambda c: self._enqueue_async(c, jobs), lambda c: self._enqueue_sync(c, jobs))

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        if not jobs:
            return []
        if conn is None:
            with self.sync_connection() as own:
                return self._enqueue_sync(own, jobs)
        conn = driver_connection_sync(conn)  # a SQLAlchemy or Django connection: its psycopg one
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
                "flow_key": job.flow_key,
                "traceparent": job.traceparent,
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

    async def _send_wakes(self, queues: Sequence[str]) -> None:
        """The trailing wake of ``WakeThrottle``: one statement of its own, on our own connection."""
        await self.fetch(sql.WAKE_QUEUES, {"channel": self.channel, "queues": list(queues)})

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
        if any(j.after for j in jobs):
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(self.q(dep_sql.INSERT_AFTER), _after_params(jobs, self.channel))
            return _after_refs(jobs, await cur.fetchall())
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
        if any(j.after for j in jobs):
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(self.q(dep_sql.INSERT_AFTER), _after_params(jobs, self.channel))
            return _after_refs(jobs, cur.fetchall())
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
