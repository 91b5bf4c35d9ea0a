"""The memory driver's operate role (``MemoryOperate``): reads, the guarded verbs, bulk verbs,
pauses, the snapshot and the counter folds, mirroring the operator statements."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from workhorse.drivers import refusals
from workhorse.drivers.base import (
    FINISHED_STATES,
    KEY_SEPARATOR,
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
)
from workhorse.drivers.memory_core import MemoryCore, _by_seq, _canonical, _KeySlot, _Row, _trunc
from workhorse.drivers.searching import SEARCH_SCAN, contains, searched_page
from workhorse.errors import ConfigurationError

_SNAPSHOT_STATES = frozenset({"ready", "delayed", "running", "suspended", "dead", "failed"})


class MemoryOperate(MemoryCore):
    """The operate role: reads (a job with its steps, a keyset page, live workers), the guarded
    verbs, bulk verbs, pauses, the snapshot and the counter folds."""

    def _live_holder(self, slot: _KeySlot) -> _Row | None:
        return next((r for r in self._rows.values() if r.state in LIVE_STATES and r.slot() == slot), None)

    def _find(self, job_id: str) -> _Row:
        row = self._get(job_id)
        if row is None:
            raise refusals.not_found(job_id)
        return row

    # -- reads ----------------------------------------------------------------------------------

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
        with self._lock:
            now = self._now()
            # A cursor is a position in id order, not a row: it need not name a job (the one it named
            # may be gone); what is no uuid at all is refused, as PostgreSQL's driver does. Canonical
            # ids (lowercase, dashed) sort as the uuids do.
            cursor, which = (before, "before") if before is not None else (after, "after")
            at = None if cursor is None else _canonical(cursor)
            if cursor is not None and at is None:
                raise refusals.bad_cursor(cursor, which=which)
            if filters.searches:  # admin_sql.search_page: a bounded walk, then the hits among it
                rows = list(self._rows.values())
                return self._search(rows, filters, now, limit=limit, at=at, after=after, before=before)
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
        return Page(
            jobs,
            next=jobs[-1].id if full else None,
            prev=jobs[0].id if after is not None and jobs else None,
        )

    def _search(
        self,
        rows: list[_Row],
        filters: ListFilter,
        now: datetime,
        *,
        limit: int,
        at: str | None,
        after: str | None,
        before: str | None,
    ) -> Page:
        if filters.error is not None:  # jobs_errored_idx: the error search walks the failed jobs alone
            rows = [r for r in rows if r.last_error is not None]
        if before is not None:
            walked = sorted((r for r in rows if at is None or r.id > at), key=lambda r: r.id)[:SEARCH_SCAN]
        else:
            walked = sorted((r for r in rows if at is None or r.id < at), key=lambda r: r.id, reverse=True)
            walked = walked[:SEARCH_SCAN]
        wanted = (filters.error or "").lower()
        hits = []
        for r in walked:
            if not r.matches(filters, now):  # the list's filters, on the rows walked
                continue
            job = r.job(now)
            error = job.last_error or {}
            found = filters.payload is None or contains(job.payload, filters.payload)
            if found and filters.error is not None:
                found = any(wanted in str(error.get(k) or "").lower() for k in ("message", "type"))
            if found:
                hits.append(job)
        walked_to = walked[-1].id if walked else None
        return searched_page(
            hits[:limit], limit=limit, after=after, before=before, walked_to=walked_to, walked=len(walked)
        )

    async def list_workers(self) -> list[WorkerInfo]:
        with self._lock:
            now = self._now()
            live = [w for w in self._workers.values() if w.expires_at is not None and w.expires_at > now]
        return sorted(live, key=lambda w: (w.started_at or now, w.id))

    # -- operator verbs: CANCEL, REQUEUE, PROMOTE, REMOVE ---------------------------------------

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
            if (slot := r.slot()) is not None and (holder := self._live_holder(slot)) is not None:
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

    # -- bulk verbs, pauses, counters -----------------------------------------------------------

    def _movable(self, verb: BulkVerb, filters: BulkFilter, now: datetime) -> list[_Row]:
        """The rows ``verb`` may move, oldest first (by id: ids are UUIDv7)."""
        rows = sorted((r for r in self._rows.values() if r.in_bulk(filters, now)), key=lambda r: r.id)
        if verb == "requeue":
            rows = [r for r in rows if r.state in FINISHED_STATES]
            held = {slot for r in self._rows.values() if r.state in LIVE_STATES and (slot := r.slot()) is not None}
            oldest: list[_Row] = []
            for r in rows:  # a key held by a live job stays put; of one key's rows, the oldest moves
                slot = r.slot()
                if slot is None:
                    oldest.append(r)
                elif slot not in held:
                    held.add(slot)
                    oldest.append(r)
            return oldest
        if verb == "remove":
            return [r for r in rows if r.state != "running"]
        if verb == "promote":
            return [r for r in rows if r.state in ("ready", "delayed") and r.run_at > now]
        if verb == "cancel":
            return [r for r in rows if r.state in LIVE_STATES]
        raise ConfigurationError(
            cause=f"bulk verb {verb!r} is not one of cancel, promote, remove, requeue",
            fix="app.admin.requeue_many(state='dead')   # or remove_many, promote_many, cancel_many",
        )

    async def bulk(self, verb: BulkVerb, filters: BulkFilter, *, limit: int, dry_run: bool) -> BulkResult:
        with self._lock:
            now = self._now()
            movable = self._movable(verb, filters, now)
            moved = movable[: max(limit, 0)]
            stopped = verb == "cancel" and not dry_run and any(r.state == "running" for r in moved)
            if not dry_run:
                for r in moved:
                    if verb == "requeue":
                        r.requeued(now)  # steps stay: they replay
                    elif verb == "remove":
                        del self._rows[r.id]
                        self._steps.pop(r.id, None)  # on delete cascade
                    elif verb == "promote":
                        r.state, r.run_at, r.updated_at = "ready", now, now
                    else:
                        r.cancelled(now)
        if moved and not dry_run and verb in ("requeue", "promote"):
            self._notify()
        if stopped:
            self._notify(cancelled=True)
        return BulkResult(verb=verb, affected=len(moved), remaining=len(movable) - len(moved), dry_run=dry_run)

    async def pause_queue(self, queue: str, reason: str | None) -> QueuePause:
        with self._lock:
            now = self._now()
            known = self._pauses.get(queue)
            if known is None:
                paused = QueuePause(queue=queue, paused_at=now, reason=reason)
            else:  # the first paused_at stays; a new reason replaces the old one, none keeps it
                paused = replace(known, reason=reason if reason is not None else known.reason)
            self._pauses[queue] = paused
            return paused

    async def resume_queue(self, queue: str) -> bool:
        with self._lock:
            resumed = self._pauses.pop(queue, None) is not None
        if resumed:
            self._notify()
        return resumed

    async def list_pauses(self) -> list[QueuePause]:
        with self._lock:
            return [self._pauses[q] for q in sorted(self._pauses)]

    async def flow_usage(self, flow: FlowRules, names: Mapping[str, str]) -> FlowUsage:
        with self._lock:
            now = self._now()
            running: Counter[tuple[str, str]] = Counter()
            for r in self._rows.values():
                if r.state != "running" or r.lease_expires_at is None or r.lease_expires_at < now:
                    continue
                running["name", r.name] += 1
                if r.flow_key is not None:
                    running["key", r.name + KEY_SEPARATOR + r.flow_key] += 1
                if r.tenant is not None:
                    running["tenant", r.tenant] += 1
                running["queue", r.queue] += 1
                running["total", ""] += 1
            since = None if flow.rate_window is None else now - timedelta(seconds=flow.rate_window)
            starts = Counter(t for t, at, _ in self._flow_starts if since is not None and at > since)
            usage = FlowUsage(dict(running), dict(starts))
            full = flow.full(usage)
            zero_keys = {n for n, (cap, fail) in flow.keyed.items() if cap == 0 and not fail}
            held = Counter(
                r.queue
                for r in self._rows.values()
                if r.name in names
                and r.state in ("ready", "delayed", "suspended")
                and r.run_at <= now
                and (flow.holds(full, r.name, r.queue, r.tenant, r.flow_key) or r.name in zero_keys)
            )
            return FlowUsage(usage.running, usage.starts, dict(held))

    async def snapshot(self, since: float | None) -> Snapshot:
        with self._lock:
            now = self._now()
            states: dict[tuple[str, str, str], tuple[int, datetime]] = {}
            for r in self._rows.values():
                if r.state in _SNAPSHOT_STATES:
                    lapsed = r.lapsed(now)  # counted apart, with the earliest lapse (SNAPSHOT)
                    at = r.lease_expires_at if lapsed and r.lease_expires_at is not None else r.run_at
                    key = (r.queue, r.name, "lapsed" if lapsed else r.reported_state(now))
                    count, oldest = states.get(key, (0, at))
                    states[key] = (count + 1, min(oldest, at))
            start = None if since is None else now - timedelta(seconds=since)
            sums: dict[tuple[str, str], list[int]] = {}
            for (_tier, bucket, queue, name), values in self._counters.items():
                if start is None or bucket >= start:
                    total = sums.setdefault((queue, name), [0, 0, 0, 0, 0])
                    for i, value in enumerate(values):
                        total[i] += value
            pauses = [self._pauses[q] for q in sorted(self._pauses)]
            workers = sum(1 for w in self._workers.values() if w.expires_at is not None and w.expires_at > now)
        return Snapshot(
            now=now,
            states=[
                StateCount(queue=q, name=n, state=st, count=count, oldest_run_at=oldest)
                for (q, n, st), (count, oldest) in sorted(states.items())
            ],
            counters=[
                CounterSum(queue=q, name=n, completed=v[0], retried=v[1], failed=v[2], dead=v[3], lapsed=v[4])
                for (q, n), v in sorted(sums.items())
            ],
            paused=pauses,
            workers=workers,
        )

    def _fold(self, source: str, target: Literal["hour", "day"], before: datetime) -> int:
        """One rollup statement: delete ``source`` rows older than ``before``, add them into ``target``."""
        moved = [k for k in self._counters if k[0] == source and k[1] < before]
        for key in moved:
            values = self._counters.pop(key)
            _tier, bucket, queue, name = key
            total = self._counters.setdefault((target, _trunc(bucket, target), queue, name), [0, 0, 0, 0, 0])
            for i, value in enumerate(values):
                total[i] += value
        return len(moved)

    async def rollup_counters(self) -> int:
        with self._lock:
            now = self._now()
            folded = self._fold("minute", "hour", _trunc(now - timedelta(hours=2), "hour"))
        with self._lock:  # two statements, each with its own now()
            now = self._now()
            folded += self._fold("hour", "day", _trunc(now - timedelta(days=2), "day"))
        return folded

    async def counter_minutes(self, minutes: int) -> list[tuple[datetime, CounterSum]]:
        with self._lock:
            start = _trunc(self._now(), "minute") - timedelta(minutes=minutes - 1)
            sums: dict[tuple[datetime, str], list[int]] = {}
            for (tier, bucket, queue, _name), values in self._counters.items():
                if tier == "minute" and bucket >= start:
                    total = sums.setdefault((bucket, queue), [0, 0, 0, 0, 0])
                    for i, value in enumerate(values):
                        total[i] += value
        return [
            (bucket, CounterSum(queue, "", completed=v[0], retried=v[1], failed=v[2], dead=v[3], lapsed=v[4]))
            for (bucket, queue), v in sorted(sums.items())
        ]
