"""The memory driver's retention role (``MemoryRetention``): ``_db/queries/retention.py`` under
the driver's lock, target by target, with the same ages and the same answer. It has no webhooks:
``webhook_deliveries`` removes (and counts) 0."""

from __future__ import annotations

from datetime import timedelta

from workhorse.drivers.base import Purged, PurgePolicy
from workhorse.drivers.memory_core import MemoryCore

_JOB_TARGETS = ("done", "cancelled", "failed", "dead")


class MemoryRetention(MemoryCore):
    async def purge(self, policy: PurgePolicy, *, dry_run: bool = False) -> Purged:
        removed: dict[str, int] = {}
        steps = 0
        with self._lock:
            now = self._now()
            for target, age in policy.ages.items():
                before = now - timedelta(seconds=age)
                if target in _JOB_TARGETS:
                    doomed = [
                        r.id
                        for r in self._rows.values()
                        if r.state == target and r.finished_at is not None and r.finished_at < before
                    ]
                    steps += sum(len(self._steps.get(job_id, {})) for job_id in doomed)
                    if not dry_run:
                        for job_id in doomed:
                            del self._rows[job_id]
                            self._steps.pop(job_id, None)  # the foreign key's cascade
                    removed[target] = len(doomed)
                elif target == "events":
                    kept = [e for e in self._events if e.expires_at > before]
                    removed[target] = len(self._events) - len(kept)
                    if not dry_run:
                        self._events = kept
                elif target == "workers":
                    gone = [w for w, info in self._workers.items() if info.expires_at and info.expires_at < before]
                    removed[target] = len(gone)
                    if not dry_run:
                        for w in gone:
                            del self._workers[w]
                elif target == "flow_starts":
                    kept_starts = [s for s in self._flow_starts if s[1] >= before]
                    removed[target] = len(self._flow_starts) - len(kept_starts)
                    if not dry_run:
                        self._flow_starts = kept_starts
                elif target == "counters":
                    old = [k for k in self._counters if k[0] == "day" and k[1] < before]
                    removed[target] = len(old)
                    if not dry_run:
                        for k in old:
                            del self._counters[k]
                elif target == "webhook_deliveries":
                    removed[target] = 0  # no webhooks on this driver: no ledger
        return Purged(removed, steps)
