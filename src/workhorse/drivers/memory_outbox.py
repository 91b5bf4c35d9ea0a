"""The memory driver's outbox role (``MemoryOutbox``): ENQUEUE_STAGED under the driver's lock."""

from __future__ import annotations

from collections.abc import Sequence

from workhorse.drivers.base import NewJob
from workhorse.drivers.memory_core import _canonical
from workhorse.drivers.memory_enqueue import MemoryEnqueue


class MemoryOutbox(MemoryEnqueue):
    """``enqueue_staged`` as ``PostgresOutbox`` answers it: a job whose id exists is ``present``,
    one whose key a live job holds is a ``duplicate``, every other is inserted (``enqueued``)."""

    async def enqueue_staged(self, jobs: Sequence[NewJob]) -> list[str]:
        with self._lock:
            present = {job.id for job in jobs if _canonical(job.id) in self._rows}
        fresh = [job for job in jobs if job.id not in present]
        refs = self.enqueue_many_sync(fresh)  # the live-key check and the wake, as enqueue does
        duplicate = {job.id for job, ref in zip(fresh, refs, strict=True) if ref.duplicate}
        return ["present" if j.id in present else "duplicate" if j.id in duplicate else "enqueued" for j in jobs]
