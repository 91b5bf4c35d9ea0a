"""The memory driver's shared internals (``MemoryCore``): its tables as rows, the one lock, the
clock, the subscribers, and the schema role. ``MemoryDriver`` (``memory.py``) and its steps and
events (``memory_steps.py``) build on it.

The injected clock is this driver's database clock (``now()`` in Postgres): it is read once per
call, so one call decides with one instant, as one statement does. Payloads, results and errors
are kept as JSON text and decoded on every read, so mutating a dict after enqueue changes nothing
stored, and a tuple comes back as a list. All state sits under one ``threading.Lock``: methods are
``async`` (refusals raise on await, as in Postgres) but do their work synchronously, never
holding the lock across an await.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from workhorse._db.migrate import available
from workhorse.drivers.base import (
    ERRORS_KEPT,
    Buried,
    Claimed,
    Job,
    ListFilter,
    StepFence,
    StepRecord,
    WorkerInfo,
    shown_step,
)
from workhorse.errors import ConfigurationError, PayloadError
from workhorse.ids import short_id

_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_KeySlot = tuple[str, str, str]
SHOWN_LIMIT = 1_000  # steps.LIST_SHOWN's trim
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
    flow_key: str | None = None  # the Concurrency(key=) key answered at enqueue
    traceparent: str | None = None  # stamped at enqueue (workhorse.tracing)
    handed_back: dict[str, Any] | None = None  # SETTLE_MANY's 'interrupted': {at, worker, reason, attempt}

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
            and (f.name_part is None or self.name == f.name_part or self.name.endswith("." + f.name_part))
            and (f.tenant is None or self.tenant == f.tenant)
            and (f.state is None or self.reported_state(now) == f.state)
            and (f.id_prefix is None or self.id.replace("-", "").startswith(f.id_prefix))
            and (f.short_id is None or short_id(self.id) == f.short_id)
            and (f.created_from is None or self.created_at >= f.created_from)
            and (f.created_to is None or self.created_at < f.created_to)
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
            errors=_load(self.errors) or [], flow_key=self.flow_key, traceparent=self.traceparent,
            lease_lapsed=self.lapsed(now),
            handed_back=None if self.handed_back is None else dict(self.handed_back),
        )  # fmt: skip

    def lapsed(self, now: datetime) -> bool:
        """``JOB_COLUMNS``' lease_lapsed: running, and its lease passed."""
        return self.state == "running" and self.lease_expires_at is not None and self.lease_expires_at < now

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
            priority=self.priority, created_at=self.created_at, run_at=self.run_at, traceparent=self.traceparent,
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


class MemoryCore:
    """What every role of ``MemoryDriver`` builds on: the rows, the lock they sit under, the clock,
    the subscribers. Every attribute of the driver is set here."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock if clock is not None else _system_clock
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._steps: dict[str, dict[str, _StepRow]] = {}
        self._events: list[_EventRow] = []
        self._flow_starts: list[tuple[str, datetime]] = []  # FLOW_CLAIM's flow_starts: tenant, when
        self._event_ids = itertools.count(1)
        self._subscribers: list[Callable[[], None]] = []
        self._cancel_subscribers: list[Callable[[], None]] = []
        self._settled_subscribers: list[Callable[[], None]] = []  # app.wait (workhorse.results)
        self._migrated = False

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

    def subscribe_settled(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) when a settle finished a run (done, dead, failed):
        SETTLE_MANY's NOTIFY on the settled channel. Answers the unsubscribe function."""
        with self._lock:
            self._settled_subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._settled_subscribers:
                    self._settled_subscribers.remove(callback)

        return unsubscribe

    def _notify_settled(self) -> None:
        with self._lock:
            callbacks = list(self._settled_subscribers)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a waiter whose loop closed: it re-reads on its poll anyway
                log.debug("a memory-driver settle subscriber failed", exc_info=True)

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

    def _get(self, job_id: str) -> _Row | None:
        canonical = _canonical(job_id)
        return None if canonical is None else self._rows.get(canonical)

    def _fenced(self, fence: StepFence) -> _Row | None:
        r = self._get(fence.job_id)
        return r if r is not None and r.holds(fence.worker_id, fence.claims) else None

    # -- schema ---------------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        with self._lock:
            applied, self._migrated = ([] if self._migrated else [m.version for m in available()]), True
            return applied

    async def check_schema(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _by_seq(step: _StepRow) -> tuple[int, datetime]:
    return (step.seq, step.started_at or datetime.min.replace(tzinfo=UTC))
