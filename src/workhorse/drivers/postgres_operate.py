"""The PostgreSQL driver's operate role (``PostgresOperate``): what an operator reads and does,
through ``app.admin``, the CLI and the metrics endpoint; and the counter folds the leader runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg.errors

import workhorse.deps.queries as dep_sql
import workhorse.limits.queries as flow_sql
import workhorse.steps.queries as step_sql
from workhorse._db.queries import admin as admin_sql
from workhorse._db.queries import jobs as sql
from workhorse._db.queries import series as series_sql
from workhorse._db.queries import workers as worker_sql
from workhorse.drivers import refusals
from workhorse.drivers.postgres_core import PostgresCore, _is_uuid
from workhorse.drivers.searching import SEARCH_SCAN, searched_page
from workhorse.errors import DatabaseError
from workhorse.ids import SHORT_ID_PERIODS
from workhorse.types import (
    LIVE_STATES,
    BulkFilter,
    BulkResult,
    BulkVerb,
    CounterSum,
    FlowRules,
    FlowUsage,
    Job,
    ListFilter,
    Page,
    QueuePause,
    Snapshot,
    StateCount,
    WorkerInfo,
    shown_step,
)

SHOWN_LIMIT = 1_000  # characters of a step's result or error message that `show` prints

BULK_TRIES = 3  # a bulk requeue racing a keyed enqueue (or another requeue) of the same key is run again


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
        flow_key=row.get("flow_key"),
        traceparent=row.get("traceparent"),
        lease_lapsed=bool(row.get("lease_lapsed")),
        handed_back=row.get("handed_back"),
    )


def _like_escaped(text: str) -> str:
    """``text`` for a LIKE pattern whose every character means itself (the default escape, ``\\``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class PostgresOperate(PostgresCore):
    """The operate role: reads (a job with its steps, a keyset page, live workers), the guarded
    verbs, bulk verbs, pauses, the snapshot and the counter folds."""

    # -- reads and operator verbs ---------------------------------------------------------------

    async def get_job(self, job_id: str) -> Job | None:
        """The job with its steps as ``show`` lists them (a second read, only when the job exists)."""
        job = await self._get_job(job_id)
        if job is None:
            return None
        rows = await self.fetch(step_sql.LIST_SHOWN, {"job_id": job.id, "limit": SHOWN_LIMIT})
        return replace(job, steps=[_shown(r) for r in rows])

    async def job_edges(self, job_id: str) -> list[dict[str, Any]]:
        """The job's dependencies (in the order given) and dependents: side, id, name, state."""
        rows = await self.fetch(dep_sql.EDGES_OF, {"id": job_id})
        return [{"side": r["side"], "id": r["id"], "name": r["name"], "state": r["state"]} for r in rows]

    async def _get_job(self, job_id: str) -> Job | None:
        if not _is_uuid(job_id):
            return None
        rows = await self.fetch(sql.GET, {"id": job_id})
        return _job(rows[0]) if rows else None

    async def list_jobs(
        self, filters: ListFilter, *, limit: int, after: str | None = None, before: str | None = None
    ) -> Page:
        """One keyset page in one statement. A cursor is a position: the rows beyond it, whether or
        not its job still exists; only what is no uuid at all is refused (``app.admin`` refuses it
        first, with the same code)."""
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
        if filters.name_part is not None:
            params["name_part"], params["name_like"] = filters.name_part, "%." + _like_escaped(filters.name_part)
            given.append("name_part")
        cursor, which = (before, "before") if before is not None else (after, "after")
        if cursor is not None and not _is_uuid(cursor):
            raise refusals.bad_cursor(cursor, which=which)
        if filters.searches:
            return await self._search(filters, params, given, limit=limit, after=after, before=before)
        if filters.short_id is not None:  # admin.resolve's lookup: the short id alone
            short = filters.short_id
            found = {"low": short[:6], "counter": short[6:9], "rand": short[9:12], "periods": SHORT_ID_PERIODS}
            rows = await self.fetch(admin_sql.SHORT_ID_LOOKUP, {**found, "limit": limit})
            return Page([_job(r) for r in rows], next=None)
        rows = await self.fetch(admin_sql.list_page(given, backwards=before is not None), params)
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

    async def _search(
        self,
        filters: ListFilter,
        params: dict[str, Any],
        given: list[str],
        *,
        limit: int,
        after: str | None,
        before: str | None,
    ) -> Page:
        """A page of a bounded search (``admin_sql.search_page``): at most SEARCH_SCAN rows walked."""
        searches = []
        if filters.payload is not None:
            params["payload"] = json.dumps(filters.payload)
            searches.append("payload")
        if filters.error is not None:
            params["error_like"] = "%" + _like_escaped(filters.error) + "%"
            searches.append("error")
        params["scan"] = SEARCH_SCAN
        rows = await self.fetch(admin_sql.search_page(given, searches, backwards=before is not None), params)
        jobs = [_job(r) for r in rows if r["id"] is not None]
        walked_to, walked = (rows[0]["walked_to"], int(rows[0]["walked"])) if rows else (None, 0)
        return searched_page(jobs, limit=limit, after=after, before=before, walked_to=walked_to, walked=walked)

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
        if current.state in LIVE_STATES or current.state == "pending":
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

    # -- queues, measuring ----------------------------------------------------------------------

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

    async def flow_usage(self, flow: FlowRules, names: Mapping[str, str]) -> FlowUsage:
        rows = await self.fetch(flow_sql.FLOW_USAGE, {"rate_per": flow.rate_window})
        running = {(r["scope"], r["value"]): int(r["n"]) for r in rows if r["scope"] != "start"}
        starts = {r["value"]: int(r["n"]) for r in rows if r["scope"] == "start"}
        usage = FlowUsage(running, starts)
        if not names:  # only what holds the caps was asked for (why_waiting): no count to make
            return usage
        counted = await self.fetch(flow_sql.FLOW_HELD_BACK, flow.blocked_params(flow.full(usage), names))
        return FlowUsage(running, starts, {r["queue"]: int(r["n"]) for r in counted})

    async def rollup_counters(self) -> int:
        folded = 0
        for statement in (admin_sql.ROLLUP_MINUTES, admin_sql.ROLLUP_HOURS):  # minutes first: hours may gain
            rows = await self.fetch(statement)
            folded += int(rows[0]["folded"])
        return folded

    async def counter_minutes(self, minutes: int) -> list[tuple[datetime, CounterSum]]:
        rows = await self.fetch(series_sql.COUNTER_MINUTES, {"minutes": minutes})
        return [
            (
                r["bucket"],
                CounterSum(
                    r["queue"],
                    "",
                    completed=int(r["completed"]),
                    retried=int(r["retried"]),
                    failed=int(r["failed"]),
                    dead=int(r["dead"]),
                    lapsed=int(r["lapsed"]),
                ),
            )
            for r in rows
        ]


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


def _id_range(prefix: str) -> tuple[str, str]:
    """The inclusive uuid range of every id starting with ``prefix`` (lowercase hex, no dashes),
    which the primary key index serves."""
    return str(uuid.UUID(hex=prefix.ljust(32, "0"))), str(uuid.UUID(hex=prefix.ljust(32, "f")))
