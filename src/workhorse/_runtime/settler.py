"""The worker's settle side: batched settle statements, the stats they move, and ``on_settled``.

Runs on the control loop (``settle_loop`` is one of its tasks); ``on_settled`` hooks are handed to
the body loop. Plain functions over the ``Worker`` they serve.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from workhorse._runtime.execute import Verdict
from workhorse._runtime.state import Control, Held, WorkerStats
from workhorse.drivers.base import Buried, Settlement
from workhorse.errors import WorkhorseError
from workhorse.jobs import Outcome, OutcomeKind

if TYPE_CHECKING:
    from workhorse.worker import Worker

log = logging.getLogger("workhorse.worker")

ON_SETTLED_TRIES = 3
SETTLE_LINGER = 0.002  # seconds a busy worker's settle waits for more outcomes to batch


async def settle_loop(worker: Worker, control: Control) -> None:
    """One statement settles every attempt that finished meanwhile. While the worker is busy
    (more settles coming), it lingers SETTLE_LINGER for more, so the batches grow."""
    while True:
        batch = [await control.settles.get()]
        if worker._slots_busy() and control.settles.qsize() < worker._total:
            await asyncio.sleep(SETTLE_LINGER)
        while not control.settles.empty():
            batch.append(control.settles.get_nowait())
        await settle_batch(worker, control, batch)


async def settle_batch(worker: Worker, control: Control, batch: list[tuple[Held, Verdict]]) -> None:
    settlements = [
        Settlement(
            job_id=h.lease.job_id,
            worker_id=worker.id,
            claims=h.lease.claims,
            outcome=v.outcome,
            result=v.result,
            error=v.error,
            delay=v.delay,
            progress=h.run.ctx._progress_latest,
        )
        for h, v in batch
        if v.outcome is not None
    ]
    failures = 0
    while True:
        try:
            landed = await control.settle.settle(settlements)
            break
        except WorkhorseError as error:
            failures += 1
            if time.monotonic() - control.last_renewal > worker.visibility:
                log.error(  # noqa: TRY400 - an expected outage, reported without a traceback
                    "worker %s: could not settle %d job(s) within a lease window (%s); leaving them to the next claim",
                    worker.id,
                    len(batch),
                    error.cause,
                )
                landed = [False] * len(settlements)
                break
            delay = min(5.0, 0.1 * 2**failures) * random.uniform(0.5, 1.0)
            log.warning("worker %s: settle failed (%s); retrying in %.1fs", worker.id, error.cause, delay)
            await asyncio.sleep(delay)
    for (held, verdict), ok in zip(batch, landed, strict=True):
        if not ok or verdict.outcome not in ("done", "dead", "failed"):
            worker._recheck = True  # a retry or a handed-back run may be due (now or later) again
        count(worker.stats, verdict, ok)
        if ok:
            announce(worker, held, verdict)
        else:
            log.warning(
                "worker %s: settle of job %s (%s) did not land: the job is no longer ours "
                "(cancelled, or re-claimed after our lease lapsed)",
                worker.id,
                held.lease.job_id,
                held.run.handle.name,
            )
        worker._forget(control, held)


def count(stats: WorkerStats, verdict: Verdict, landed: bool) -> None:
    if not landed:
        stats.settle_missed += 1
        return
    match verdict.outcome:
        case "done":
            stats.completed += 1
        case "retry":
            stats.retried += 1
        case "dead":
            stats.dead += 1
        case "failed":
            stats.failed += 1
        case "interrupted":
            stats.interrupted += 1
        case _:
            pass


def announce(worker: Worker, held: Held, verdict: Verdict) -> None:
    kinds: dict[str, OutcomeKind] = {"done": "completed", "dead": "dead-lettered", "failed": "dropped"}
    kind = kinds.get(verdict.outcome or "")
    handle = held.run.handle
    if kind is None or handle.on_settled is None:
        return
    outcome = Outcome(
        kind=kind,
        job_id=held.lease.job_id,
        name=handle.name,
        attempt=held.run.claimed.attempt,
        payload=held.run.claimed.payload,
        result=verdict.result_value,
        error=None if verdict.error is None else json.loads(verdict.error),
    )
    call_on_settled(worker, handle.on_settled, outcome)


def announce_buried(worker: Worker, buried: list[Buried]) -> None:
    for row in buried:
        worker.stats.buried += 1
        log.error(
            "worker %s: job %s (%s) buried %s: its lease lapsed on its final attempt (%d of %d)",
            worker.id,
            row.id,
            row.name,
            row.state,
            row.attempt,
            row.max_attempts,
        )
        handle = worker.app.jobs.get(row.name)
        if handle is None or handle.on_settled is None:
            continue
        kind: OutcomeKind = "dead-lettered" if row.state == "dead" else "dropped"
        call_on_settled(
            worker,
            handle.on_settled,
            Outcome(
                kind=kind,
                job_id=row.id,
                name=row.name,
                attempt=row.attempt,
                payload=row.payload,
                error=row.last_error,
            ),
        )


def call_on_settled(worker: Worker, hook: Any, outcome: Outcome) -> None:
    async def call() -> None:
        for attempt in range(1, ON_SETTLED_TRIES + 1):
            try:
                value = hook(outcome)
                if asyncio.iscoroutine(value):
                    await value
            except Exception:
                log.exception("on_settled of %s failed (try %d of %d)", outcome.name, attempt, ON_SETTLED_TRIES)
                await asyncio.sleep(0.05 * attempt)
            else:
                return

    assert worker._body_loop is not None
    asyncio.run_coroutine_threadsafe(call(), worker._body_loop)
