"""The memory driver's steps and events roles (``MemorySteps``): the statements of
``workhorse._db.queries.steps``, fenced writes, suspension in the step's own write, waits answered
by the earliest unexpired event at or after they began, publish waking matching suspended runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from workhorse.drivers.base import PublishedEvent, StepAnswer, StepFence, StepRecord
from workhorse.drivers.memory_core import MemoryCore, _by_seq, _canonical, _EventRow, _json_text, _load, _Row, _StepRow


class MemorySteps(MemoryCore):
    """The steps and events roles: recorded steps, sleeps and waits that suspend the job, events."""

    # -- durable steps and events: steps.LIST, PUT, SLEEP, WAIT, PUBLISH ---------------------------

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
