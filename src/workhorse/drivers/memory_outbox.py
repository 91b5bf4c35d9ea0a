"""The memory driver's outbox role (``MemoryOutbox``): ENQUEUE_STAGED and PURGE_RECEIVED under the
driver's lock, the tombstones (``_received``, staged id to when it was received) as the queue's
``outbox_received`` keeps them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from workhorse.drivers.base import NewJob
from workhorse.drivers.memory_core import _canonical
from workhorse.drivers.memory_enqueue import MemoryEnqueue


class MemoryOutbox(MemoryEnqueue):
    """``enqueue_staged`` as ``PostgresOutbox`` answers it: a job whose id was received before is
    ``present`` (even when that job is gone since), one whose key a live job holds is a ``duplicate``,
    every other is inserted (``enqueued``). ``purge_received`` drops the old tombstones."""

    async def enqueue_staged(self, jobs: Sequence[NewJob]) -> list[str]:
        with self._lock:
            now = self._now()
            present: set[str] = set()
            received: list[str] = []
            for job in jobs:
                canonical = _canonical(job.id) or job.id
                if canonical in self._received:
                    present.add(job.id)
                else:
                    self._received[canonical] = now
                    received.append(canonical)
                    if canonical in self._rows:  # moved before the tombstones were kept
                        present.add(job.id)
        fresh = [job for job in jobs if job.id not in present]
        try:
            refs = self.enqueue_many_sync(fresh)  # the live-key check and the wake, as enqueue does
        except BaseException:
            with self._lock:  # one statement in Postgres: a refused batch leaves no tombstone either
                for canonical in received:
                    self._received.pop(canonical, None)
            raise
        duplicate = {job.id for job, ref in zip(fresh, refs, strict=True) if ref.duplicate}
        return ["present" if j.id in present else "duplicate" if j.id in duplicate else "enqueued" for j in jobs]

    async def purge_received(self, age: float, batch: int) -> int:
        """Up to ``batch`` tombstones received more than ``age`` seconds ago removed, oldest first."""
        with self._lock:
            cutoff = self._now() - timedelta(seconds=age)
            old = sorted((at, key) for key, at in self._received.items() if at < cutoff)[:batch]
            for _, key in old:
                del self._received[key]
        return len(old)
