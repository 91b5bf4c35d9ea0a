"""The in-process driver, for users' unit tests: no server, no schema, one lock, an injectable clock.

Every method mirrors one statement of ``workhorse._db.queries.jobs`` (and how ``PostgresDriver``
reads its answer), so the parity suite can run each scenario on both drivers: the same claim order
and the same two claim arms (burying lapsed final attempts), a due ``delayed`` row reported
``ready``, settle and heartbeat fenced on ``state = 'running'``, ``worker_id`` and ``claims``, the
idempotency key held by LIVE rows of ``(name, tenant or '', key)``, newest-first keyset pages,
operator verbs guarded by the same states and refused with the same ``refusals``, and the step
and event statements of ``workhorse._db.queries.steps`` (fenced writes, suspension in the step's
own write, waits answered by the earliest unexpired event at or after they began, publish waking
matching suspended runs). The operator surface mirrors the same statements: bulk verbs over the
movable rows oldest first, paused queues dropped from every claim, the ``counters`` moved by the
settle and the sweeping claim (minute buckets of this driver's clock, folded by
``rollup_counters``), the errors history and progress. Where Postgres NOTIFYs (enqueue, requeue,
promote, resume, a publish that woke runs), this driver calls its subscribers (``subscribe``):
that is how an in-process worker is woken.

The injected clock is this driver's database clock (``now()`` in Postgres): it is read once per
call, so one call decides with one instant, as one statement does. Payloads, results and errors
are kept as JSON text and decoded on every read, so mutating a dict after enqueue changes nothing
stored, and a tuple comes back as a list. All state sits under one ``threading.Lock``: methods are
``async`` (refusals raise on await, as in Postgres) but do their work synchronously, never
holding the lock across an await.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from workhorse._db.migrate import available
from workhorse.drivers import refusals
from workhorse.drivers.base import (
    ERRORS_KEPT,
    FINISHED_STATES,
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
from workhorse.drivers.wakeups import Subscription
from workhorse.errors import ConfigurationError, PayloadError

_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_OUTCOMES = frozenset({"done", "retry", "interrupted", "dead", "failed"})
_FINISHING = frozenset({"done", "dead", "failed"})
_KeySlot = tuple[str, str, str]
# ``counters``: (tier, bucket, queue, name) -> [completed, retried, failed, dead, lapsed]
_CounterKey = tuple[str, datetime, str, str]
_COUNTED = {"done": 0, "retry": 1, "failed": 2, "dead": 3, "lapsed": 4}  # outcome -> column
_SNAPSHOT_STATES = frozenset({"ready", "delayed", "running", "suspended", "dead", "failed"})
SHOWN_LIMIT = 1_000  # steps.LIST_SHOWN's trim
PURGE_BATCH = 1_000
log = logging.getLogger("workhorse.memory")


def _system_clock() -> datetime:
    return datetime.now(UTC)  # clock-ok: the memory driver's database clock, injectable for tests


def _canonical(job_id: str) -> str | None:
    """The id as ``uuid::text`` spells it, or None when Postgres would not take it as a uuid."""
    return str(uuid.UUID(job_id)) if isinstance(job_id, str) and _UUID.fullmatch(job_id) else None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _json_text(text: str | None, what: str) -> str | None:
    """Refuse, as a ``::jsonb`` cast would, text that is not JSON; answers the text unchanged."""
    if text is not None:
        try:
            json.loads(text, parse_constant=_reject_constant)
        except (TypeError, ValueError) as error:
            raise PayloadError(
                cause=f"{what} is not valid JSON text ({error}): {text[:60]!r}",
                fix="encode it with workhorse.payload before handing it to the driver",
            ) from None
    return text


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _trunc(at: datetime, unit: Literal["minute", "hour", "day"]) -> datetime:
    """``date_trunc(unit, at)`` in UTC (the Postgres driver's sessions run with TimeZone=UTC)."""
    at = at.astimezone(UTC).replace(second=0, microsecond=0)
    if unit in ("hour", "day"):
        at = at.replace(minute=0)
    if unit == "day":
        at = at.replace(hour=0)
    return at


def _json_time(at: datetime) -> str:
    """A timestamptz as jsonb spells it in a UTC session: ISO 8601, fraction trimmed of zeros."""
    text = at.astimezone(UTC).isoformat()
    if "." in text:
        whole, rest = text.split(".", 1)
        digits, zone = rest[:6].rstrip("0"), rest[6:]
        text = f"{whole}.{digits}{zone}" if digits else f"{whole}{zone}"
    return text


def _error_entry(attempt: int, error: str, now: datetime) -> dict[str, Any]:
    """One ``jobs.errors`` entry, as ``jobs.errors_appended`` builds it: ``error -> 'type'`` and
    ``error -> 'message'`` (JSON values as given, null when absent), ``at`` the statement's now()."""
    decoded = json.loads(error)
    fields = decoded if isinstance(decoded, dict) else {}
    return {"attempt": attempt, "type": fields.get("type"), "message": fields.get("message"), "at": _json_time(now)}


@dataclass(slots=True)
class _Row:
    """One row of ``jobs``; JSON columns held as text."""

    id: str
    name: str
    queue: str
    tenant: str | None
    state: str
    priority: int
    payload: str
    key: str | None
    max_attempts: int
    dead_letter: bool
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    result: str | None = None
    last_error: str | None = None
    progress: str | None = None
    errors: str | None = None  # the last ERRORS_KEPT attempts' errors, oldest first
    attempt: int = 0
    claims: int = 0
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def slot(self) -> _KeySlot | None:
        """This row's place in ``jobs_live_key_idx`` (the key counts only while the row is live)."""
        return None if self.key is None else (self.name, self.tenant or "", self.key)

    def reported_state(self, now: datetime) -> str:
        """``JOB_COLUMNS``: a due 'delayed' or 'suspended' row reads 'ready'."""
        return "ready" if self.state in ("delayed", "suspended") and self.run_at <= now else self.state

    def holds(self, worker_id: str, claims: int) -> bool:
        """The fence every claim holder's write names: still running, same worker, same claim."""
        return self.state == "running" and self.worker_id == worker_id and self.claims == claims

    def matches(self, f: ListFilter, now: datetime) -> bool:
        """LIST_PAGE's filters: each optional, ``state`` compared as reported."""
        return (
            (f.queue is None or self.queue == f.queue) and (f.name is None or self.name == f.name)
            and (f.tenant is None or self.tenant == f.tenant)
            and (f.state is None or self.reported_state(now) == f.state)
            and (f.id_prefix is None or self.id.replace("-", "").startswith(f.id_prefix))
            and (f.created_from is None or self.created_at >= f.created_from)
            and (f.created_to is None or self.created_at < f.created_to)
        )  # fmt: skip

    def in_bulk(self, f: BulkFilter, now: datetime) -> bool:
        """The bulk verbs' "matching": one REPORTED state, queue/name/tenant when given."""
        return (
            self.reported_state(now) == f.state
            and (f.queue is None or self.queue == f.queue) and (f.name is None or self.name == f.name)
            and (f.tenant is None or self.tenant == f.tenant)
        )  # fmt: skip

    def note_error(self, error: str, now: datetime) -> None:
        """Append an attempt's error to ``errors``, keeping the last ERRORS_KEPT."""
        kept: list[dict[str, Any]] = _load(self.errors) or []
        kept.append(_error_entry(self.attempt, error, now))
        self.errors = json.dumps(kept[-ERRORS_KEPT:])

    def job(self, now: datetime) -> Job:
        return Job(
            id=self.id, name=self.name, queue=self.queue, tenant=self.tenant,
            state=self.reported_state(now), priority=self.priority, payload=_load(self.payload),
            result=_load(self.result), last_error=_load(self.last_error), progress=_load(self.progress),
            key=self.key, attempt=self.attempt, max_attempts=self.max_attempts,
            dead_letter=self.dead_letter, claims=self.claims, worker_id=self.worker_id,
            lease_expires_at=self.lease_expires_at, run_at=self.run_at, created_at=self.created_at,
            started_at=self.started_at, finished_at=self.finished_at, updated_at=self.updated_at,
            errors=_load(self.errors) or [],
        )  # fmt: skip

    def bury(self, now: datetime) -> Buried:
        """CLAIM's ``buried`` arm: a lease that lapsed on the final attempt ends the job."""
        self.state = "dead" if self.dead_letter else "failed"
        message = (
            f"the lease lapsed on the final attempt ({self.attempt} of {self.max_attempts}): "
            "every worker that took this job stopped heartbeating, most likely it died"
        )
        self.last_error = json.dumps({"type": "LeaseLapsed", "message": message, "traceback": None})
        self.note_error(self.last_error, now)
        self.worker_id, self.lease_expires_at, self.finished_at, self.updated_at = None, None, now, now
        return Buried(
            id=self.id, name=self.name, queue=self.queue, tenant=self.tenant, state=self.state,
            payload=_load(self.payload), attempt=self.attempt, max_attempts=self.max_attempts,
            last_error=_load(self.last_error),
        )  # fmt: skip

    def requeued(self, now: datetime) -> None:
        """REQUEUE's effect: a fresh run (attempts reset, progress cleared; errors and steps kept)."""
        self.state, self.attempt, self.run_at, self.result, self.finished_at = "ready", 0, now, None, None
        self.worker_id, self.lease_expires_at, self.progress, self.updated_at = None, None, None, now

    def cancelled(self, now: datetime) -> None:
        """CANCEL's effect: a running row's worker loses its claim (it cancels at its next beat)."""
        self.state, self.worker_id, self.lease_expires_at = "cancelled", None, None
        self.finished_at, self.updated_at = now, now

    def claim(self, worker_id: str, lease_expires_at: datetime, now: datetime) -> Claimed:
        """CLAIM's ``claimed`` arm: spend an attempt, move the fence, take the lease."""
        self.state, self.worker_id, self.attempt, self.claims = (
            "running",
            worker_id,
            self.attempt + 1,
            self.claims + 1,
        )
        self.lease_expires_at, self.started_at, self.updated_at = lease_expires_at, now, now
        return Claimed(
            id=self.id, name=self.name, queue=self.queue, tenant=self.tenant, payload=_load(self.payload),
            attempt=self.attempt, max_attempts=self.max_attempts, claims=self.claims,
            priority=self.priority, created_at=self.created_at, run_at=self.run_at,
        )  # fmt: skip


@dataclass(slots=True)
class _StepRow:
    """One row of ``steps``; JSON columns held as text."""

    name: str
    seq: int
    state: str
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None = None
    result: str | None = None
    error: str | None = None
    wake_at: datetime | None = None
    event: str | None = None
    key: str | None = None

    def record(self) -> StepRecord:
        return StepRecord(
            name=self.name, seq=self.seq, state=self.state, result=_load(self.result), error=_load(self.error),
            attempt=self.attempt, started_at=self.started_at, finished_at=self.finished_at,
            wake_at=self.wake_at, event=self.event, key=self.key,
        )  # fmt: skip

    def shown(self) -> dict[str, Any]:
        """``LIST_SHOWN``: a result over the limit trimmed, the error's type and message only."""
        trimmed = self.result is not None and len(self.result) > SHOWN_LIMIT
        error = _load(self.error) or {}
        return shown_step(
            name=self.name, seq=self.seq, state=self.state, attempt=self.attempt, started_at=self.started_at,
            finished_at=self.finished_at, wake_at=self.wake_at, event=self.event, key=self.key,
            result=None if trimmed else _load(self.result),
            preview=self.result[:SHOWN_LIMIT] if trimmed and self.result is not None else None,
            error_type=error.get("type"),
            error_message=None if error.get("message") is None else str(error["message"])[:SHOWN_LIMIT],
        )  # fmt: skip


@dataclass(slots=True)
class _EventRow:
    id: int
    name: str
    key: str | None
    payload: str
    published_at: datetime
    expires_at: datetime


class MemoryDriver:
    """The ``Driver`` in one process. ``clock`` is its database clock (default: UTC wall time)."""

    kind: str = "memory"

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock if clock is not None else _system_clock
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._steps: dict[str, dict[str, _StepRow]] = {}
        self._events: list[_EventRow] = []
        self._event_ids = itertools.count(1)
        self._subscribers: list[Callable[[], None]] = []
        self._cancel_subscribers: list[Callable[[], None]] = []
        self._pauses: dict[str, QueuePause] = {}
        self._counters: dict[_CounterKey, list[int]] = {}
        self._migrated = False

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

    def subscribe(
        self, callback: Callable[[], None], *, on_cancel: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Call ``callback`` (from any thread) when work may have become due: an enqueue, or a publish
        that woke runs — what NOTIFY does for Postgres workers; and ``on_cancel`` when an operator
        cancelled a running job (the ``beat:<queue>`` NOTIFY: its worker should renew now and find
        it gone). Answers the unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)
            if on_cancel is not None:
                self._cancel_subscribers.append(on_cancel)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
                if on_cancel in self._cancel_subscribers:
                    self._cancel_subscribers.remove(on_cancel)

        return unsubscribe

    def _notify(self, *, cancelled: bool = False) -> None:
        """Call the subscribers (``cancelled``: the cancel subscribers), outside the lock; one that
        fails never fails the statement."""
        with self._lock:
            callbacks = list(self._cancel_subscribers if cancelled else self._subscribers)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a subscriber whose loop closed: the poll still finds the work
                log.debug("a memory-driver subscriber failed", exc_info=True)

    def _now(self) -> datetime:
        now = self._clock()
        if now.utcoffset() is None:
            raise ConfigurationError(
                cause=f"the MemoryDriver clock answered a naive datetime ({now!r}); it must be aware",
                fix="MemoryDriver(clock=lambda: datetime.now(UTC))",  # clock-ok: text of a fix
            )
        return now.astimezone(UTC)

    def _count(self, row: _Row, column: str, now: datetime) -> None:
        """The counters upsert: +1 in this minute's bucket of the row's (queue, name)."""
        key = ("minute", _trunc(now, "minute"), row.queue, row.name)
        self._counters.setdefault(key, [0, 0, 0, 0, 0])[_COUNTED[column]] += 1

    def _live_holder(self, slot: _KeySlot) -> _Row | None:
        return next((r for r in self._rows.values() if r.state in LIVE_STATES and r.slot() == slot), None)

    def _get(self, job_id: str) -> _Row | None:
        canonical = _canonical(job_id)
        return None if canonical is None else self._rows.get(canonical)

    def _find(self, job_id: str) -> _Row:
        row = self._get(job_id)
        if row is None:
            raise refusals.not_found(job_id)
        return row

    # -- schema ---------------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        with self._lock:
            applied, self._migrated = ([] if self._migrated else [m.version for m in available()]), True
            return applied

    async def check_schema(self) -> None:
        return None

    # -- enqueue: INSERT_MANY + LIVE_BY_KEYS ----------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        return self.enqueue_many_sync(jobs, conn=conn)

    async def enqueue_ready(self, count: int, rows: Iterator[NewJob], *, conn: Any = None) -> list[JobRef]:
        return self.enqueue_many_sync(list(rows), conn=conn)

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        """What ``JobHandle.enqueue_sync`` calls, as on ``PostgresDriver``."""
        if conn is not None:
            raise ConfigurationError(
                code="CONN_UNSUPPORTED",
                cause="the memory driver has no database transactions, so an enqueue cannot join conn=",
                fix="drop conn= when running on MemoryDriver (a transactional enqueue needs PostgresDriver)",
            )
        with self._lock:
            now = self._now()
            checked: list[tuple[NewJob, str, datetime]] = []  # the whole batch is refused, or none of it
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
                )  # fmt: skip
                if slot is not None:
                    held[slot] = job_id
                refs.append(JobRef(job_id))
        self._notify()
        return refs

    # -- claim, heartbeat, settle ---------------------------------------------------------------

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
            for stale in [
                w for w in self._workers.values() if w.expires_at and w.expires_at < now - timedelta(hours=1)
            ]:
                del self._workers[stale.id]
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

    async def list_workers(self) -> list[WorkerInfo]:
        with self._lock:
            now = self._now()
            live = [w for w in self._workers.values() if w.expires_at is not None and w.expires_at > now]
        return sorted(live, key=lambda w: (w.started_at or now, w.id))

    async def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
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
                    r.attempt = max(r.attempt - 1, 0)
                if s.outcome in ("retry", "interrupted"):
                    r.run_at = now + timedelta(seconds=s.delay)
                r.finished_at = now if s.outcome in _FINISHING else None
                r.worker_id, r.lease_expires_at, r.updated_at = None, None, now
                if s.outcome != "interrupted":  # `counted`: landed rows only; a hand-back counts nothing
                    self._count(r, s.outcome, now)
                landed.add(r.id)
                handed = handed or s.outcome == "interrupted"
        if handed:
            self._notify()  # SETTLE_MANY's `wake`: a handed-back job is due now, for any worker
        # SETTLE_MANY answers ids; PostgresDriver maps each settlement to "its id came back".
        return [s.job_id in landed for s in settlements]

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
            cursor, which = (before, "before") if before is not None else (after, "after")
            row = None if cursor is None else self._get(cursor)
            if cursor is not None and row is None:
                raise refusals.bad_cursor(cursor, which=which)
            rows = [r for r in self._rows.values() if r.matches(filters, now)]
            if row is not None and before is not None:  # the nearest newer rows: ascending, then reversed
                rows = sorted((r for r in rows if r.id > row.id), key=lambda r: r.id)[: max(limit, 0)][::-1]
            else:  # newest first (ids are UUIDv7: id order is creation order), older than the cursor
                rows = [r for r in rows if row is None or r.id < row.id]
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

    async def close(self) -> None:
        return None

    # -- bulk verbs, pauses, counters, progress --------------------------------------------------

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

    async def snapshot(self, since: float | None) -> Snapshot:
        with self._lock:
            now = self._now()
            states: dict[tuple[str, str, str], tuple[int, datetime]] = {}
            for r in self._rows.values():
                if r.state in _SNAPSHOT_STATES:
                    key = (r.queue, r.name, r.reported_state(now))
                    count, oldest = states.get(key, (0, r.run_at))
                    states[key] = (count + 1, min(oldest, r.run_at))
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

    # -- durable steps and events: steps.LIST, PUT, SLEEP, WAIT, PUBLISH, PURGE_EXPIRED ------------

    def _fenced(self, fence: StepFence) -> _Row | None:
        r = self._get(fence.job_id)
        return r if r is not None and r.holds(fence.worker_id, fence.claims) else None

    async def list_steps(self, job_id: str) -> list[StepRecord]:
        with self._lock:
            canonical = _canonical(job_id)
            rows = [] if canonical is None else list(self._steps.get(canonical, {}).values())
            return [s.record() for s in sorted(rows, key=_by_seq)]

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
        _json_text(result, "a step result")
        _json_text(error, "a step error")
        with self._lock:
            now = self._now()
            r = self._fenced(fence)
            if r is None:
                return False
            steps = self._steps.setdefault(r.id, {})
            prior = steps.get(name)
            if prior is not None and prior.state != "failed":  # a done step is never overwritten
                return False
            steps[name] = _StepRow(
                name=name, seq=seq, state=state, attempt=r.attempt, started_at=now - timedelta(seconds=elapsed),
                finished_at=now, result=result, error=error,
            )  # fmt: skip
            return True

    def _suspend(self, r: _Row, until: datetime, now: datetime) -> None:
        """SLEEP/WAIT's ``suspended`` arm: the row leaves the worker, its attempt handed back."""
        r.state, r.run_at, r.attempt = "suspended", until, max(r.attempt - 1, 0)
        r.worker_id, r.lease_expires_at, r.updated_at = None, None, now

    async def sleep_step(
        self, fence: StepFence, *, name: str, seq: int, delay: float | None, until: datetime | None
    ) -> StepAnswer | None:
        with self._lock:
            now = self._now()
            r = self._fenced(fence)
            if r is None:
                return None
            steps = self._steps.setdefault(r.id, {})
            prior = steps.get(name)
            if prior is not None and prior.state != "sleeping":
                return None
            if prior is not None and prior.wake_at is not None:
                wake_at = prior.wake_at  # a recorded sleep keeps its first wake time
            elif until is not None:
                wake_at = until.astimezone(UTC)
            else:
                wake_at = now + timedelta(seconds=delay or 0.0)
            over = wake_at <= now
            steps[name] = _StepRow(
                name=name, seq=prior.seq if prior is not None else seq, state="done" if over else "sleeping",
                attempt=r.attempt, started_at=prior.started_at if prior is not None else now,
                finished_at=now if over else None, wake_at=wake_at,
            )  # fmt: skip
            if not over:
                self._suspend(r, wake_at, now)
            return StepAnswer(state=steps[name].state, wake_at=wake_at)

    def _earliest(self, event: str, key: str | None, since: datetime, now: datetime) -> _EventRow | None:
        """WAIT's ``found``: the earliest unexpired event of (name, key) published at or after ``since``."""
        matching = [
            e for e in self._events
            if e.name == event and e.key == key and e.published_at >= since and e.expires_at > now
        ]  # fmt: skip
        return min(matching, key=lambda e: (e.published_at, e.id), default=None)

    async def wait_step(
        self, fence: StepFence, *, name: str, seq: int, event: str, key: str | None, within: float
    ) -> StepAnswer | None:
        with self._lock:
            now = self._now()
            r = self._fenced(fence)
            if r is None:
                return None
            steps = self._steps.setdefault(r.id, {})
            prior = steps.get(name)
            if prior is not None and prior.state != "waiting":
                return None
            since = prior.started_at if prior is not None and prior.started_at is not None else now
            deadline = now + timedelta(seconds=within)
            if prior is not None and prior.wake_at is not None:
                deadline = prior.wake_at  # a recorded wait keeps its first deadline
            found = self._earliest(event, key, since, now)
            over = found is not None or deadline <= now
            steps[name] = _StepRow(
                name=name, seq=prior.seq if prior is not None else seq, state="done" if over else "waiting",
                attempt=r.attempt, started_at=since, finished_at=now if over else None,
                result=found.payload if found is not None else None, wake_at=deadline, event=event, key=key,
            )  # fmt: skip
            if not over:
                self._suspend(r, deadline, now)
            return StepAnswer(
                state=steps[name].state,
                result=_load(steps[name].result),
                wake_at=deadline,
                matched=found is not None,
            )

    async def publish_event(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        return self.publish_event_sync(name, key, payload, ttl)

    def publish_event_sync(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        _json_text(payload, "an event payload")
        with self._lock:
            now = self._now()
            row = _EventRow(
                id=next(self._event_ids), name=name, key=key, payload=payload, published_at=now,
                expires_at=now + timedelta(seconds=ttl),
            )  # fmt: skip
            self._events.append(row)
            woken = 0
            for job_id, steps in self._steps.items():
                r = self._rows.get(job_id)
                if r is None or r.state != "suspended":
                    continue
                if any(
                    s.state == "waiting" and s.event == name and s.key == key
                    and s.started_at is not None and s.started_at <= now
                    for s in steps.values()
                ):  # fmt: skip
                    r.state, r.run_at, r.updated_at = "ready", now, now
                    woken += 1
        if woken:
            self._notify()
        return PublishedEvent(
            id=str(row.id), name=name, key=key, published_at=row.published_at, expires_at=row.expires_at, woken=woken
        )

    async def purge_expired_events(self) -> int:
        with self._lock:
            now = self._now()
            kept = [e for e in self._events if e.expires_at > now]
            removed = len(self._events) - len(kept)
            self._events = kept
            return removed


def _by_seq(step: _StepRow) -> tuple[int, datetime]:
    return (step.seq, step.started_at or datetime.min.replace(tzinfo=UTC))
