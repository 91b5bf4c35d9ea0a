"""The worker: claims due jobs, runs their bodies, keeps their leases, settles their outcomes.

This is its face (``Worker``, ``WorkerStats``); the parts behind it are private modules, each a
noun with one job, that talk through the callbacks they are given:

    lifecycle   Worker: options, run/stop, signals, the control thread, wiring, the drain
    claimer     the claim loop (its decisions pure functions), back-off, the hand-back
    table       RunTable: the one owner of held runs, busy slots, the claim-ahead buffer
    bridge      the body loop <-> control loop crossing: starting runs, carrying verdicts back
    execute     one attempt on the body loop: its body, deadline and verdict
    heartbeat   the registry row and every held lease, renewed in one statement per beat
    settler     batched, fenced settles; the stats they move; on_settled hooks
    progress    progress reports, one fenced statement a second at most
    records     WorkerStats, Held (one claimed run), Control (the control loop's state)
    clock       lease_clock: the clock lease windows are kept by
"""

from workhorse.worker.lifecycle import Worker
from workhorse.worker.records import WorkerStats

__all__ = ["Worker", "WorkerStats"]
