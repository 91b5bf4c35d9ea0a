"""The worker's settle side: batched settle statements, the stats they move, and ``on_settled``.

Runs on the control loop (``Settler.run`` is one of its tasks). It takes finished runs from the
control loop's settle queue, writes their outcomes fenced on their claims, and lets each run go
through the callback it was given; ``on_settled`` hooks are handed to the body loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from workhorse.errors import DatabaseError, PayloadError, WorkhorseError
from workhorse.failures import error_json
from workhorse.hooks import Hooks
from workhorse.ids import short_id
from workhorse.jobs import JobHandle, Outcome, OutcomeKind
from workhorse.leader.rescue import announce_buried, on_settled
from workhorse.storable import storable
from workhorse.types import Buried, Settlement
from workhorse.types import Outcome as Written
from workhorse.worker.clock import lease_clock
from workhorse.worker.execute import Verdict
from workhorse.worker.records import Control, Held, WorkerStats
from workhorse.worker.table import RunTable

log = logging.getLogger("workhorse.worker")

SETTLE_LINGER = 0.002  # seconds a busy worker's settle waits for more outcomes to batch


_OUTCOME_WORDS = {"done": "completed", "retry": "failed, retrying", "dead": "dead-lettered", "failed": "failed"}


def log_outcome(worker_id: str, held: Held, verdict: Verdict) -> None:
    """One line per settled attempt: INFO, or WARNING for a drain's hand-back."""
    run, outcome = held.run, verdict.outcome
    ended = run.ended or time.monotonic()
    fields: dict[str, Any] = {
        "job_id": run.claimed.id,
        "job": run.claimed.name,
        "queue": run.claimed.queue,
        "attempt": run.claimed.attempt,
        "outcome": outcome,
        "duration_ms": round((ended - run.started) * 1000, 1),
        "worker_id": worker_id,
    }
    tail = ""
    if verdict.error is not None:
        error = json.loads(verdict.error)
        fields["error_type"], fields["error_message"] = error.get("type"), error.get("message")
        tail = f": {fields['error_type']}: {fields['error_message']}"
    if outcome == "retry":
        tail += f" (next try in {verdict.delay:.3g}s)"
    short = short_id(run.claimed.id)  # as `ls` prints it and every command takes it; job_id stays whole
    if outcome == "interrupted":
        log.warning(
            "job %s %s handed back unspent by the drain (queue %s, attempt %d)",
            short, fields["job"], fields["queue"], fields["attempt"], extra=fields,
        )  # fmt: skip
        return
    log.info(
        "job %s %s %s (queue %s, attempt %d, %.1f ms)%s",
        short, fields["job"], _OUTCOME_WORDS.get(str(outcome), str(outcome)), fields["queue"],
        fields["attempt"], fields["duration_ms"], tail, extra=fields,
    )  # fmt: skip


class Settler:
    def __init__(
        self,
        *,
        worker_id: str,
        visibility: float,
        control: Control,
        table: RunTable,
        stats: WorkerStats,
        jobs: Mapping[str, JobHandle[Any]],
        forget: Callable[[Held], None],
        on_body_loop: Callable[[Coroutine[Any, Any, None]], None],
        release: bool = False,
        emit: Callable[[Held, Verdict], None] | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.emit = emit  # the app's lifecycle hooks (workhorse.hooks), for each landed settle
        self.hooks = hooks  # and for the rows a claim buried or refused
        self.worker_id = worker_id
        self.visibility = visibility
        self.control = control
        self.table = table
        self.stats = stats
        self.jobs = jobs
        self.forget = forget
        self.on_body_loop = on_body_loop
        self.release = release  # under flow control: each settle wakes its queues (a slot freed)

    async def run(self) -> None:
        """One statement settles every attempt that finished meanwhile. While the worker is busy
        (more settles coming), it lingers SETTLE_LINGER for more, so the batches grow."""
        settles = self.control.settles
        while True:
            batch = [await settles.get()]
            if self.table.busy() and settles.qsize() < self.table.total:
                await asyncio.sleep(SETTLE_LINGER)
            while not settles.empty():
                batch.append(settles.get_nowait())
            await self.settle(batch)

    async def settle(self, batch: list[tuple[Held, Verdict]]) -> None:
        """Settle ``batch`` in one statement, retried with back-off while the leases are ours to write.

        Each run is given up only when ITS lease window has passed (``renewed_at``, its claim or its
        last landed renewal, plus the visibility timeout, on the lease clock): the heartbeat keeps
        renewing a finished run until its settle lands, so while renewals land the settle is tried
        again, and a worker-wide figure (the registry's last renewal) says nothing of one lease."""
        pending = list(batch)  # every verdict here has an outcome to write
        landed: dict[int, bool] = {}  # id() of a run: its settle landed (False: not ours any more, or given up)
        rewritten: dict[int, Verdict] = {}  # id() of a run: what was written instead of what PostgreSQL refused
        failures = 0
        while pending:
            try:
                answer = await self.write(pending)
                landed.update({id(h): ok for (h, _), ok in zip(pending, answer, strict=True)})
                break
            except (WorkhorseError, UnicodeError) as error:
                if unchanging(error):  # the same statement would fail the same way on every try
                    pending = await self.apart(pending, error, landed, rewritten)  # left: an outage met meanwhile
                    continue
                if not isinstance(error, WorkhorseError):
                    raise
                failures += 1
                now = lease_clock()
                closed = [(h, v) for h, v in pending if now >= h.renewed_at + self.visibility]
                if closed:
                    log.error(  # noqa: TRY400 - an expected outage, reported without a traceback
                        "worker %s: could not settle %d job(s) within their lease windows (%s); leaving them "
                        "to the next claim",
                        self.worker_id,
                        len(closed),
                        error.cause,
                    )
                    pending = [(h, v) for h, v in pending if now < h.renewed_at + self.visibility]
                    if not pending:
                        break
                delay = min(5.0, 0.1 * 2**failures) * random.uniform(0.5, 1.0)
                log.warning("worker %s: settle failed (%s); retrying in %.1fs", self.worker_id, error.cause, delay)
                await asyncio.sleep(delay)
        for held, first in batch:
            verdict = rewritten.get(id(held), first)
            ok = landed.get(id(held), False)
            if not ok or verdict.outcome not in ("done", "dead", "failed"):
                self.control.recheck = True  # a retry or a handed-back run may be due (now or later) again
            count(self.stats, verdict, ok)
            if ok:
                if log.isEnabledFor(logging.INFO):
                    log_outcome(self.worker_id, held, verdict)
                if self.emit is not None:
                    self.emit(held, verdict)
                self.announce(held, verdict)
            else:
                log.warning(
                    "worker %s: settle of job %s (%s) did not land: the job is no longer ours "
                    "(cancelled, or re-claimed after our lease lapsed)",
                    self.worker_id,
                    held.lease.job_id,
                    held.run.handle.name,
                )
            self.forget(held)

    async def write(self, pending: list[tuple[Held, Verdict]]) -> list[bool]:
        """One settle statement for ``pending``: which landed."""
        settlements = [self.settlement(h, v) for h, v in pending]
        if self.release:  # only then: a driver of the user's may not take the argument
            return await self.control.settle.settle(settlements, release=True)
        return await self.control.settle.settle(settlements)

    async def apart(
        self,
        pending: list[tuple[Held, Verdict]],
        refusal: WorkhorseError | UnicodeError,
        landed: dict[int, bool],
        rewritten: dict[int, Verdict],
    ) -> list[tuple[Held, Verdict]]:
        """PostgreSQL refused the data of a settle: each run is written alone, so one bad run never
        holds back the others, and a run refused alone is written again without what was refused
        (``rewrites``). Answers the runs an outage stopped meanwhile, to be tried again as usual."""
        left: list[tuple[Held, Verdict]] = []
        for held, verdict in pending:
            last: list[WorkhorseError | UnicodeError] = [refusal]
            tries = (
                rewrites(held, verdict, last)
                if len(pending) == 1
                else itertools.chain([verdict], rewrites(held, verdict, last))
            )
            for candidate in tries:
                rewritten[id(held)] = candidate
                try:
                    (landed[id(held)],) = await self.write([(held, candidate)])
                except (WorkhorseError, UnicodeError) as error:
                    if unchanging(error):
                        last[0] = error
                        continue
                    left.append((held, candidate))  # an outage: the usual retries take it from here
                break
            else:
                landed[id(held)] = False
                log.error(
                    "worker %s: PostgreSQL refused every settle of job %s (%s), even with nothing of the run's "
                    "own in it (%s); leaving it to the next claim",
                    self.worker_id,
                    held.lease.job_id,
                    held.run.handle.name,
                    first_line(last[0]),
                )
        return left

    def settlement(self, held: Held, verdict: Verdict) -> Settlement:
        assert verdict.outcome is not None  # a run with nothing to write never reaches the settle queue
        return Settlement(
            job_id=held.lease.job_id,
            worker_id=self.worker_id,
            claims=held.lease.claims,
            outcome=verdict.outcome,
            result=verdict.result,
            error=verdict.error,
            delay=verdict.delay,
            progress=held.run.ctx._progress_latest,
            reason=verdict.reason,
        )

    def announce(self, held: Held, verdict: Verdict) -> None:
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
        self.call_on_settled(handle.on_settled, outcome)

    def announce_buried(self, buried: list[Buried]) -> None:
        """Jobs this worker's claim or rescuer buried: their lease lapsed on the final attempt."""
        self.stats.buried += len(buried)
        announce_buried(
            buried,
            role="worker",
            by=self.worker_id,
            jobs=self.jobs,
            hooks=self.hooks,
            call=self.on_body_loop,
            logger=log,
        )

    def announce_refused(self, refused: list[Buried]) -> None:
        """Runs the claim settled failed with JOB_KEY_BUSY (``when_busy="fail"``): the body never ran."""
        for row in refused:
            self.stats.refused += 1
            log.warning(
                "worker %s: job %s (%s) refused (JOB_KEY_BUSY): its concurrency key runs at its cap",
                self.worker_id,
                row.id,
                row.name,
            )
            if self.hooks:
                self.hooks.job("failed", self.worker_id, row, error=row.last_error)
            handle = self.jobs.get(row.name)
            if handle is None or handle.on_settled is None:
                continue
            self.call_on_settled(
                handle.on_settled,
                Outcome(
                    kind="refused",
                    job_id=row.id,
                    name=row.name,
                    attempt=row.attempt,
                    payload=row.payload,
                    error=row.last_error,
                ),
            )

    def call_on_settled(self, hook: Any, outcome: Outcome) -> None:
        self.on_body_loop(on_settled(hook, outcome))


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


def unchanging(error: WorkhorseError | UnicodeError) -> bool:
    """The settle failed for a reason trying again cannot change: PostgreSQL refused its data (a
    data exception or a broken constraint), or the text could not even be encoded to send."""
    return isinstance(error, UnicodeError) or (isinstance(error, DatabaseError) and error.refused_data)


def first_line(error: BaseException) -> str:
    text = error.cause if isinstance(error, WorkhorseError) else str(error)
    return storable(text.splitlines()[0] if text else type(error).__name__)[:300]


def rewrites(held: Held, verdict: Verdict, last: list[WorkhorseError | UnicodeError]) -> Iterator[Verdict]:
    """What to write instead of a settle PostgreSQL refused, each leaving out more: the outcome
    without the run's progress report; then the outcome with the body's result or error replaced
    by a refusal naming it (a result: dead-lettered ``RESULT_INVALID``; an error: ``ERROR_UNSTORABLE``,
    the retry policy still decides); then the run dead-lettered ``SETTLE_UNSTORABLE``. ``last[0]`` is
    the latest refusal. Never retried as it was: the body would run again, its side effects too."""
    run = held.run
    name, attempt = run.handle.name, run.claimed.attempt
    if run.ctx._progress_latest is not None:
        log.warning(
            "worker %s: job %s (%s): its progress report was refused (%s); settling without it",
            held.worker_id, held.lease.job_id, name, first_line(last[0]),
        )  # fmt: skip
        run.ctx._progress_latest = None
        yield verdict
    final: Written = "dead" if run.handle.retry.dead_letter else "failed"
    if verdict.outcome == "done":
        yield _refused(
            held, final, PayloadError(
                code="RESULT_INVALID",
                cause=f"job {name!r} returned a value PostgreSQL refused to store ({first_line(last[0])})",
                fix=f"return JSON-compatible data from {name!r} without NUL characters or lone surrogates",
            ),
        )  # fmt: skip
    elif verdict.error is not None:
        yield _refused(
            held, verdict.outcome or final, WorkhorseError(
                code="ERROR_UNSTORABLE",
                cause=f"the error ({_error_type(verdict.error)}) that attempt {attempt} of job {name!r} raised "
                f"could not be stored: PostgreSQL refused it ({first_line(last[0])})",
                fix=f"raise errors whose message is plain text from {name!r}; the worker logs the original",
            ), delay=verdict.delay,
        )  # fmt: skip
    yield _refused(
        held, final, WorkhorseError(
            code="SETTLE_UNSTORABLE",
            cause=f"PostgreSQL refused the outcome of attempt {attempt} of job {name!r} "
            f"({verdict.outcome}, delay {verdict.delay:g}s): {first_line(last[0])}",
            fix="read the refusal above; a retry delay must stay within PostgreSQL's interval range",
        ),
    )  # fmt: skip


def _refused(held: Held, outcome: Written, error: WorkhorseError, *, delay: float = 0.0) -> Verdict:
    log.error(
        "worker %s: PostgreSQL refused the settle of job %s (%s); writing it %s instead: %s",
        held.worker_id, held.lease.job_id, held.run.handle.name, outcome, error,
    )  # fmt: skip
    return Verdict(outcome, error=error_json(error), delay=delay if outcome == "retry" else 0.0)


def _error_type(error: str) -> str:
    try:
        return storable(str(json.loads(error).get("type")))
    except (ValueError, AttributeError):
        return "unknown type"
