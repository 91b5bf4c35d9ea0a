"""``App``: where jobs are declared, enqueued, inspected and run."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, overload

from workhorse.admin import DEFAULT_PAGE, Admin
from workhorse.context import JobContext
from workhorse.drivers.base import Driver
from workhorse.drivers.memory import MemoryDriver
from workhorse.drivers.pooler import pool_size
from workhorse.drivers.postgres import PostgresDriver
from workhorse.drivers.postgres_core import check_schema_name
from workhorse.durations import Duration
from workhorse.errors import ConfigurationError
from workhorse.hooks import Hooks
from workhorse.jobs import Body, JobHandle, Outcome, TenantOf
from workhorse.leader.tasks import TaskDecorator, TaskHandle
from workhorse.limits.rules import Concurrency, Limits, rules_for
from workhorse.payload import DEFAULT_MAX_BYTES
from workhorse.retention.policy import DEFAULT_RETENTION, Retention
from workhorse.retry import Retry
from workhorse.steps.events import DEFAULT_TTL, prepare_event
from workhorse.types import FlowRules, Job, JobRef, Page, PublishedEvent, WorkerInfo

if TYPE_CHECKING:
    from workhorse.webhooks import WebhookPolicy
    from workhorse.webhooks.api import Webhooks
    from workhorse.worker import Worker

R = TypeVar("R")
P = TypeVar("P")

# Set by ``workhorse.testing.database_guard`` while the pytest plugin's ``app`` fixture runs: an App
# about to reach a database asks it first, so a job handle of another App (the module's own,
# declared on PostgreSQL) cannot write to a real database from a test that runs on memory.
_database_guard: Callable[[App], None] | None = None


def _guarded(app: App) -> None:
    if _database_guard is not None:
        _database_guard(app)


class App:
    """One workhorse application: a registry of jobs and a way to reach their storage.

    ``App()`` resolves its database lazily (argument, ``WORKHORSE_DATABASE_URL``, else the embedded
    server), so declaring jobs at import time never opens a connection. ``App(driver="memory")``
    keeps everything in this process, for unit tests.

    ``driver=`` may also be a driver instance. A ``PostgresDriver`` serves this app's own calls
    (enqueue, admin) with its pool and settings, and the app takes its URL and schema; a worker
    still opens its own claim, settle, heartbeat and LISTEN connections from that URL. The caller
    built it, so the caller closes it: ``app.close()`` leaves it open. A ``MemoryDriver`` (the test
    double, say with a clock of your own) is in-process: every role shares it and nothing listens.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        driver: str | PostgresDriver | MemoryDriver | None = None,
        schema: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_BYTES,
        limits: Limits | None = None,
        retention: Retention | None = DEFAULT_RETENTION,
        webhooks: WebhookPolicy | None = None,
    ) -> None:
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigurationError(
                cause=f"limits expected a workhorse.Limits, got {limits!r}",
                fix="App(limits=Limits(per_tenant=5, total=100))",
            )
        self.limits = limits
        if retention is not None and not isinstance(retention, Retention):
            raise ConfigurationError(
                cause=f"retention expected a workhorse.Retention or None (keep everything), got {retention!r}",
                fix="App(retention=Retention(done='1d', failed='7d'))",
            )
        self.retention = retention  # the scheduler leader purges by it (workhorse.retention)
        self._given: PostgresDriver | None = None  # the caller's driver for the app role; theirs to close
        if isinstance(driver, PostgresDriver):
            if database_url is not None and database_url != driver.url:
                raise ConfigurationError(
                    cause="both database_url and a PostgresDriver were given, for different databases",
                    fix="pass one: App(driver=PostgresDriver(url, ...)) takes its URL from the driver",
                )
            if schema is not None and schema != driver.schema:
                raise ConfigurationError(
                    cause=f"schema={schema!r} was given with a PostgresDriver for schema {driver.schema!r}",
                    fix="pass the schema to the driver only: App(driver=PostgresDriver(url, schema=...))",
                )
            self._given, database_url, schema = driver, driver.url, driver.schema
        self.schema = check_schema_name("workhorse" if schema is None else schema)
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise ConfigurationError(
                cause=f"max_payload_bytes expected a positive whole number, got {max_payload_bytes!r}",
                fix="App(max_payload_bytes=1_048_576)",
            )
        self.max_payload_bytes = max_payload_bytes
        self._url = database_url
        self._memory: MemoryDriver | None = None
        if driver == "memory":
            self._memory = MemoryDriver()
        elif isinstance(driver, MemoryDriver):
            self._memory = driver
        elif self._given is None and driver not in (None, "postgres"):
            raise ConfigurationError(
                cause=f"driver expected 'postgres', 'memory', a PostgresDriver or a MemoryDriver, got {driver!r}",
                fix="App(driver='memory') for unit tests; omit it for PostgreSQL",
            )
        self.jobs: dict[str, JobHandle[Any]] = {}
        self.tasks: dict[str, TaskHandle[Any]] = {}  # cron tasks by name; each is also in self.jobs
        # One driver per event loop (psycopg's async pools belong to one). A loop that ended
        # (asyncio.run returned) strands its pool: the next loop's first call closes its connections.
        self._drivers: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], PostgresDriver]] = {}
        self._sync_driver: PostgresDriver | None = None
        self._lock = threading.Lock()
        self._admin: Admin | None = None
        self.hooks = Hooks()  # every job lifecycle event of this app's workers (workhorse.hooks)
        self._webhooks: Webhooks | None = None
        self.webhook_policy: WebhookPolicy | None = None
        if webhooks is not None:  # screened, and the delivery job declared (workhorse.webhooks)
            from workhorse.webhooks.deliver import install

            self.webhook_policy = install(self, webhooks)

    # -- storage ------------------------------------------------------------------------------

    @property
    def is_memory(self) -> bool:
        return self._memory is not None

    @property
    def database_url(self) -> str:
        _guarded(self)
        if self._url is None:
            from workhorse.embedded import resolve_database_url

            self._url = resolve_database_url(None)
        return self._url

    def postgres_driver(self, role: str, *, max_size: int | None = None, generic_plans: bool = False) -> PostgresDriver:
        """A fresh Postgres driver whose connections are named ``workhorse:<role>``; its pool holds
        at most ``max_size`` connections (default: ``WORKHORSE_POOL_SIZE``, else 10)."""
        return PostgresDriver(
            self.database_url,
            schema=self.schema,
            role=role,
            max_size=pool_size() if max_size is None else max_size,
            generic_plans=generic_plans,
        )

    @property
    def driver(self) -> Driver:
        """The driver for the calling event loop (psycopg async pools belong to one loop)."""
        if self._memory is not None:
            return self._memory
        _guarded(self)
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._drivers.get(id(loop))
            if entry is not None and entry[0]() is loop:
                return entry[1]
            self._abandon_ended_loops()
            found = self.postgres_driver("app")
            self._drivers[id(loop)] = (weakref.ref(loop), found)
            return found

    def _abandon_ended_loops(self) -> None:
        """Close, now and synchronously, the connections of the drivers whose loop has ended (its
        pool cannot be closed from another loop). Called under ``_lock``."""
        for key, (ref, driver) in list(self._drivers.items()):
            loop = ref()
            if loop is None or loop.is_closed():
                del self._drivers[key]
                driver.abandon()

    def sync_driver(self) -> Driver:
        """The driver for synchronous callers (``enqueue_sync``, ``migrate_sync``)."""
        if self._memory is not None:
            return self._memory
        _guarded(self)
        if self._given is not None:
            return self._given
        with self._lock:
            if self._sync_driver is None:
                self._sync_driver = self.postgres_driver("app")
            return self._sync_driver

    async def close(self) -> None:
        """Close this loop's connections (and the sync pool). The app stays usable; it reconnects.
        A driver passed in as ``driver=`` is the caller's, and stays open."""
        if self._memory is not None:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._drivers.pop(id(loop), None)
            found = entry[1] if entry is not None and entry[0]() is loop else None
            sync_driver, self._sync_driver = self._sync_driver, None
        if found is not None:
            await found.close()
        if sync_driver is not None:
            await sync_driver.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def migrate(self) -> list[int]:
        """Install or upgrade the schema. Safe to run from many processes at once."""
        return await self.driver.migrate()

    def migrate_sync(self) -> list[int]:
        if self._memory is not None:
            return asyncio.run(self._memory.migrate())
        driver = self.postgres_driver("migrate")
        return asyncio.run(_migrate_and_close(driver))

    def flow_rules(self) -> FlowRules | None:
        """The fleet-wide caps this app declares (``limits=`` and each job's ``concurrency=``), as a
        worker's claim enforces them; None when nothing is capped."""
        return rules_for(self.limits, {name: handle.concurrency for name, handle in self.jobs.items()})

    # -- declarations -------------------------------------------------------------------------

    @overload
    def job(self, fn: Callable[..., Any], /) -> JobHandle[Any]: ...

    @overload
    def job(
        self,
        name: str | None = None,
        *,
        queue: str = "default",
        tenant: TenantOf | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        priority: int = 0,
        on_settled: Callable[[Outcome], Any] | None = None,
        concurrency: int | Concurrency | None = None,
    ) -> JobDecorator: ...

    def job(
        self,
        name: Any = None,
        *,
        queue: str = "default",
        tenant: TenantOf | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        priority: int = 0,
        on_settled: Callable[[Outcome], Any] | None = None,
        concurrency: int | Concurrency | None = None,
    ) -> Any:
        """Declare a job. ``tenant`` is required: a function ``payload -> str``, or ``"none"``.
        ``concurrency`` caps its running runs fleet-wide (``workhorse.limits``)."""
        if callable(name):  # bare @app.job: refused below for the missing tenant, with the job's name
            return self._declare(
                name,
                name=None,
                queue=queue,
                tenant=None,
                retry=retry,
                timeout=timeout,
                priority=priority,
                on_settled=on_settled,
                concurrency=concurrency,
            )

        return JobDecorator(
            self,
            {
                "name": name,
                "queue": queue,
                "tenant": tenant,
                "retry": retry,
                "timeout": timeout,
                "priority": priority,
                "on_settled": on_settled,
                "concurrency": concurrency,
            },
        )

    def _declare(
        self,
        fn: Body[R],
        *,
        name: str | None,
        queue: str,
        tenant: TenantOf | None,
        retry: Retry | None,
        timeout: Duration | None,
        priority: int,
        on_settled: Callable[[Outcome], Any] | None,
        concurrency: int | Concurrency | None = None,
    ) -> JobHandle[R]:
        handle: JobHandle[R] = JobHandle(
            self,
            fn,
            name=name,
            queue=queue,
            tenant=tenant,
            retry=retry or Retry(),
            timeout=timeout,
            priority=priority,
            on_settled=on_settled,
            concurrency=concurrency,
        )
        existing = self.jobs.get(handle.name)
        if existing is not None and existing.fn is not fn:
            raise ConfigurationError(
                code="JOB_NAME_TAKEN",
                cause=f"two jobs are declared under the name {handle.name!r}",
                fix="give one of them an explicit name: @app.job(name='...')",
            )
        self.jobs[handle.name] = handle
        return handle

    def task(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
        payload: dict[str, Any] | None = None,
        queue: str = "default",
        tenant: TenantOf | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        priority: int = 0,
        on_settled: Callable[[Outcome], Any] | None = None,
    ) -> TaskDecorator:
        """Declare a cron task: a job plus its schedule (``cron=`` or ``every=``). See ``workhorse.leader.tasks``."""
        options: dict[str, Any] = {
            "cron": cron,
            "every": every,
            "timezone": timezone,
            "catch_up": catch_up,
            "payload": payload,
            "queue": queue,
            "tenant": tenant,
            "retry": retry,
            "timeout": timeout,
            "priority": priority,
            "on_settled": on_settled,
        }
        decorator = TaskDecorator(self, None if callable(name) else name, options)
        if callable(name):  # bare @app.task names no schedule: refused now, with the function's name
            decorator(name)
        return decorator

    def backfill(
        self,
        name: str,
        *,
        tenant: str,
        batch_size: int = 500,
        environments: tuple[str, ...] | None = None,
        requires: Any = None,
        count: Callable[[Any], Any] | None = None,
        pause: Duration | None = None,
        rows_per_second: float | None = None,
    ) -> Callable[[Callable[..., Any]], Any]:
        """Declare a backfill: ``async def fn(conn, cursor, limit) -> next_cursor | None``, run in
        batches by the built-in job ``workhorse.backfill``. See ``workhorse.backfill``."""
        from workhorse.backfill import declare

        def decorate(fn: Callable[..., Any]) -> Any:
            return declare(
                self, name, fn, tenant=tenant, batch_size=batch_size, environments=environments,
                requires=requires, count=count, pause=pause, rows_per_second=rows_per_second,
            )  # fmt: skip

        return decorate

    # -- running ------------------------------------------------------------------------------

    def worker(
        self,
        queues: list[str] | None = None,
        concurrency: int | dict[str, int] = 10,
        visibility_timeout: Duration = "30s",
        **options: Any,
    ) -> Worker:
        from workhorse.worker import Worker

        return Worker(self, queues=queues, concurrency=concurrency, visibility_timeout=visibility_timeout, **options)

    # -- inspecting and operating -------------------------------------------------------------

    @property
    def admin(self) -> Admin:
        """The operator API (``workhorse.admin.Admin``): list, verbs, bulk verbs, pause, stats."""
        if self._admin is None:
            self._admin = Admin(self)
        return self._admin

    @property
    def webhooks(self) -> Webhooks:
        """Webhook endpoints and deliveries (``workhorse.webhooks.api.Webhooks``)."""
        if self._webhooks is None:
            from workhorse.webhooks.api import Webhooks

            self._webhooks = Webhooks(self, self.webhook_policy)
        return self._webhooks

    async def list_workers(self) -> list[WorkerInfo]:
        """Live worker processes (registry rows renewed within their visibility timeout)."""
        return await self.driver.list_workers()

    async def get_job(self, job_id: str) -> Job | None:
        return await self.driver.get_job(job_id)

    # -- by name and results (workhorse.steps.results) ----------------------------------------

    def job_named(self, name: str) -> JobHandle[Any]:
        """The job declared under ``name``; ``JOB_UNKNOWN`` (naming the known ones) when none is."""
        handle = self.jobs.get(name) if isinstance(name, str) else None
        if handle is None:
            known = ", ".join(sorted(self.jobs)) or "none: no job is declared on this app"
            raise ConfigurationError(
                code="JOB_UNKNOWN",
                cause=f"no job is declared under the name {name!r}; the known names: {known}",
                fix="pass one of the known names, or import the module that declares it before enqueueing",
            )
        return handle

    async def enqueue(self, name: str, payload: Any = None, **options: Any) -> JobRef:
        """Enqueue the job declared under ``name`` (``job.enqueue``'s options), without a reference
        to its function: ``await app.enqueue("emails.send", {"to": ...}, key=..., conn=...)``."""
        return await self.job_named(name).enqueue(payload, **options)

    def enqueue_sync(self, name: str, payload: Any = None, **options: Any) -> JobRef:
        """``app.enqueue`` for synchronous code."""
        return self.job_named(name).enqueue_sync(payload, **options)

    async def wait(self, ref: JobRef | str, *, timeout: Duration | None = None) -> Job:  # noqa: ASYNC109
        """The job once it finished (done, failed, dead, cancelled), woken by its settle, not
        polled in a loop; ``WAIT_TIMEOUT`` when ``timeout`` passes first (``workhorse.steps.results``)."""
        from workhorse.steps.results import wait

        return await wait(self, ref, timeout=timeout)

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = DEFAULT_PAGE,
        after: str | None = None,
        before: str | None = None,
        **filters: Any,
    ) -> Page:
        """One page of jobs, newest first (``app.admin.list``, which takes every filter)."""
        return await self.admin.list(
            state=state, queue=queue, name=name, tenant=tenant, limit=limit, after=after, before=before, **filters
        )

    async def cancel(self, job_id: str) -> Job:
        """Cancel a live job. A running one's worker is notified, renews at once and cancels the body."""
        return await self.admin.cancel(job_id)

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> Job:
        """Run a finished job again, as a fresh run with its attempts reset. Its recorded steps
        replay; ``from_step`` drops that step and every later one first (one statement), so the run
        calls them again."""
        return await self.admin.requeue(job_id, from_step=from_step)

    async def promote(self, job_id: str) -> Job:
        """Make a waiting (delayed or backing-off) job due now."""
        return await self.admin.promote(job_id)

    async def remove(self, job_id: str) -> Job:
        """Delete a job that is not running."""
        return await self.admin.remove(job_id)

    # -- events (``workhorse.steps.events``) --------------------------------------------------

    async def publish_event(
        self, name: str, payload: Any = None, key: str | None = None, ttl: Duration = DEFAULT_TTL
    ) -> PublishedEvent:
        """Store an event and wake every run waiting for it (``ctx.step.wait_for_event`` with this
        name and key), from any process. It stays matchable for ``ttl`` (7 days by default)."""
        name, key, text, seconds = prepare_event(name, payload, key, ttl, max_bytes=self.max_payload_bytes)
        return await self.driver.publish_event(name, key, text, seconds)

    def publish_event_sync(
        self, name: str, payload: Any = None, key: str | None = None, ttl: Duration = DEFAULT_TTL
    ) -> PublishedEvent:
        """``publish_event`` for synchronous code (a Django or Flask view). Safe from any thread."""
        name, key, text, seconds = prepare_event(name, payload, key, ttl, max_bytes=self.max_payload_bytes)
        return self.sync_driver().publish_event_sync(name, key, text, seconds)

    async def purge_expired_events(self) -> int:
        """Delete events past their ``ttl`` (in small batches); answers how many rows went."""
        return await self.driver.purge_expired_events()


class JobDecorator:
    """What ``@app.job(...)`` answers: apply it to an ``async def`` or a plain ``def`` body."""

    def __init__(self, app: App, options: dict[str, Any]) -> None:
        self._app = app
        self._options = options

    # P: the payload type the body declares; enqueue takes a P (workhorse.typed validates it).
    @overload
    def __call__(self, fn: Callable[[JobContext, P], Coroutine[Any, Any, R]], /) -> JobHandle[R, P]: ...

    @overload
    def __call__(self, fn: Callable[[JobContext, P], R], /) -> JobHandle[R, P]: ...

    def __call__(self, fn: Callable[[JobContext, Any], Any], /) -> JobHandle[Any, Any]:
        return self._app._declare(fn, **self._options)


async def _migrate_and_close(driver: PostgresDriver) -> list[int]:
    try:
        return await driver.migrate()
    finally:
        await driver.close()
