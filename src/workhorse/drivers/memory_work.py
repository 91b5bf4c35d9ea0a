"""The memory driver's work role (``MemoryWork``): CLAIM (both arms), HEARTBEAT, the registry
row, SETTLE_MANY and RECORD_PROGRESS, each fenced as in Postgres; and a worker's wake-ups.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from workhorse.drivers import refusals
from workhorse.drivers.base import (
    Beat,
    Buried,
    Claimed,
    ClaimResult,
    FlowRules,
    Lease,
    Settlement,
    StepFence,
    WorkerInfo,
)
from workhorse.drivers.memory_core import _json_text, _json_time
from workhorse.drivers.memory_flow import MemoryFlow
from workhorse.drivers.wakeups import Subscription
from workhorse.errors import ConfigurationError

_OUTCOMES = frozenset({"done", "retry", "interrupted", "dead", "failed"})
_FINISHING = frozenset({"done", "dead", "failed"})


class MemoryWork(MemoryFlow):
    """The work role: what a worker calls, and the optional wake-up role (``drivers/wakeups.py``)."""

    def open_wakeups(self, queues: Sequence[str], wake: asyncio.Event, beat: asyncio.Event) -> Subscription:
        """Wake-ups for a worker, on the running loop: every enqueue and publish sets ``wake``, an
        operator's cancel of a running job sets ``beat`` (what NOTIFY does for Postgres workers).
        They do not say which queue or what is due, so the worker claims on every wake."""
        loop = asyncio.get_running_loop()

        def woken() -> None:
            loop.call_soon_threadsafe(wake.set)

        def cancelled() -> None:
            loop.call_soon_threadsafe(beat.set)

        return Subscription(self.subscribe(woken, on_cancel=cancelled))

    # -- claim, heartbeat, settle ---------------------------------------------------------------

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
        if not wants:
            raise refusals.claim_queues_empty()
        if flow is not None:
            with self._lock:
                return self._flow_claim(worker_id=worker_id, wants=wants, names=names, visibility=visibility, flow=flow)
        with self._lock:
            now = self._now()
            name_set = set(names)
            claimed: list[Claimed] = []
            buried: list[Buried] = []
            next_due: float | None = None
            for queue, slots in wants.items():
                if queue in self._pauses:  # `wanted` drops a paused queue: nothing taken, no next_due
                    continue
                mine = [r for r in self._rows.values() if r.queue == queue and r.name in name_set]
                if slots <= 0 or not mine:
                    continue
                lapsed = [r for r in mine if sweep and r.state == "running" and (r.lease_expires_at or now) < now]
                lapsed = sorted(lapsed, key=lambda r: (r.lease_expires_at or now, r.id))[:slots]
                due = [r for r in mine if r.state in ("ready", "delayed", "suspended") and r.run_at <= now]
                due = sorted(due, key=lambda r: (-r.priority, r.run_at, r.id))[:slots]
                retaken = [r for r in lapsed if r.attempt < r.max_attempts]
                picked = (retaken + due)[:slots]
                for r in lapsed:
                    if r.attempt >= r.max_attempts:
                        buried.append(r.bury(now))
                        self._count(r, r.state, now)  # 'dead', or 'failed' without a dead-letter queue
                for r in retaken:
                    self._count(r, "lapsed", now)
                claimed += [r.claim(worker_id, now + timedelta(seconds=visibility), now) for r in picked]
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
            self._workers[info.id] = replace(
                info,
                started_at=known.started_at if known else now,
                last_seen_at=now,
                expires_at=now + timedelta(seconds=ttl),
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
                if s.outcome != "interrupted":  # `counted`: landed rows only; a hand-back counts nothing
                    self._count(r, s.outcome, now)
                landed.add(r.id)
                handed = handed or s.outcome == "interrupted"
        if handed or (release and landed):
            self._notify()  # SETTLE_MANY's `wake`: a handed-back job is due now, for any worker
        if any(s.outcome in _FINISHING and s.job_id in landed for s in settlements):
            self._notify_settled()  # SETTLE_MANY's `told`: a run finished (app.wait)
        # SETTLE_MANY answers ids; PostgresDriver maps each settlement to "its id came back".
        return [s.job_id in landed for s in settlements]

    # -- progress -------------------------------------------------------------------------------

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
