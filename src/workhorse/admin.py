"""``app.admin``: the one operator API. The CLI, the metrics endpoint and any dashboard read and
change jobs through it; nothing else reads the tables.

Design: docs/guides/operating.md
"""

from __future__ import annotations

import builtins
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from workhorse._ports import DriverSource
from workhorse.durations import Duration, bounded_seconds, to_seconds
from workhorse.errors import ConfigurationError, JobNotFoundError
from workhorse.export import DEFAULT_EXPORT_PAGE, ExportPages, check_export, export_pages, state_fix
from workhorse.health.report import HealthReport, HealthRole, read_health
from workhorse.ids import SHORT_ID_DIGITS
from workhorse.jobs import JobHandle
from workhorse.leader.report import TasksReport, tasks_report
from workhorse.leader.tasks import TaskHandle
from workhorse.limits.rules import why_held
from workhorse.retention.policy import PurgeReport, Retention, purge_policy
from workhorse.search import checked_error, checked_payload
from workhorse.storable import flaw
from workhorse.types import (
    ALL_STATES,
    BULK_STATES,
    MAX_BULK,
    BulkFilter,
    BulkResult,
    BulkVerb,
    CounterSum,
    FlowRules,
    Job,
    ListFilter,
    Page,
    QueuePause,
    Snapshot,
    WorkerInfo,
)

if TYPE_CHECKING:
    from workhorse.drivers.base import Driver


class AdminSource(DriverSource, Protocol):
    """What ``app.admin`` needs of an ``App``: the loop's driver, and the declared cron tasks."""

    @property
    def tasks(self) -> Mapping[str, TaskHandle[Any]]: ...

    @property
    def jobs(self) -> Mapping[str, JobHandle[Any]]: ...

    def flow_rules(self) -> FlowRules | None: ...

    @property
    def retention(self) -> Retention | None: ...


MAX_PAGE = 200
DEFAULT_PAGE = 100
DEFAULT_WINDOW = "1h"
MAX_MINUTES_WINDOW = 7200  # seconds of minute counters kept before the rollup folds them (two hours)
_HEX = re.compile(r"^[0-9a-f]{1,32}$")
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
MAX_QUEUE_NAME = 200  # as @app.job(queue=...) allows
MIN_ID_PREFIX = 4  # hex digits an id prefix needs to stand for a job (show, cancel, requeue, ...)
AMBIGUOUS_SHOWN = 5  # candidates a JOB_ID_AMBIGUOUS refusal names


def _ids(jobs: builtins.list[Job]) -> str:
    """The whole ids of the jobs a spelling matched (AMBIGUOUS_SHOWN of them, "and more" after)."""
    more = " and more" if len(jobs) > AMBIGUOUS_SHOWN else ""
    return ", ".join(j.id for j in jobs[:AMBIGUOUS_SHOWN]) + more


@dataclass(frozen=True)
class StatsRow:
    """One queue (``name`` None) or one job name of a queue, as ``stats`` reports it.

    Counts are jobs now; ``completed``/``retried``/``failures``/``lapsed`` are attempts settled in
    the window (``failures`` = failed for good + dead-lettered). ``throughput`` is completed jobs a
    minute over the window; ``failure_rate`` is the share of settled attempts that did not
    complete (None when nothing settled). ``running`` counts runs whose lease is live;
    ``lease_lapsed`` the running jobs whose lease lapsed and that nothing recovered yet (their
    worker died or froze), ``oldest_lapse_age`` seconds since the oldest of them lapsed."""

    queue: str
    name: str | None
    ready: int = 0
    delayed: int = 0
    running: int = 0
    suspended: int = 0
    dead: int = 0
    failed: int = 0
    oldest_ready_age: float | None = None
    paused: bool = False
    completed: int = 0
    retried: int = 0
    failures: int = 0
    lapsed: int = 0
    throughput: float = 0.0
    failure_rate: float | None = None
    held_back: int = 0  # due ready jobs a full fleet-wide cap holds back (queue rows only)
    lease_lapsed: int = 0
    oldest_lapse_age: float | None = None
    unknown: bool = False  # a job name row the app does not declare (no worker of it runs those jobs)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queue": self.queue}
        if self.name is not None:
            out["name"] = self.name
            out["unknown"] = self.unknown
        out.update(
            ready=self.ready,
            delayed=self.delayed,
            running=self.running,
            lease_lapsed=self.lease_lapsed,
            oldest_lapse_age=None if self.oldest_lapse_age is None else round(self.oldest_lapse_age, 3),
            suspended=self.suspended,
            dead=self.dead,
            failed=self.failed,
            oldest_ready_age=None if self.oldest_ready_age is None else round(self.oldest_ready_age, 3),
            paused=self.paused,
            held_back=self.held_back,
            completed=self.completed,
            retried=self.retried,
            failures=self.failures,
            lapsed=self.lapsed,
            throughput_per_minute=round(self.throughput, 3),
            failure_rate=None if self.failure_rate is None else round(self.failure_rate, 4),
        )
        return out


@dataclass(frozen=True)
class Stats:
    """What ``app.admin.stats()`` answers."""

    at: datetime
    window: float  # seconds
    queues: list[StatsRow]
    names: list[StatsRow]
    workers: int
    paused: list[QueuePause] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "window_seconds": self.window,
            "workers": self.workers,
            "queues": [q.to_dict() for q in self.queues],
            "names": [n.to_dict() for n in self.names],
            "paused": [p.to_dict() for p in self.paused],
        }


class Admin:
    """The operator API of one ``App`` (``app.admin``). Every method is a coroutine on the calling
    event loop's driver; each answers plain records with a ``to_dict()`` for ``--json``."""

    def __init__(self, app: AdminSource) -> None:
        self._app = app

    @property
    def _driver(self) -> Driver:
        return self._app.driver

    # -- reading ---------------------------------------------------------------------------------

    async def list(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        id_prefix: str | None = None,
        name_part: str | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        payload: Mapping[str, Any] | None = None,
        error: str | None = None,
        limit: int = DEFAULT_PAGE,
        after: str | None = None,
        before: str | None = None,
    ) -> Page:
        """One page of jobs, newest first. Follow ``page.next`` with ``after=``, ``page.prev`` with
        ``before=``. ``name`` is one name exactly; ``name_part`` that name or the last dotted part
        of one (``send_receipt`` finds ``shop.jobs.send_receipt``), as ``workhorse ls --name`` reads
        a name without a dot.

        ``payload`` (a JSON object the payload contains: ``{"order": 42}``) and ``error`` (text
        the last error's type or message contains, any case) search: each page examines at most
        SEARCH_SCAN rows past its cursor (``page.scanned``), and ``page.next`` goes on from the
        last one examined, so a search costs the same per page at any table size."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ConfigurationError(
                code="PAGE_LIMIT_INVALID",
                cause=f"limit expected a whole number from 1 to {MAX_PAGE}, got {limit!r}",
                fix=f"workhorse ls --limit {MAX_PAGE}   # and follow `next` for more",
            )
        if after is not None and before is not None:
            raise ConfigurationError(
                code="PAGE_CURSOR_INVALID",
                cause="both after and before were given; a page is read in one direction",
                fix="pass the `next` of a page as after, or its `prev` as before, not both",
            )
        after, before = _position(after, "after"), _position(before, "before")
        if state is not None:
            _check_state(state, ALL_STATES, "workhorse ls --state dead")
        prefix = None
        if id_prefix is not None:
            prefix = id_prefix.replace("-", "").lower() if isinstance(id_prefix, str) else ""
            if not _HEX.fullmatch(prefix):
                raise ConfigurationError(
                    code="ID_PREFIX_INVALID",
                    cause=f"id_prefix expected 1 to 32 hexadecimal digits of a job id, got {id_prefix!r}",
                    fix="workhorse ls --id-prefix 0190f1c2",
                )
        for what, value in (("created_from", created_from), ("created_to", created_to)):
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise ConfigurationError(
                    cause=f"{what} expected a timezone-aware datetime, got {value!r}",
                    fix=f"{what}=datetime(2026, 1, 1, tzinfo=UTC)   # the CLI takes 2026-01-01T00:00Z",
                )
        _check_names(queue=queue, name=name, tenant=tenant, name_part=name_part)
        searched = checked_payload(payload), checked_error(error)
        filters = ListFilter(
            payload=searched[0],
            error=searched[1],
            queue=queue,
            name=name,
            state=state,
            tenant=tenant,
            id_prefix=prefix,
            name_part=name_part,
            created_from=created_from,
            created_to=created_to,
        )
        return await self._driver.list_jobs(filters, limit=limit, after=after, before=before)

    async def get(self, job_id: str) -> Job | None:
        return await self._driver.get_job(job_id)

    async def resolve(self, job_id: str) -> str:
        """A job's id from a person's spelling of it: a whole id as it is; its short form
        (``workhorse.ids.short_id``: SHORT_ID_DIGITS hex digits, as ``ls`` prints it) as the job
        that has it; else a unique prefix of at least MIN_ID_PREFIX hexadecimal digits
        (dashes ignored) as the id it starts. A short form or prefix no job has is JOB_NOT_FOUND;
        one several jobs share is JOB_ID_AMBIGUOUS, naming them. Anything else is passed on as it
        is (the verb then answers JOB_NOT_FOUND)."""
        if not isinstance(job_id, str) or _UUID.fullmatch(job_id):
            return job_id
        prefix = job_id.replace("-", "").lower()
        if len(prefix) < MIN_ID_PREFIX or not _HEX.fullmatch(prefix):
            return job_id
        if len(job_id) == SHORT_ID_DIGITS:  # a short form first; only one no job has is a prefix
            page = await self._driver.list_jobs(ListFilter(short_id=prefix), limit=AMBIGUOUS_SHOWN + 1)
            if len(page.jobs) == 1:
                return page.jobs[0].id
            if page.jobs:
                raise ConfigurationError(
                    code="JOB_ID_AMBIGUOUS",
                    cause=f"the short id {job_id!r} is more than one job's: {_ids(page.jobs)}",
                    fix="give the whole id: workhorse ls --json   # shows every job's whole id",
                )
        page = await self._driver.list_jobs(ListFilter(id_prefix=prefix), limit=AMBIGUOUS_SHOWN + 1)
        if not page.jobs:
            raise JobNotFoundError(job_id)
        if len(page.jobs) > 1:
            raise ConfigurationError(
                code="JOB_ID_AMBIGUOUS",
                cause=f"the id prefix {job_id!r} starts more than one job: {_ids(page.jobs)}",
                fix=f"give the {SHORT_ID_DIGITS}-digit short id that `workhorse ls` prints, more of the id, "
                f"or all of it: workhorse ls --id-prefix {prefix}",
            )
        return page.jobs[0].id

    async def workers(self) -> builtins.list[WorkerInfo]:
        return await self._driver.list_workers()

    # -- one job ---------------------------------------------------------------------------------

    async def cancel(self, job_id: str) -> Job:
        """Cancel a live job. A running one loses its claim at once; on PostgreSQL its worker is
        notified, renews at once, cancels the body and writes nothing of it (with the memory driver,
        at its next heartbeat)."""
        return await self._driver.cancel(job_id)

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> Job:
        if from_step is not None and (not isinstance(from_step, str) or not from_step or flaw(from_step)):
            raise ConfigurationError(
                cause=f"from_step expected a step name, got {from_step!r}",
                fix=f"workhorse show {job_id}   # then: workhorse requeue {job_id} --from-step NAME",
            )
        return await self._driver.requeue(job_id, from_step=from_step)

    async def promote(self, job_id: str) -> Job:
        return await self._driver.promote(job_id)

    async def remove(self, job_id: str) -> Job:
        return await self._driver.remove(job_id)

    # -- many jobs -------------------------------------------------------------------------------

    async def requeue_many(
        self,
        *,
        state: str,
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = MAX_BULK,
        dry_run: bool = False,
    ) -> BulkResult:
        """Requeue finished jobs in ``state``, oldest first. A job whose idempotency key a live job
        holds stays where it is (and is not counted in ``remaining``); of several finished jobs
        sharing one key, the oldest is requeued."""
        return await self._bulk("requeue", BulkFilter(state, queue, name, tenant), limit, dry_run)

    async def remove_many(
        self,
        *,
        state: str,
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = MAX_BULK,
        dry_run: bool = False,
    ) -> BulkResult:
        """Delete jobs in ``state`` (never 'running'), oldest first, with their steps."""
        return await self._bulk("remove", BulkFilter(state, queue, name, tenant), limit, dry_run)

    async def promote_many(
        self,
        *,
        state: str = "delayed",
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = MAX_BULK,
        dry_run: bool = False,
    ) -> BulkResult:
        """Make waiting jobs (delayed or backing off) due now, oldest first."""
        return await self._bulk("promote", BulkFilter(state, queue, name, tenant), limit, dry_run)

    async def cancel_many(
        self,
        *,
        state: str,
        queue: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = MAX_BULK,
        dry_run: bool = False,
    ) -> BulkResult:
        """Cancel live jobs in ``state``, oldest first (running ones as ``cancel`` does)."""
        return await self._bulk("cancel", BulkFilter(state, queue, name, tenant), limit, dry_run)

    async def _bulk(
        self,
        verb: BulkVerb,
        filters: BulkFilter,
        limit: int,
        dry_run: bool,
    ) -> BulkResult:
        state = filters.state
        command = "rm" if verb == "remove" else verb
        _check_names(queue=filters.queue, name=filters.name, tenant=filters.tenant)
        _check_state(state, ALL_STATES, f"workhorse {command} --all --state {sorted(BULK_STATES[verb])[0]}")
        allowed = BULK_STATES[verb]
        if state not in allowed:
            raise ConfigurationError(
                code="BULK_STATE_INVALID",
                cause=f"{command} --all cannot take jobs in state {state!r}; it takes {', '.join(sorted(allowed))}",
                fix=f"workhorse {command} --all --state {sorted(allowed)[0]} --dry-run",
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BULK:
            raise ConfigurationError(
                code="BULK_LIMIT_INVALID",
                cause=f"limit expected a whole number from 1 to {MAX_BULK}, got {limit!r}",
                fix=f"call again until `remaining` is 0; each call moves at most {MAX_BULK} jobs",
            )
        return await self._driver.bulk(verb, filters, limit=limit, dry_run=bool(dry_run))

    # -- queues ----------------------------------------------------------------------------------

    async def pause(self, queue: str, *, reason: str | None = None) -> QueuePause:
        """Pause a queue: no worker claims from it until ``resume``. Running jobs finish."""
        _check_queue(queue, "pause")
        if reason is not None and (not isinstance(reason, str) or flaw(reason)):
            raise ConfigurationError(
                code="PAUSE_REASON_INVALID",
                cause=f"pause expected a reason as text PostgreSQL can store (no NUL, no lone surrogate), "
                f"got {reason!r}",
                fix="workhorse pause emails --reason 'provider outage'",
            )
        return await self._driver.pause_queue(queue, reason)

    async def resume(self, queue: str) -> bool:
        """Resume a paused queue; answers False when it was not paused."""
        _check_queue(queue, "resume")
        return await self._driver.resume_queue(queue)

    async def pauses(self) -> builtins.list[QueuePause]:
        return await self._driver.list_pauses()

    # -- measuring -------------------------------------------------------------------------------

    async def snapshot(self, since: Duration | None = None) -> Snapshot:
        """The raw numbers ``stats`` and the metrics endpoint are made of (``since`` None: counters
        of all time)."""
        seconds = None if since is None else _window(since)
        return await self._driver.snapshot(seconds)

    async def stats(self, since: Duration = DEFAULT_WINDOW) -> Stats:
        """Per queue and per job name: jobs by state, oldest ready age, and the window's
        throughput and failure rate."""
        window = _window(since)
        stats = summarize(await self._driver.snapshot(window), window)
        declared = self._app.jobs
        if declared:  # an app that declares jobs knows which names none of its workers runs
            stats = replace(stats, names=[replace(n, unknown=n.name not in declared) for n in stats.names])
        rules = self._app.flow_rules()
        if rules is None:
            return stats
        usage = await self._driver.flow_usage(rules, {n: h.queue for n, h in self._app.jobs.items()})
        queues = [replace(q, held_back=usage.held_back.get(q.queue, 0)) for q in stats.queues]
        return replace(stats, queues=queues)

    async def edges(self, job_id: str) -> builtins.list[dict[str, Any]]:
        """The jobs ``job_id`` waits on (side 'dependency', in the order given at enqueue) and
        those waiting on it (side 'dependent'): id, name, state (None: purged). Empty on the
        memory driver, which keeps no dependencies."""
        read = getattr(self._driver, "job_edges", None)
        if read is None:
            return []
        edges: builtins.list[dict[str, Any]] = await read(job_id)
        return edges

    async def health(self, *, pinned_after: Duration = "5m") -> HealthReport | None:
        """The database's health as the queue feels it: each table's live and dead rows and last
        vacuum, what has held the vacuum horizon for longer than ``pinned_after``, and the
        warnings (``VACUUM_HORIZON_PINNED``, ``DEAD_ROWS_HIGH``) with the SQL that fixes them.
        None on a driver that keeps no such thing (the memory driver)."""
        seconds = to_seconds(pinned_after, what="pinned_after")
        driver = self._driver
        if not isinstance(driver, HealthRole):
            return None
        return await read_health(driver, pinned_after=seconds)

    async def why_waiting(self, job: Job) -> builtins.list[str]:
        """Why a due ready job is not starting: one line per full fleet-wide cap it counts toward
        (empty when none holds it, or the job is not due and ready)."""
        rules = self._app.flow_rules()
        if rules is None or job.state != "ready":
            return []
        usage = await self._driver.flow_usage(rules, {})
        return why_held(rules, usage, job)

    async def purge(self, *, dry_run: bool = False) -> PurgeReport:
        """Remove now what the app's retention policy says has aged out (``dry_run``: count it,
        remove nothing): finished jobs by state with their steps, expired events, gone workers'
        rows, old rate stamps and day counters. Small batches, each its own transaction; safe
        beside a running leader's purge. ``App(retention=None)``: nothing is removed."""
        policy = purge_policy(self._app.retention, self._app.flow_rules())
        if policy is None:
            return PurgeReport({}, 0, dry_run)
        purged = await self._driver.purge(policy, dry_run=dry_run)
        return PurgeReport(purged.removed, purged.steps, dry_run)

    async def counter_minutes(self, since: Duration = DEFAULT_WINDOW) -> builtins.list[tuple[datetime, CounterSum]]:
        """The per-minute outcome counters of every queue (summed over its job names; ``name`` is
        "") over the last ``since`` (at most two hours: older minutes are folded into hours),
        oldest first: the dashboard's charts."""
        seconds = to_seconds(since, what="since", allow_zero=False)
        if seconds > MAX_MINUTES_WINDOW:
            raise ConfigurationError(
                code="WINDOW_INVALID",
                cause=f"since expected at most {MAX_MINUTES_WINDOW // 60} minutes (older minute counters are "
                f"folded into hours), got {since!r}",
                fix="app.admin.counter_minutes('1h')",
            )
        return await self._driver.counter_minutes(max(1, math.ceil(seconds / 60)))

    async def rollup(self) -> int:
        """Fold old minute counters into hours and hours into days (the scheduler leader does this)."""
        return await self._driver.rollup_counters()

    # -- cron tasks ------------------------------------------------------------------------------

    async def tasks(self, *, declared: bool = True) -> TasksReport:
        """Every cron task the driver knows (schedule, last and next fire), and the scheduler's
        lease. With ``declared``, the app's own tasks that no leader has registered yet are listed
        too, and each registered one says whether the app declares it (``workhorse tasks``)."""
        state = await self._driver.read_schedule()
        return tasks_report(state, self._app.tasks if declared else None)

    # -- exporting -------------------------------------------------------------------------------

    def export(self, *, tenant: str, state: str | None = None, page_size: int = DEFAULT_EXPORT_PAGE) -> ExportPages:
        """One tenant's jobs (in ``state``, when given) as an async iterator of pages, newest first:
        ``async for page in app.admin.export(tenant="acme")``. The arguments are checked at the
        call; only rows whose tenant equals ``tenant`` are ever read (see ``workhorse.export``)."""
        check_export(tenant, page_size)
        if state is not None:
            _check_state(state, ALL_STATES, state_fix(tenant))
        return export_pages(self._app, tenant=tenant, state=state, page_size=page_size)


def _position(cursor: str | None, which: str) -> str | None:
    """A page's cursor as the canonical id it is. A cursor is a position in id order, not a row:
    the job it names may be gone (removed, purged) and the page is still the rows beyond it. What
    is no id at all (not a uuid, spelled as a uuid's text is) is refused."""
    if cursor is None:
        return None
    if not isinstance(cursor, str) or not _UUID.fullmatch(cursor):
        link = "prev" if which == "before" else "next"
        raise ConfigurationError(
            code="PAGE_CURSOR_INVALID",
            cause=f"the {which} cursor {cursor!r} is no page position: a cursor is a job id (a uuid), "
            f"as a page's `{link}` gives it",
            fix=f"start from the first page (omit the cursor), then pass each page's `{link}` as {which}",
        )
    return str(uuid.UUID(cursor))


def summarize(snap: Snapshot, window: float) -> Stats:
    """Fold a snapshot into per-queue and per-name rows (a pure function, shared by every driver)."""
    paused = {p.queue for p in snap.paused}
    rows: dict[tuple[str, str | None], dict[str, Any]] = {}

    def row(queue: str, name: str | None) -> dict[str, Any]:
        return rows.setdefault((queue, name), {"queue": queue, "name": name})

    for c in snap.states:
        state = "lease_lapsed" if c.state == "lapsed" else c.state  # `lapsed` is the window's counter
        for key in ((c.queue, None), (c.queue, c.name)):
            r = row(*key)
            r[state] = r.get(state, 0) + c.count
            if c.state in ("ready", "lapsed") and c.oldest_run_at is not None:
                age = max(0.0, (snap.now - c.oldest_run_at).total_seconds())
                oldest = "oldest_ready_age" if c.state == "ready" else "oldest_lapse_age"
                r[oldest] = max(r.get(oldest) or 0.0, age)
    for s in snap.counters:
        for key in ((s.queue, None), (s.queue, s.name)):
            r = row(*key)
            r["completed"] = r.get("completed", 0) + s.completed
            r["retried"] = r.get("retried", 0) + s.retried
            r["failures"] = r.get("failures", 0) + s.failed + s.dead
            r["lapsed"] = r.get("lapsed", 0) + s.lapsed
    for queue in paused:
        row(queue, None)
    out: list[StatsRow] = []
    for (queue, name), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        settled = r.get("completed", 0) + r.get("retried", 0) + r.get("failures", 0)
        out.append(
            StatsRow(
                queue=queue,
                name=name,
                ready=r.get("ready", 0),
                delayed=r.get("delayed", 0),
                running=r.get("running", 0),
                suspended=r.get("suspended", 0),
                dead=r.get("dead", 0),
                failed=r.get("failed", 0),
                oldest_ready_age=r.get("oldest_ready_age"),
                lease_lapsed=r.get("lease_lapsed", 0),
                oldest_lapse_age=r.get("oldest_lapse_age"),
                paused=queue in paused,
                completed=r.get("completed", 0),
                retried=r.get("retried", 0),
                failures=r.get("failures", 0),
                lapsed=r.get("lapsed", 0),
                throughput=r.get("completed", 0) * 60.0 / window,
                failure_rate=None if settled == 0 else (settled - r.get("completed", 0)) / settled,
            )
        )
    return Stats(
        at=snap.now,
        window=window,
        queues=[r for r in out if r.name is None],
        names=[r for r in out if r.name is not None],
        workers=snap.workers,
        paused=list(snap.paused),
    )


def _check_state(state: object, allowed: tuple[str, ...], fix: str) -> None:
    if state not in allowed:
        raise ConfigurationError(
            code="STATE_UNKNOWN",
            cause=f"state expected one of {', '.join(allowed)}; got {state!r}",
            fix=fix,
        )


def _window(since: Duration) -> float:
    """A ``since`` window in seconds: positive, and at most ``LONGEST`` (100 years)."""
    return bounded_seconds(
        since,
        what="since",
        code="STATS_WINDOW_TOO_LONG",
        fix="workhorse stats --since 30d   # any window up to 36525d; every job fits in one that long",
        allow_zero=False,
    )


def _check_queue(queue: object, verb: str) -> None:
    if not isinstance(queue, str) or not queue.strip() or len(queue) > MAX_QUEUE_NAME or flaw(queue):
        raise ConfigurationError(
            code="QUEUE_NAME_INVALID",
            cause=f"{verb} expected a queue name (1 to {MAX_QUEUE_NAME} characters of text PostgreSQL can store: "
            f"no NUL, no lone surrogate), got {queue!r}",
            fix=f"workhorse {verb} emails",
        )


# A filter no job can match, because PostgreSQL cannot store it: refused with the code the same
# name gets where it is given (a queue, a job's name, a tenant), not sent to fail in the driver.
_NAME_CODES = {"queue": "QUEUE_NAME_INVALID", "name": "JOB_NAME_INVALID", "tenant": "TENANT_INVALID"}


def _check_names(**filters: object) -> None:
    for what, value in filters.items():
        if value is None:
            continue
        wrong = "it is not text" if not isinstance(value, str) else flaw(value)
        if wrong is not None:
            kind = what.split("_")[0]  # name_part filters names too
            raise ConfigurationError(
                code=_NAME_CODES[kind],
                cause=f"the {what} filter holds {wrong}; no {kind} can, as PostgreSQL cannot store it: {value!r}",
                fix=f"workhorse ls --{kind} NAME   # a {kind} as ls shows it",
            )
