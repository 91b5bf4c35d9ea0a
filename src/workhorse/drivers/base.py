"""The storage interface, private to workhorse: ``Driver``, as role protocols, and the records it speaks.

Not a plug-in point. PostgreSQL is the one implementation of the queue (``PostgresDriver``, each
role in ``postgres_<role>.py``). ``MemoryDriver`` is a test double for users' unit tests: it keeps
enqueue, claims and settles (flow control's caps enforced), steps and events and the reads, and
refuses the rest with ``POSTGRES_ONLY``; the contract suite (``tests/contract``) runs what it keeps
on both, and every other storage test runs on PostgreSQL. All times a driver decides with come from ITS clock:
``now()`` in Postgres, the injected clock in memory. Workers never compare their own clock with a row.

The roles, each a protocol; ``Driver`` is all of them:

    SchemaRole     migrate, check_schema, close
    EnqueueRole    enqueue_many (in the caller's transaction too), enqueue_many_sync, enqueue_ready
    WorkRole       claim, heartbeat, register/deregister_worker, settle, record_progress
    OperateRole    get_job, list_jobs, list_workers, the verbs, bulk, pauses, snapshot, rollup_counters
    StepsRole      list_steps, put_step, sleep_step, wait_step
    EventsRole     publish_event (and its sync twin), purge_expired_events
    LeadershipRole leader_round, release_leader, open_handover, read_schedule: the scheduler's
                   lease row and its rounds (``drivers/leadership.py``, with the records they speak)
    RetentionRole  purge: finished jobs by state with their steps, expired events, gone workers, ...

Two roles are optional: the wake-ups (``drivers/wakeups.py``, ``WakeupSource``), and the rescue of
lapsed leases (``RescueRole`` below, ``workhorse.rescue``: PostgreSQL's; the memory driver's claim
takes back its lapsed leases itself). The records live in ``drivers/records.py``; every one is
importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from workhorse.drivers.searching import SEARCH_SCAN
from workhorse.leader.rounds import LeadershipRole
from workhorse.types import (
    ALL_STATES,
    BULK_STATES,
    ERRORS_KEPT,
    FINISHED_STATES,
    KEY_SEPARATOR,
    LIVE_STATES,
    MAX_BULK,
    PURGE_TARGETS,
    Beat,
    BulkFilter,
    BulkResult,
    BulkVerb,
    Buried,
    Claimed,
    ClaimResult,
    CounterSum,
    FlowRules,
    FlowUsage,
    FullScopes,
    Job,
    JobRef,
    JobState,
    Lease,
    ListFilter,
    NewJob,
    Outcome,
    Page,
    PublishedEvent,
    Purged,
    PurgePolicy,
    QueuePause,
    Rescued,
    Settlement,
    Snapshot,
    StateCount,
    StepAnswer,
    StepFence,
    StepRecord,
    StepState,
    WorkerInfo,
    shown_step,
)


@runtime_checkable
class SchemaRole(Protocol):
    """The schema role: install or upgrade the schema, check it, and close the driver."""

    async def migrate(self) -> list[int]:
        """Install or upgrade the schema; answers the versions applied by this call."""

    async def check_schema(self) -> None:
        """Raise ``SchemaError`` unless the schema is exactly the version this code expects."""

    async def close(self) -> None: ...


@runtime_checkable
class EnqueueRole(Protocol):
    """The enqueue role: insert jobs, on the caller's connection (in its transaction) when one is given."""

    async def enqueue_many(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        """Insert a batch in one round trip; a live duplicate key answers the live job's ref."""

    def enqueue_many_sync(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[JobRef]:
        """``enqueue_many`` for synchronous callers, from any thread."""

    async def enqueue_ready(self, count: int, rows: Iterator[NewJob], *, conn: Any = None) -> list[JobRef]:
        """Insert ``count`` jobs with no key, due now, built as ``rows`` is consumed: a driver may
        stream the first rows to the database while later ones are still being built (validated
        and encoded). When building a row raises, nothing of the batch is written and the error
        propagates as it is."""


@runtime_checkable
class WorkRole(Protocol):
    """The work role: what a worker calls to claim, renew, settle, register and report progress."""

    async def claim(
        self,
        *,
        worker_id: str,
        wants: Mapping[str, int],
        names: Sequence[str],
        visibility: float,
        sweep: bool = True,
        flow: FlowRules | None = None,
    ) -> ClaimResult:
        """Claim, per queue in ``wants``, up to that many jobs: lapsed leases first (burying final
        attempts), then due jobs. One round trip for every queue. ``sweep=False`` is the lean
        claim of a busy worker: due jobs only, no lapsed leases, no ``next_due``. With ``flow``,
        the claim enforces those fleet-wide caps (``workhorse.flow``): a job over a cap is left
        ready, a lapsed lease a cap counts is freed (revoked when not re-claimed), a lapsed lease
        on its queues under its names is re-taken whether or not a cap counts it, a run refused
        by its key is settled and answered in ``refused``; every such claim sweeps. A lapsed lease
        no claim may take is the rescuer's (``RescueRole``)."""

    async def heartbeat(self, worker_id: str, leases: Sequence[Lease], visibility: float) -> Beat:
        """Renew the worker's registry row and its leases in one round trip. A job id missing
        from ``held`` is a lost lease; ``registered`` False means the row must be written again."""

    async def register_worker(self, info: WorkerInfo, ttl: float) -> None:
        """Write (or refresh) this worker's registry row, live for ``ttl`` seconds."""

    async def deregister_worker(self, worker_id: str) -> None: ...

    async def settle(self, settlements: Sequence[Settlement], *, release: bool = False) -> list[bool]:
        """Write attempt outcomes, each fenced on its claim; answers which landed, in order.
        ``release``: wake the settled rows' queues (a worker under flow control freed slots)."""

    async def record_progress(self, reports: Sequence[tuple[StepFence, str]]) -> list[bool]:
        """Write runs' progress reports (JSON text) in one round trip, each fenced on its claim;
        answers which landed, in order (False: that claim is no longer held)."""


@runtime_checkable
class OperateRole(Protocol):
    """The operate role: what an operator reads and does (admin, the CLI, metrics, counter folds)."""

    async def get_job(self, job_id: str) -> Job | None: ...

    async def list_jobs(
        self, filters: ListFilter, *, limit: int, after: str | None = None, before: str | None = None
    ) -> Page:
        """One keyset page, newest first by (created_at, id). ``after``: rows older than that job;
        ``before``: the ``limit`` rows newer than that job nearest to it (still newest first).
        Never both. A cursor naming no job is ``PAGE_CURSOR_INVALID``."""

    async def list_workers(self) -> list[WorkerInfo]:
        """Live workers (registry rows not yet expired), oldest first."""

    async def cancel(self, job_id: str) -> Job: ...

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> Job:
        """Re-queue a finished job. ``from_step`` drops that step and every later one (by position)
        in the statement that moves the row; without it the recorded steps replay."""

    async def promote(self, job_id: str) -> Job: ...

    async def remove(self, job_id: str) -> Job: ...

    async def bulk(self, verb: BulkVerb, filters: BulkFilter, *, limit: int, dry_run: bool) -> BulkResult:
        """Apply ``verb`` to at most ``limit`` movable rows matching ``filters``, oldest first, in
        one statement; answer how many moved and how many a further call could still move."""

    async def pause_queue(self, queue: str, reason: str | None) -> QueuePause:
        """Pause a queue (idempotent: pausing a paused queue keeps its first ``paused_at``)."""

    async def resume_queue(self, queue: str) -> bool:
        """Resume a queue; False when it was not paused. Wakes idle workers."""

    async def list_pauses(self) -> list[QueuePause]: ...

    async def flow_usage(self, flow: FlowRules, names: Mapping[str, str]) -> FlowUsage:
        """What holds ``flow``'s caps now, and per queue the due ready jobs of ``names`` (job name ->
        queue) a full cap holds back. An operator's read: it takes no lock."""

    async def snapshot(self, since: float | None) -> Snapshot:
        """State counts, counter sums since ``since`` seconds ago, pauses and live workers."""

    async def rollup_counters(self) -> int:
        """Fold minute buckets older than two hours into hours, and hour buckets older than two days
        into days, each move in one statement so no count is folded twice; answers rows folded."""

    async def counter_minutes(self, minutes: int) -> list[tuple[datetime, CounterSum]]:
        """The 'minute' counters of the last ``minutes`` minutes (the current one included), summed
        per (bucket, queue) over the job names (``name`` is ""), oldest first: the dashboard's charts."""


# -- durable steps and events (``workhorse.steps``) -----------------------------------------------


@runtime_checkable
class StepsRole(Protocol):
    """The steps role: a run's durable steps, read once, each write fenced on its claim."""

    async def list_steps(self, job_id: str) -> list[StepRecord]:
        """Every recorded step of a job, in position order: ONE read, when a run starts stepping."""

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
        """Record a finished step, fenced on the claim; False when the claim is no longer held.
        A failed step may be overwritten by a later run of it; a done one never is."""

    async def sleep_step(
        self, fence: StepFence, *, name: str, seq: int, delay: float | None, until: datetime | None
    ) -> StepAnswer | None:
        """Record (or resume) a sleep and, unless it is already over, suspend the job until it ends —
        one statement, fenced on the claim. None when the claim is no longer held."""

    async def wait_step(
        self, fence: StepFence, *, name: str, seq: int, event: str, key: str | None, within: float
    ) -> StepAnswer | None:
        """Record (or resume) a wait: answer the earliest matching event published at or after the
        wait began, or None past the deadline; otherwise suspend the job until the deadline."""


@runtime_checkable
class EventsRole(Protocol):
    """The events role: store events that wake the runs waiting on them, and purge expired ones."""

    async def publish_event(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        """Store an event and wake every run suspended on a matching wait, in one statement."""

    def publish_event_sync(self, name: str, key: str | None, payload: str, ttl: float) -> PublishedEvent:
        """``publish_event`` for synchronous callers, from any thread."""

    async def purge_expired_events(self) -> int:
        """Delete expired events in small batches; answers how many rows went."""


@runtime_checkable
class RetentionRole(Protocol):
    """The retention role: delete what only grows, in small batches that never wait on each other."""

    async def purge(self, policy: PurgePolicy, *, dry_run: bool = False) -> Purged:
        """Remove every row ``policy`` names, batch by batch (``dry_run``: count them, remove
        nothing). Safe from any number of processes at once: each row is removed once."""


@runtime_checkable
class RescueRole(Protocol):
    """The optional rescue role: recover running jobs whose lease lapsed, whoever may claim them."""

    async def rescue_lapsed(self, batch: int) -> Rescued:
        """One batch of at most ``batch`` lapsed leases, oldest lapse first, in one round trip: each
        back 'ready' with its attempt spent, or buried on its final attempt, fenced on its claim;
        a lease another statement holds locked is left to it. Wakes the rescued jobs' queues."""


@runtime_checkable
class Driver(
    SchemaRole, EnqueueRole, WorkRole, OperateRole, StepsRole, EventsRole, LeadershipRole, RetentionRole, Protocol
):
    """What workhorse needs from storage: every role above. Every method is safe to call concurrently."""

    kind: str


__all__ = [
    "ALL_STATES",
    "BULK_STATES",
    "ERRORS_KEPT",
    "FINISHED_STATES",
    "KEY_SEPARATOR",
    "LIVE_STATES",
    "MAX_BULK",
    "PURGE_TARGETS",
    "SEARCH_SCAN",
    "Beat",
    "BulkFilter",
    "BulkResult",
    "BulkVerb",
    "Buried",
    "ClaimResult",
    "Claimed",
    "CounterSum",
    "Driver",
    "EnqueueRole",
    "EventsRole",
    "FlowRules",
    "FlowUsage",
    "FullScopes",
    "Job",
    "JobRef",
    "JobState",
    "LeadershipRole",
    "Lease",
    "ListFilter",
    "NewJob",
    "OperateRole",
    "Outcome",
    "Page",
    "PublishedEvent",
    "PurgePolicy",
    "Purged",
    "QueuePause",
    "RescueRole",
    "Rescued",
    "RetentionRole",
    "SchemaRole",
    "Settlement",
    "Snapshot",
    "StateCount",
    "StepAnswer",
    "StepFence",
    "StepRecord",
    "StepState",
    "StepsRole",
    "WorkRole",
    "WorkerInfo",
    "shown_step",
]
