"""The in-process driver: a test double for users' unit tests, not a second queue.
The rest is PostgreSQL's, refused here with ``POSTGRES_ONLY``.

Design: docs/guides/testing.md, docs/how-it-works/architecture.md
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from workhorse.drivers import refusals
from workhorse.drivers.base import (
    LIVE_STATES,
    Beat,
    Buried,
    Claimed,
    ClaimResult,
    FlowRules,
    Job,
    JobRef,
    Lease,
    ListFilter,
    NewJob,
    Page,
    Settlement,
    StepFence,
    WorkerInfo,
)
from workhorse.drivers.memory_core import _by_seq, _canonical, _json_text, _json_time, _KeySlot, _Row
from workhorse.drivers.memory_flow import MemoryFlow
from workhorse.drivers.memory_steps import MemorySteps
from workhorse.drivers.wakeups import Subscription
from workhorse.errors import ConfigurationError

_OUTCOMES = frozenset({"done", "retry", "interrupted", "dead", "failed"})
_FINISHING = frozenset({"done", "dead", "failed"})


def _refused(feature: str) -> Callable[..., Any]:
    """A method of the ``Driver`` contract this double does not keep: it raises ``POSTGRES_ONLY``."""

    async def refuse(self: MemoryDriver, *args: Any, **kwargs: Any) -> NoReturn:
        raise refusals.postgres_only(feature)

    return refuse


def _refused_now(feature: str) -> Callable[..., Any]:
    """``_refused`` for a synchronous method."""

    def refuse(self: MemoryDriver, *args: Any, **kwargs: Any) -> NoReturn:
        raise refusals.postgres_only(feature)

    return refuse


class MemoryDriver(MemorySteps, MemoryFlow):
    """The test double, in one process. ``clock`` is its database clock (default: UTC wall time)."""

    kind: str = "memory"

    # -- enqueue: INSERT_MANY + LIVE_BY_KEYS, the whole batch refused or none of it ----------------

    async def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        return self.enqueue_many_sync(jobs, conn=conn)

    async def enqueue_ready(self, count: int, rows: Iterator[NewJob], *, conn: Any = None) -> list[JobRef]:
        return self.enqueue_many_sync(list(rows), conn=conn)

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        """A live key answers its holder's ref; every enqueue calls the subscribers (the NOTIFY)."""
        if any(j.after for j in jobs):
            raise refusals.postgres_only("job dependencies (enqueue(after=...))")
        if conn is not None:
            raise ConfigurationError(
                code="CONN_UNSUPPORTED",
                cause="the memory driver has no database transactions, so an enqueue cannot join conn=",
                fix="drop conn= when running on MemoryDriver (a transactional enqueue needs PostgresDriver)",
            )
        with self._lock:
            now = self._now()
            checked: list[tuple[NewJob, str, datetime]] = []
            for new in jobs:
                job_id = _canonical(new.id)
                if job_id is None or job_id in self._rows or new.max_attempts < 1:
                    raise ConfigurationError(
                        cause=f"job {new.id!r} needs a fresh UUID id and max_attempts >= 1 "
                        f"(got max_attempts={new.max_attempts})",
                        fix="build NewJob with workhorse.ids.new_job_id() and max_attempts >= 1",
                    )
                if new.run_at is not None and new.run_at.utcoffset() is None:
                    raise ConfigurationError(
                        cause=f"run_at {new.run_at!r} is a naive datetime; it must be timezone-aware",
                        fix="pass run_at=datetime(..., tzinfo=UTC)",
                    )
                _json_text(new.payload, "the payload")
                due = now + timedelta(seconds=new.delay) if new.run_at is None else new.run_at.astimezone(UTC)
                checked.append((new, job_id, due))
            held: dict[_KeySlot, str] = {}
            for row in self._rows.values():
                if row.state in LIVE_STATES and (slot := row.slot()) is not None:
                    held[slot] = row.id
            refs: list[JobRef] = []
            for new, job_id, due in checked:
                slot = None if new.key is None else (new.name, new.tenant or "", new.key)
                if slot is not None and slot in held:
                    refs.append(JobRef(held[slot], duplicate=True))
                    continue
                if job_id in self._rows:  # the same id twice in one batch: ON CONFLICT DO NOTHING
                    refs.append(JobRef(job_id))
                    continue
                self._rows[job_id] = _Row(
                    id=job_id, name=new.name, queue=new.queue, tenant=new.tenant,
                    state="delayed" if due > now else "ready", priority=new.priority,
                    payload=new.payload, key=new.key, max_attempts=new.max_attempts,
                    dead_letter=new.dead_letter, run_at=due, created_at=now, updated_at=now,
                    flow_key=new.flow_key, traceparent=new.traceparent,
                )  # fmt: skip
                if slot is not None:
                    held[slot] = job_id
                refs.append(JobRef(job_id))
        self._notify()
        return refs

    # -- work: CLAIM, HEARTBEAT, the registry row, SETTLE_MANY, RECORD_PROGRESS ---------------------

    def open_wakeups(self, queues: Sequence[str], wake: asyncio.Event, beat: asyncio.Event) -> Subscription:
        """Wake-ups for a worker, on the running loop: every enqueue and publish sets ``wake``, an
        operator's cancel of a running job sets ``beat``. They do not say which queue or what is
        due, so the worker claims on every wake."""
        loop = asyncio.get_running_loop()

        def woken() -> None:
            loop.call_soon_threadsafe(wake.set)

        def cancelled() -> None:
            loop.call_soon_threadsafe(beat.set)

        return Subscription(self.subscribe(woken, on_cancel=cancelled))

    async def claim(
        self,
        *,
        worker_id: str,
        wants: Mapping[str, int],
        names: Sequence[str],
        visibility: float,
        sweep: bool = True,
        flow: FlowRules | None = None,
    ) -> ClaimResult:
        """CLAIM's two arms per queue: lapsed leases first (burying final attempts), then due jobs;
        under ``flow``, FLOW_CLAIM's (``memory_flow.py``)."""
        if not wants:
            raise refusals.claim_queues_empty()
        with self._lock:
            if flow is not None:
                return self._flow_claim(worker_id=worker_id, wants=wants, names=names, visibility=visibility, flow=flow)
            now = self._now()
            name_set = set(names)
            claimed: list[Claimed] = []
            buried: list[Buried] = []
            next_due: float | None = None
            for queue, slots in wants.items():
                mine = [r for r in self._rows.values() if r.queue == queue and r.name in name_set]
                if slots <= 0 or not mine:
                    continue
                lapsed = [r for r in mine if sweep and r.lapsed(now)]
                lapsed = sorted(lapsed, key=lambda r: (r.lease_expires_at or now, r.id))[:slots]
                due = [r for r in mine if r.state in ("ready", "delayed", "suspended") and r.run_at <= now]
                due = sorted(due, key=lambda r: (-r.priority, r.run_at, r.id))[:slots]
                retaken = [r for r in lapsed if r.attempt < r.max_attempts]
                buried += [r.bury(now) for r in lapsed if r.attempt >= r.max_attempts]
                lease = now + timedelta(seconds=visibility)
                claimed += [r.claim(worker_id, lease, now) for r in (retaken + due)[:slots]]
                later = [r.run_at for r in mine if r.state in ("delayed", "suspended") and r.run_at > now]
                later += [
                    r.lease_expires_at
                    for r in mine
                    if r.state == "running" and r.lease_expires_at is not None and r.lease_expires_at > now
                ]
                if later and sweep:
                    seconds = (min(later) - now).total_seconds()
                    next_due = seconds if next_due is None else min(next_due, seconds)
        claimed.sort(key=lambda c: (-c.priority, c.run_at, c.id))  # as PostgresDriver hands them out
        return ClaimResult(claimed, buried, next_due)

    async def heartbeat(self, worker_id: str, leases: Sequence[Lease], visibility: float) -> Beat:
        with self._lock:
            now = self._now()
            expires = now + timedelta(seconds=visibility)
            renewed: set[str] = set()
            for lease in leases:
                r = self._get(lease.job_id)
                if r is not None and r.holds(worker_id, lease.claims):
                    r.lease_expires_at = expires  # updated_at untouched, as in HEARTBEAT
                    renewed.add(r.id)
            info = self._workers.get(worker_id)
            if info is not None:
                self._workers[worker_id] = replace(info, last_seen_at=now, expires_at=expires)
            return Beat(held=renewed, registered=info is not None)

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        with self._lock:
            now = self._now()
            known = self._workers.get(info.id)
            started = known.started_at if known else now
            self._workers[info.id] = replace(
                info, started_at=started, last_seen_at=now, expires_at=now + timedelta(seconds=ttl)
            )

    async def deregister_worker(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    async def settle(self, settlements: Sequence[Settlement], *, release: bool = False) -> list[bool]:
        for s in settlements:
            if s.outcome not in _OUTCOMES:
                raise ConfigurationError(
                    cause=f"settle outcome {s.outcome!r} is not one of {sorted(_OUTCOMES)}",
                    fix="settle with outcome 'done', 'retry', 'interrupted', 'dead' or 'failed'",
                )
            _json_text(s.result, "a settled result")
            _json_text(s.error, "a settled error")
            _json_text(s.progress, "a settled progress report")
        with self._lock:
            now = self._now()
            landed: set[str] = set()
            handed = False
            for s in settlements:
                r = self._get(s.job_id)
                if r is None or not r.holds(s.worker_id, s.claims):
                    continue
                if s.outcome == "retry":
                    r.state = "delayed" if s.delay > 0 else "ready"
                else:
                    r.state = "ready" if s.outcome == "interrupted" else s.outcome
                if s.outcome == "done":
                    r.result = s.result
                if s.error is not None:  # only retry, dead and failed settles carry one
                    r.last_error = s.error
                    r.note_error(s.error, now)
                if s.progress is not None:
                    r.progress = s.progress  # the final unflushed report rides the settle
                if s.outcome == "interrupted":
                    at = _json_time(now)
                    r.handed_back = {"at": at, "worker": s.worker_id, "reason": s.reason, "attempt": r.attempt}
                    r.attempt = max(r.attempt - 1, 0)
                if s.outcome in ("retry", "interrupted"):
                    r.run_at = now + timedelta(seconds=s.delay)
                r.finished_at = now if s.outcome in _FINISHING else None
                r.worker_id, r.lease_expires_at, r.updated_at = None, None, now
                landed.add(r.id)
                handed = handed or s.outcome == "interrupted"
        if handed or (release and landed):
            self._notify()  # SETTLE_MANY's `wake`: a handed-back job is due now, for any worker
        if any(s.outcome in _FINISHING and s.job_id in landed for s in settlements):
            self._notify_settled()  # SETTLE_MANY's `told`: a run finished (app.wait)
        return [s.job_id in landed for s in settlements]

    async def record_progress(self, reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        for _, progress in reports:
            _json_text(progress, "a progress report")
        landed: list[bool] = []
        with self._lock:
            for fence, progress in reports:
                r = self._fenced(fence)
                if r is not None:
                    r.progress = progress
                landed.append(r is not None)
        return landed

    # -- reads: GET (with its steps), LIST_PAGE ---------------------------------------------------

    async def get_job(self, job_id: str) -> Job | None:
        with self._lock:
            now = self._now()
            r = self._get(job_id)
            if r is None:
                return None
            steps = sorted(self._steps.get(r.id, {}).values(), key=lambda s: (s.seq, s.started_at or now))
            return replace(r.job(now), steps=[s.shown() for s in steps])

    async def list_jobs(
        self, filters: ListFilter, *, limit: int, after: str | None = None, before: str | None = None
    ) -> Page:
        if filters.searches:
            raise refusals.postgres_only("searching payloads and errors")
        with self._lock:
            now = self._now()
            # A cursor is a position in id order: it need not name a job (the one it named may be
            # gone); what is no uuid at all is refused. Canonical ids sort as the uuids do.
            cursor, which = (before, "before") if before is not None else (after, "after")
            at = None if cursor is None else _canonical(cursor)
            if cursor is not None and at is None:
                raise refusals.bad_cursor(cursor, which=which)
            rows = [r for r in self._rows.values() if r.matches(filters, now)]
            if at is not None and before is not None:  # the nearest newer rows: ascending, then reversed
                rows = sorted((r for r in rows if r.id > at), key=lambda r: r.id)[: max(limit, 0)][::-1]
            else:  # newest first (ids are UUIDv7: id order is creation order), older than the cursor
                rows = [r for r in rows if at is None or r.id < at]
                rows = sorted(rows, key=lambda r: r.id, reverse=True)[: max(limit, 0)]
            jobs = [r.job(now) for r in rows]
        full = bool(jobs) and len(jobs) == limit
        if before is not None:
            return Page(jobs, next=jobs[-1].id if jobs else None, prev=jobs[0].id if full else None)
        return Page(jobs, next=jobs[-1].id if full else None, prev=jobs[0].id if after is not None and jobs else None)

    # -- the single operator verbs: CANCEL, REQUEUE, PROMOTE, REMOVE -------------------------------

    def _find(self, job_id: str) -> _Row:
        row = self._get(job_id)
        if row is None:
            raise refusals.not_found(job_id)
        return row

    async def cancel(self, job_id: str) -> Job:
        with self._lock:
            now = self._now()
            r = self._find(job_id)
            if r.state not in LIVE_STATES:
                raise refusals.not_cancellable(job_id, r.reported_state(now))
            was_running = r.state == "running"
            r.cancelled(now)
            job = r.job(now)
        if was_running:
            self._notify(cancelled=True)
        return job

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> Job:
        with self._lock:
            now = self._now()
            r = self._find(job_id)
            if r.state in LIVE_STATES:
                raise refusals.not_requeueable(job_id, r.reported_state(now))
            steps = self._steps.get(r.id, {})
            if from_step is not None and from_step not in steps:
                raise refusals.step_unknown(job_id, from_step, [s.name for s in sorted(steps.values(), key=_by_seq)])
            slot = r.slot()
            holder = next((o for o in self._rows.values() if o.state in LIVE_STATES and o.slot() == slot), None)
            if slot is not None and holder is not None:
                raise refusals.key_held(job_id, slot[2], holder.id)  # the live-key index refuses it
            r.requeued(now)
            if from_step is not None:  # REQUEUE_FROM_STEP: that step and every later one, by position
                cut = steps[from_step].seq
                for name in [s.name for s in steps.values() if s.seq >= cut]:
                    del steps[name]
        self._notify()
        return await self.get_job(job_id)  # type: ignore[return-value]

    async def promote(self, job_id: str) -> Job:
        with self._lock:
            now = self._now()
            r = self._find(job_id)
            if r.state not in ("ready", "delayed"):
                raise refusals.not_promotable(job_id, r.reported_state(now))
            # least(): promoting an overdue ready job must not move it behind its peers
            r.state, r.run_at, r.updated_at = "ready", min(r.run_at, now), now
            job = r.job(now)
        self._notify()
        return job

    async def remove(self, job_id: str) -> Job:
        with self._lock:
            now = self._now()
            r = self._find(job_id)
            if r.state == "running":
                raise refusals.not_removable(job_id)
            del self._rows[r.id]
            self._steps.pop(r.id, None)  # on delete cascade
            return r.job(now)

    # -- PostgreSQL's alone ------------------------------------------------------------------------

    list_workers = _refused("the worker registry's list")
    bulk = _refused("bulk verbs (requeue_many, remove_many, ...)")
    pause_queue = _refused("pausing a queue")
    resume_queue = _refused("resuming a queue")
    list_pauses = _refused("queue pauses")
    flow_usage = _refused("flow control's usage")
    snapshot = _refused("stats (state counts and counters)")
    rollup_counters = _refused("counters")
    counter_minutes = _refused("counters")
    purge = _refused("retention (purge)")
    purge_expired_events = _refused("retention (purging expired events)")
    leader_round = _refused("cron leadership (the scheduler role)")
    release_leader = _refused("cron leadership (the scheduler role)")
    read_schedule = _refused("cron leadership (the scheduler role)")
    open_handover = _refused_now("cron leadership (the scheduler role)")
    enqueue_staged = _refused("the transactional outbox")
    purge_received = _refused("the transactional outbox")
