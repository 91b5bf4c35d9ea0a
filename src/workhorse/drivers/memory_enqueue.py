"""The memory driver's enqueue role (``MemoryEnqueue``): INSERT_MANY and LIVE_BY_KEYS in one
call, the whole batch refused or none of it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from workhorse.drivers.base import LIVE_STATES, JobRef, NewJob
from workhorse.drivers.memory_core import MemoryCore, _canonical, _json_text, _KeySlot, _Row
from workhorse.errors import ConfigurationError


class MemoryEnqueue(MemoryCore):
    """The enqueue role, as ``PostgresDriver`` answers it: a live key answers its holder's ref;
    every enqueue calls the subscribers (the NOTIFY)."""

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
                    flow_key=new.flow_key, traceparent=new.traceparent,
                )  # fmt: skip
                if slot is not None:
                    held[slot] = job_id
                refs.append(JobRef(job_id))
        self._notify()
        return refs
