"""The app the soak's workers run (``workhorse --app soak.soakapp:app worker``): two job bodies,
one plain ``def`` and one ``async def``, each keeping the soak's ledger while it runs.

A body does, in order:

1. On a ledger session of its own (``application_name`` ``soak-ledger:<os pid>``, autocommit,
   never a queue connection), ``pg_try_advisory_lock(<soak class>, <job number>)``. When the lock
   is taken by someone else, it looks the holder up (``pg_locks`` -> the holder's
   ``application_name`` -> its os pid) and reads ``/proc/<pid>/stat``: ``live``, ``stopped``
   (SIGSTOP) or ``gone``. Either way the body goes on: the verifier decides what the overlap was.
2. Inserts its ``start`` row, with ``entered_at`` (the moment the worker called the body). The
   same statement reads the job's row and records whether the lease is still this run's
   (``running``, this worker, this attempt, ``lease_expires_at`` in the future): a run that starts
   without it is a *stale start*.
3. Sleeps its ``ms`` (a sync body waits on ``ctx.wait_cancelled``, so a lease-lost cancel stops it
   too; an async body is cancelled at its ``await``). On its first attempt a job marked
   ``fail`` raises ``DeliberateFailure`` (retried with a small base).
4. Inserts its end row (``ok``, ``fail``, ``cancelled`` or ``error``), stamped with the moment
   the work stopped (``clock_timestamp()`` minus the seconds since), then unlocks and gives the
   session back.

With ``--flow`` (``SOAK_FLOW=1`` in the workers' environment) the app declares flow control and a
third body: ``Limits(per_tenant=FLOW_PER_TENANT)`` counts the async jobs (their tenant is in the
payload, one of FLOW_TENANTS), the sync jobs stay ``tenant="none"`` (counted by no cap, the jobs a
filtered claim used to strand), and ``soak_steps`` (capped at FLOW_STEPS_CAP running runs by
``concurrency=``) runs the async body between two durable steps (``ctx.step.run``): each step writes
a ``soak_steps`` row as it runs, and a step answered from the store must answer what it recorded
(a replay that answered anything else ends the run ``mismatch``, which fails the soak).

The lock is held from before the start row until after the end row, so the next run of a job can
find it taken only while the previous body is still inside its run. The ledger survives what
the chaos does to the queue: its sessions are spared by the conductor's ``pg_terminate_backend``,
and every ledger statement is retried on a fresh session (for up to a minute) when the server
restarts under it. A restart ends the session and so releases the lock: the verifier's interval
check (``soak/verify.py``) covers that case. Start and end rows are idempotent per run
(``on conflict do nothing``), so a retry after a lost answer writes nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, LiteralString, TypeVar

import psycopg

from soak import sql
from soak.procfs import proc_state
from workhorse import App, JobContext, Limits, Retry
from workhorse.jobs import JobHandle

URL_ENV = "SOAK_DATABASE_URL"
SCHEMA_ENV = "SOAK_SCHEMA"
LOCK_ENV = "SOAK_LOCK_CLASS"
FLOW_ENV = "SOAK_FLOW"
SYNC_JOB = "soak_sync"
ASYNC_JOB = "soak_async"
STEPS_JOB = "soak_steps"
FLOW_TENANTS = 5  # the async jobs' tenants under --flow
FLOW_PER_TENANT = 4  # Limits(per_tenant=) under --flow: 5 tenants x 4 < the fleet's 24 slots, so it binds
FLOW_STEPS_CAP = 6  # concurrency= of soak_steps under --flow
LEDGER_PREFIX = "soak-ledger:"
LEDGER_DEADLINE = 60.0  # seconds a ledger statement is retried (a restart takes a few)
IDLE_KEPT = 12  # ledger sessions kept open per kind (sync, async) and process
RETRY = Retry(attempts=6, base=0.05, max_delay=1.0)
_RETRIED = (psycopg.OperationalError, psycopg.InterfaceError)

T = TypeVar("T")
Params = dict[str, Any]


class DeliberateFailure(Exception):
    """A job marked ``fail`` raises this on its first attempt."""


class LedgerUnavailable(Exception):
    """The ledger could not be written for ``LEDGER_DEADLINE`` seconds: the run fails (and is retried)."""


@dataclass
class LedgerRun:
    """One run of a body, as the ledger knows it; holds its ledger session while it runs."""

    run_id: str
    job_id: str
    n: int
    attempt: int
    worker_id: str
    lock_ok: bool
    conn: Any  # psycopg.Connection or psycopg.AsyncConnection: the session holding the lock

    def row(self, **extra: Any) -> Params:
        base = {"run": self.run_id, "job": self.job_id, "n": self.n, "attempt": self.attempt}
        return base | {"pid": os.getpid(), "worker": self.worker_id} | extra


@dataclass(frozen=True)
class Holder:
    """Who held the job's lock when a run could not take it."""

    pid: int | None
    state: str  # live, stopped, gone (from /proc), foreign (not a ledger session), released

    @classmethod
    def of(cls, application_name: str | None) -> Holder:
        if application_name is None:
            return cls(None, "released")
        if not application_name.startswith(LEDGER_PREFIX):
            return cls(None, "foreign")
        pid = int(application_name.removeprefix(LEDGER_PREFIX))
        return cls(pid, proc_state(pid))


def pauses(deadline: float) -> Iterator[float]:
    """Backoff pauses (50 ms doubling to 500 ms) until ``deadline`` (monotonic)."""
    pause = 0.05
    while time.monotonic() < deadline:
        yield pause
        pause = min(pause * 2, 0.5)


class Ledger:
    """The ledger of one worker process: a few sessions of its own, sync and async."""

    def __init__(self, url: str, schema: str, lock_class: int) -> None:
        self.url = url
        self.schema = schema
        self.lock_class = lock_class
        self.name = f"{LEDGER_PREFIX}{os.getpid()}"
        self._sync: list[psycopg.Connection[Any]] = []
        self._async: list[psycopg.AsyncConnection[Any]] = []
        self._lock = threading.Lock()

    def q(self, statement: LiteralString) -> LiteralString:
        return sql.q(statement, self.schema)

    def _kwargs(self) -> Params:
        return {
            "autocommit": True,
            "application_name": self.name,
            "connect_timeout": 5,
            "options": sql.DURABLE_SESSION,  # a row the ledger was told is written survives a restart
        }

    def _lock_params(self, n: int) -> Params:
        return {"cls": self.lock_class, "n": n}

    def mismatch(self, ctx: JobContext, n: int) -> LedgerRun:
        """A run of its own for a steps job whose replay answered wrong: its ``mismatch`` row."""
        return self._new_run(ctx, n, None, False)

    def _new_run(self, ctx: JobContext, n: int, conn: Any, lock_ok: bool) -> LedgerRun:
        return LedgerRun(str(uuid.uuid4()), ctx.id, n, ctx.attempt, ctx.worker_id, lock_ok, conn)

    @staticmethod
    def _start_params(run: LedgerRun, holder: Holder | None, entered: float) -> Params:
        return run.row(
            entered_ago=time.monotonic() - entered,
            lock_ok=run.lock_ok,
            holder_pid=None if holder is None else holder.pid,
            holder_state=None if holder is None else holder.state,
        )

    # -- sync bodies ---------------------------------------------------------------------------

    def _get_sync(self) -> tuple[psycopg.Connection[Any], bool]:
        """A session, and whether it was an idle one (which may have died with a restart)."""
        with self._lock:
            if self._sync:
                return self._sync.pop(), True
        return psycopg.connect(self.url, **self._kwargs()), False

    def _flush_sync(self) -> None:
        """After a failure, every idle session is suspect (a restart ended them all): close them, so
        the retry opens a fresh one instead of finding the dead ones one backoff at a time."""
        with self._lock:
            idle, self._sync = self._sync, []
        for conn in idle:
            conn.close()

    def _put_sync(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if not conn.closed and len(self._sync) < IDLE_KEPT:
                self._sync.append(conn)
                return
        conn.close()

    def _try_lock_sync(self, conn: psycopg.Connection[Any], n: int) -> tuple[bool, Holder | None]:
        for _ in range(3):  # the holder may let go between our try and our look-up: try again
            row = conn.execute(self.q(sql.TRY_LOCK), self._lock_params(n)).fetchone()
            if row is not None and row[0]:
                return True, None
            found = conn.execute(self.q(sql.LOCK_HOLDER), self._lock_params(n)).fetchone()
            holder = Holder.of(None if found is None else found[0])
            if holder.state != "released":
                return False, holder
        return False, Holder(None, "released")

    def start_sync(self, ctx: JobContext, n: int, entered: float) -> LedgerRun:
        for pause in pauses(time.monotonic() + LEDGER_DEADLINE):
            conn: psycopg.Connection[Any] | None = None
            reused = False
            try:
                conn, reused = self._get_sync()
                lock_ok, holder = self._try_lock_sync(conn, n)
                run = self._new_run(ctx, n, conn, lock_ok)
                conn.execute(self.q(sql.START_RUN), self._start_params(run, holder, entered))
            except _RETRIED:
                if conn is not None:
                    conn.close()
                self._flush_sync()
                time.sleep(0 if reused else pause)
            else:
                return run
        raise LedgerUnavailable(f"no start row for job {ctx.id} within {LEDGER_DEADLINE:g}s")

    def end_sync(self, run: LedgerRun, event: str, ended: float) -> None:
        conn: psycopg.Connection[Any] | None = run.conn
        for pause in pauses(time.monotonic() + LEDGER_DEADLINE):
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, **self._kwargs())
                conn.execute(self.q(sql.END_RUN), run.row(event=event, ago=time.monotonic() - ended))
                break
            except _RETRIED:
                if conn is not None:
                    conn.close()
                self._flush_sync()
                time.sleep(0 if conn is run.conn else pause)
                conn = None
        else:
            _complain(f"no {event} row for job {run.job_id} within {LEDGER_DEADLINE:g}s")
        if conn is not None:
            self._release_sync(run, conn)

    def _release_sync(self, run: LedgerRun, conn: psycopg.Connection[Any]) -> None:
        try:
            if run.lock_ok and conn is run.conn:  # on a new session the old one, and its lock, are gone
                conn.execute(self.q(sql.UNLOCK), self._lock_params(run.n))
        except _RETRIED:
            conn.close()
        self._put_sync(conn)

    # -- async bodies --------------------------------------------------------------------------

    async def _get_async(self) -> tuple[psycopg.AsyncConnection[Any], bool]:
        if self._async:
            return self._async.pop(), True
        return await psycopg.AsyncConnection.connect(self.url, **self._kwargs()), False

    async def _flush_async(self) -> None:
        idle, self._async = self._async, []
        for conn in idle:
            await conn.close()

    async def _put_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.closed and len(self._async) < IDLE_KEPT:
            self._async.append(conn)
            return
        await conn.close()

    async def _try_lock_async(self, conn: psycopg.AsyncConnection[Any], n: int) -> tuple[bool, Holder | None]:
        for _ in range(3):
            row = await (await conn.execute(self.q(sql.TRY_LOCK), self._lock_params(n))).fetchone()
            if row is not None and row[0]:
                return True, None
            found = await (await conn.execute(self.q(sql.LOCK_HOLDER), self._lock_params(n))).fetchone()
            holder = Holder.of(None if found is None else found[0])
            if holder.state != "released":
                return False, holder
        return False, Holder(None, "released")

    async def start_async(self, ctx: JobContext, n: int, entered: float) -> LedgerRun:
        for pause in pauses(time.monotonic() + LEDGER_DEADLINE):
            conn: psycopg.AsyncConnection[Any] | None = None
            reused = False
            try:
                conn, reused = await self._get_async()
                lock_ok, holder = await self._try_lock_async(conn, n)
                run = self._new_run(ctx, n, conn, lock_ok)
                await conn.execute(self.q(sql.START_RUN), self._start_params(run, holder, entered))
            except _RETRIED:
                if conn is not None:
                    await conn.close()
                await self._flush_async()
                await asyncio.sleep(0 if reused else pause)
            else:
                return run
        raise LedgerUnavailable(f"no start row for job {ctx.id} within {LEDGER_DEADLINE:g}s")

    async def end_async(self, run: LedgerRun, event: str, ended: float) -> None:
        conn: psycopg.AsyncConnection[Any] | None = run.conn
        for pause in pauses(time.monotonic() + LEDGER_DEADLINE):
            try:
                if conn is None:
                    conn = await psycopg.AsyncConnection.connect(self.url, **self._kwargs())
                await conn.execute(self.q(sql.END_RUN), run.row(event=event, ago=time.monotonic() - ended))
                break
            except _RETRIED:
                if conn is not None:
                    await conn.close()
                await self._flush_async()
                await asyncio.sleep(0 if conn is run.conn else pause)
                conn = None
        else:
            _complain(f"no {event} row for job {run.job_id} within {LEDGER_DEADLINE:g}s")
        if conn is not None:
            await self._release_async(run, conn)

    async def _release_async(self, run: LedgerRun, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            if run.lock_ok and conn is run.conn:
                await conn.execute(self.q(sql.UNLOCK), self._lock_params(run.n))
        except _RETRIED:
            await conn.close()
        await self._put_async(conn)


def _complain(message: str) -> None:
    print(f"soak ledger {os.getpid()}: {message}", file=sys.stderr, flush=True)


_ledger: Ledger | None = None
_ledger_lock = threading.Lock()


def ledger() -> Ledger:
    """This process's ledger, made on first use from the environment the soak gave the worker."""
    global _ledger  # noqa: PLW0603 - one ledger per worker process
    with _ledger_lock:
        if _ledger is None:
            _ledger = Ledger(os.environ[URL_ENV], os.environ[SCHEMA_ENV], int(os.environ[LOCK_ENV]))
        return _ledger


async def uncancelled(coro: Coroutine[Any, Any, T]) -> tuple[T, bool]:
    """Run ``coro`` to its end even if the caller is cancelled meanwhile (a ledger row must not be
    left half-written by a cancel); answers its result and whether a cancel arrived."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True


def sync_body(ctx: JobContext, payload: dict[str, Any]) -> int | None:
    entered = time.monotonic()
    book = ledger()
    run = book.start_sync(ctx, payload["n"], entered)
    event, ended = "error", None
    try:
        if ctx.wait_cancelled(payload["ms"] / 1000):
            ended, event = time.monotonic(), "cancelled"
            return None
        ended = time.monotonic()
        if payload["fail"] and ctx.attempt == 1:
            event = "fail"
            raise DeliberateFailure(f"job {payload['n']} fails its first attempt on purpose")
        event = "ok"
        return int(payload["n"])
    finally:
        book.end_sync(run, event, ended if ended is not None else time.monotonic())


class StepMismatch(Exception):
    """A durable step answered something other than what it recorded."""


def record_step(url: str, schema: str, job_id: str, *, step: str, attempt: int, value: int) -> int:
    """A step's side effect: one ``soak_steps`` row per execution (on a fresh session, retried
    across a restart), answering ``value``."""
    for pause in pauses(time.monotonic() + LEDGER_DEADLINE):
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5, options=sql.DURABLE_SESSION) as conn:
                conn.execute(
                    sql.q(sql.RECORD_STEP, schema),
                    {"job": job_id, "step": step, "attempt": attempt, "pid": os.getpid()},
                )
        except _RETRIED:
            time.sleep(pause)
        else:
            return value
    raise LedgerUnavailable(f"no step row for job {job_id} within {LEDGER_DEADLINE:g}s")


async def steps_body(ctx: JobContext, payload: dict[str, Any]) -> int:
    """``async_body`` between two durable steps. A step run again after a crash answers from the
    store what its first run recorded: anything else ends the run ``mismatch``."""
    book = ledger()
    n = int(payload["n"])
    where = (book.url, book.schema, ctx.id)
    before = await ctx.step.run("before", record_step, *where, step="before", attempt=ctx.attempt, value=2 * n)
    result = await async_body(ctx, payload)
    after = await ctx.step.run("after", record_step, *where, step="after", attempt=ctx.attempt, value=2 * n + 1)
    if (before, after) != (2 * n, 2 * n + 1):
        await uncancelled(book.end_async(book.mismatch(ctx, n), "mismatch", time.monotonic()))
        raise StepMismatch(f"job {n}: the steps answered {(before, after)}, not {(2 * n, 2 * n + 1)}")
    return result


async def async_body(ctx: JobContext, payload: dict[str, Any]) -> int:
    entered = time.monotonic()
    book = ledger()
    run, cancelled = await uncancelled(book.start_async(ctx, payload["n"], entered))
    if cancelled:
        await uncancelled(book.end_async(run, "cancelled", time.monotonic()))
        raise asyncio.CancelledError
    event, ended = "error", None
    try:
        await asyncio.sleep(payload["ms"] / 1000)
        ended = time.monotonic()
        if payload["fail"] and ctx.attempt == 1:
            event = "fail"
            raise DeliberateFailure(f"job {payload['n']} fails its first attempt on purpose")
        event = "ok"
        return int(payload["n"])
    except asyncio.CancelledError:
        ended, event = ended if ended is not None else time.monotonic(), "cancelled"
        raise
    finally:
        with contextlib.suppress(LedgerUnavailable):
            await uncancelled(book.end_async(run, event, ended if ended is not None else time.monotonic()))


@dataclass(frozen=True)
class SoakApp:
    """The app and its jobs (``steps_job`` only under --flow)."""

    app: App
    sync_job: JobHandle[Any]
    async_job: JobHandle[Any]
    steps_job: JobHandle[Any] | None = None

    def handles(self) -> list[tuple[JobHandle[Any], str]]:
        """Each job with the body name the plan gives its jobs (``soak/plan.py``)."""
        out = [(self.sync_job, "sync"), (self.async_job, "async")]
        return out if self.steps_job is None else [*out, (self.steps_job, "steps")]


def tenant_of(payload: dict[str, Any]) -> str:
    return str(payload["tenant"])


def build_app(url: str | None, schema: str, *, flow: bool = False) -> SoakApp:
    """The soak's app on ``url`` and ``schema``: the workers' (from the environment) or the enqueuer's."""
    if not flow:
        soak_app = App(url, schema=schema)
        sync_job = soak_app.job(name=SYNC_JOB, tenant="none", retry=RETRY)(sync_body)
        async_job = soak_app.job(name=ASYNC_JOB, tenant="none", retry=RETRY)(async_body)
        return SoakApp(soak_app, sync_job, async_job)
    soak_app = App(url, schema=schema, limits=Limits(per_tenant=FLOW_PER_TENANT))
    sync_job = soak_app.job(name=SYNC_JOB, tenant="none", retry=RETRY)(sync_body)  # counted by no cap
    async_job = soak_app.job(name=ASYNC_JOB, tenant=tenant_of, retry=RETRY)(async_body)
    steps_job = soak_app.job(name=STEPS_JOB, tenant=tenant_of, retry=RETRY, concurrency=FLOW_STEPS_CAP)(steps_body)
    return SoakApp(soak_app, sync_job, async_job, steps_job)


_soak = build_app(os.environ.get(URL_ENV), os.environ.get(SCHEMA_ENV, "soak"), flow=os.environ.get(FLOW_ENV) == "1")
app = _soak.app
