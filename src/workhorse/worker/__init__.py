"""The worker: claims due jobs, runs their bodies, keeps their leases, settles their outcomes.
This is its face (``Worker``, ``WorkerStats``); behind it are private modules, one noun each:
lifecycle, claimer, table, bridge, execute, heartbeat, settler, progress, records, clock.

Design: docs/how-it-works/architecture.md, docs/how-it-works/leases.md
"""

from workhorse.worker.lifecycle import Worker
from workhorse.worker.records import WorkerStats

__all__ = ["Worker", "WorkerStats"]
