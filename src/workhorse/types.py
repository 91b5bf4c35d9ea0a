"""The records workhorse speaks, in one module: what users read (``Job``, ``JobRef``, ``Page``,
``PublishedEvent``, the job states), and what the storage interface (``drivers/base.py``) is given
and answers, with the bounds the storage keeps (``MAX_BULK``, ``ERRORS_KEPT``). Plain data: this
module imports nothing of workhorse, so every part of it may import this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

JobState = Literal["pending", "ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled"]
LIVE_STATES: frozenset[str] = frozenset({"ready", "delayed", "running", "suspended"})
FINISHED_STATES: frozenset[str] = frozenset({"done", "failed", "dead", "cancelled"})
ALL_STATES: tuple[str, ...] = (
    "pending",  # waiting on its dependencies (enqueue(after=...)), before ready
    "ready",
    "delayed",
    "running",
    "suspended",
    "done",
    "failed",
    "dead",
    "cancelled",
)

Outcome = Literal["done", "retry", "interrupted", "dead", "failed"]


@dataclass(slots=True)  # not frozen: built once per enqueued job, and frozen __init__ is slow
class NewJob:
    """One job to insert. ``payload`` is already-validated JSON text."""

    id: str
    name: str
    queue: str
    tenant: str | None
    payload: str
    key: str | None
    priority: int
    max_attempts: int
    dead_letter: bool
    run_at: datetime | None
    delay: float
    flow_key: str | None = None  # the Concurrency(key=) key, when the job declares one
    traceparent: str | None = None  # the W3C traceparent current at enqueue (workhorse.tracing), if any
    after: tuple[str, ...] = ()  # the ids of the jobs it waits on (enqueue(after=...)), in order
    when: str = "done"  # with after: "done" (every one done) or "finished" (every one final)


@dataclass(frozen=True)
class JobRef:
    """What enqueue answers: the job's id, and whether an existing live job was returned instead."""

    id: str
    duplicate: bool = False


@dataclass(frozen=True)
class Job:
    """A job as stored. Datetimes are timezone-aware UTC."""

    id: str
    name: str
    queue: str
    tenant: str | None
    state: str
    priority: int
    payload: Any
    result: Any
    last_error: dict[str, Any] | None
    progress: dict[str, Any] | None
    key: str | None
    attempt: int
    max_attempts: int
    dead_letter: bool
    claims: int
    worker_id: str | None
    lease_expires_at: datetime | None
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    steps: list[dict[str, Any]] = field(default_factory=list)
    # The failed attempts' errors, oldest first, at most ERRORS_KEPT: {attempt, type, message, at}.
    # ``last_error`` keeps the latest one whole, with its traceback.
    errors: list[dict[str, Any]] = field(default_factory=list)
    flow_key: str | None = None  # the key its Concurrency(key=) answered at enqueue
    traceparent: str | None = None  # the W3C traceparent stamped at enqueue or staging, if any
    # Running, and its lease lapsed (on the driver's clock, when read): its worker stopped renewing
    # it and no claim nor rescue has recovered it yet (see ``workhorse.leader.rescue``).
    lease_lapsed: bool = False
    # Its last hand-back, unspent (a drain, ctx.hand_back()): {at, worker, reason, attempt}; None: never.
    handed_back: dict[str, Any] | None = None

    def to_dict(self, *, with_steps: bool = True) -> dict[str, Any]:
        """The JSON shape the CLI prints (``show --json``; ``ls --json`` without steps)."""

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat().replace("+00:00", "Z")

        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "queue": self.queue,
            "state": self.state,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "tenant": self.tenant,
            "priority": self.priority,
            "key": self.key,
            "concurrency_key": self.flow_key,
            "payload": self.payload,
            "result": self.result,
            "last_error": self.last_error,
            "progress": self.progress,
            "errors": list(self.errors),
            "worker_id": self.worker_id,
            "created_at": iso(self.created_at),
            "run_at": iso(self.run_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "lease_expires_at": iso(self.lease_expires_at),
            "lease_lapsed": self.lease_lapsed,
            "traceparent": self.traceparent,
            "handed_back": self.handed_back,
        }
        if with_steps:
            out["steps"] = list(self.steps)
        return out


@dataclass(slots=True)  # not frozen: one per job on the hot path, and a frozen __init__ is slow
class Claimed:
    """A job a worker now holds. ``claims`` is the fence token every later write names."""

    id: str
    name: str
    queue: str
    tenant: str | None
    payload: Any
    attempt: int
    max_attempts: int
    claims: int
    priority: int
    created_at: datetime
    run_at: datetime
    traceparent: str | None = None  # the attempt's span continues this trace (workhorse.tracing)
    # What the claim read of the jobs this one waits on (enqueue(after=...)), in the order given:
    # dicts of id, name, state, result, last_error; None for a job without dependencies.
    dependencies: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Buried:
    """A job the claim buried: its lease lapsed on its final attempt (every worker that took it died)."""

    id: str
    name: str
    queue: str
    tenant: str | None
    state: str
    payload: Any
    attempt: int
    max_attempts: int
    last_error: dict[str, Any] | None


@dataclass(frozen=True)
class Rescued:
    """What one rescue batch did (``RescueRole.rescue_lapsed``): the lapsed leases it handed back
    'ready' (``readied``, their ids) and those it buried on their final attempt (``buried``). A
    batch that came back full (``count`` equal to the batch asked) may have left more."""

    readied: list[str]
    buried: list[Buried]

    @property
    def count(self) -> int:
        return len(self.readied) + len(self.buried)


@dataclass(frozen=True)
class ClaimResult:
    claimed: list[Claimed]
    buried: list[Buried]
    next_due: float | None = None  # seconds until a delayed job comes due, a lease could lapse or a rate reopens
    refused: list[Buried] = field(default_factory=list)  # settled failed JOB_KEY_BUSY (when_busy='fail')
    held_back: int = 0  # due jobs this claim saw and left ready because a cap was full


@dataclass(frozen=True)
class FlowRules:
    """The fleet-wide caps a worker's claim enforces (``workhorse.limits`` builds them). Every count
    is of running runs whose lease has not lapsed; None (or a missing name) is no cap."""

    names: dict[str, int]  # job name -> running runs of that name
    keyed: dict[str, tuple[int, bool]]  # job name -> (running runs per key, refuse when busy)
    per_tenant: int | None = None
    per_queue: dict[str, int] = field(default_factory=dict)  # queue -> cap
    per_queue_default: int | None = None  # the cap of a queue per_queue does not name
    total: int | None = None
    rate: tuple[int, float] | None = None  # (n, per seconds): starts per tenant in any window

    def counts(self, name: str, queue: str, tenant: str | None) -> bool:
        """Does a running run of this name, queue and tenant hold a slot of any cap here? (A rate
        counts starts, not running runs.)"""
        return (
            self.total is not None
            or name in self.names
            or name in self.keyed
            or (tenant is not None and self.per_tenant is not None)
            or queue in self.per_queue
            or self.per_queue_default is not None
        )

    @property
    def rate_window(self) -> float | None:
        """The window a rate counts starts in: ``per`` and RATE_SLACK of it. A start is stamped
        by the claim, a moment before the body starts; the slack keeps that moment's jitter from
        letting n + 1 bodies start inside ``per``."""
        return None if self.rate is None else self.rate[1] * (1 + RATE_SLACK)

    def queue_cap(self, queue: str) -> int | None:
        return self.per_queue.get(queue, self.per_queue_default)

    def full(self, usage: FlowUsage) -> FullScopes:
        """Which caps have no room now (what FLOW_CLAIM's due arm skips, and `total`/`per_queue`)."""
        held = usage.running
        return FullScopes(
            names={n for n, cap in self.names.items() if held.get(("name", n), 0) >= cap},
            keys={
                (n, k)
                for (scope, nk), count in held.items()
                if scope == "key"
                for n, k in [nk.split(KEY_SEPARATOR, 1)]
                if n in self.keyed and not self.keyed[n][1] and count >= self.keyed[n][0]
            },
            tenants={
                t for (scope, t), count in held.items()
                if scope == "tenant" and self.per_tenant is not None and count >= self.per_tenant
            }
            | {t for t, count in usage.starts.items() if self.rate is not None and count >= self.rate[0]},
            queues={
                q for (scope, q), count in held.items()
                if scope == "queue" and (cap := self.queue_cap(q)) is not None and count >= cap
            },
            total=self.total is not None and held.get(("total", ""), 0) >= self.total,
            every_tenant=self.per_tenant == 0 or (self.rate is not None and self.rate[0] == 0),
        )  # fmt: skip

    def blocked_params(self, full: FullScopes, names: Mapping[str, str]) -> dict[str, Any]:
        """FLOW_HELD_BACK's parameters: the full scopes, with the queues and names a cap of 0 stops."""
        zero_keys = {n for n, (cap, fail) in self.keyed.items() if cap == 0 and not fail}
        return {
            "names": list(names),
            "total_full": full.total,
            "full_names": sorted(full.names | (zero_keys & set(names))),
            "full_queues": sorted(full.queues | {q for q in set(names.values()) if self.queue_cap(q) == 0}),
            "every_tenant": full.every_tenant,
            "full_tenants": sorted(full.tenants),
            "full_keys": sorted(n + KEY_SEPARATOR + k for n, k in full.keys),
        }

    def holds(self, full: FullScopes, name: str, queue: str, tenant: str | None, flow_key: str | None) -> bool:
        """Does a full cap (``full``, from ``self.full``) hold back a due job like this?"""
        return (
            full.total
            or name in full.names
            or queue in full.queues
            or self.queue_cap(queue) == 0
            or (tenant is not None and (full.every_tenant or tenant in full.tenants))
            or (flow_key is not None and (name, flow_key) in full.keys)
            or (flow_key is not None and self.keyed.get(name, (1, False)) == (0, False))
        )


RATE_SLACK = 0.05  # of a rate's window (see FlowRules.rate_window)
KEY_SEPARATOR = "\x1f"  # between a job name and its concurrency key in FlowUsage's ("key", ...) scope


@dataclass(frozen=True)
class FlowUsage:
    """What holds the fleet's caps now (``flow_usage``): running runs with live leases by scope,
    ``("name", job)``, ``("key", job + KEY_SEPARATOR + key)``, ``("tenant", t)``, ``("queue", q)``
    and ``("total", "")``; per tenant, the starts inside the rate window; and per queue, the due
    ready jobs of the worker's caps that a full cap holds back."""

    running: dict[tuple[str, str], int]
    starts: dict[str, int]
    held_back: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FullScopes:
    names: set[str]
    keys: set[tuple[str, str]]
    tenants: set[str]
    queues: set[str]
    total: bool
    every_tenant: bool = False  # a tenant cap (or rate) of 0: every job with a tenant waits


@dataclass(slots=True)  # not frozen: one per job on the hot path, and a frozen __init__ is slow
class Lease:
    """The fence of one held claim: which worker, which claim number."""

    job_id: str
    claims: int


@dataclass(frozen=True)
class Beat:
    """What a heartbeat answers: the job ids still held, and whether the registry row was there."""

    held: set[str]
    registered: bool


@dataclass(frozen=True)
class WorkerInfo:
    """One row of the worker registry."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: dict[str, int]
    started_at: datetime | None = None
    last_seen_at: datetime | None = None
    expires_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat().replace("+00:00", "Z")

        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": dict(self.concurrency),
            "started_at": iso(self.started_at),
            "last_seen_at": iso(self.last_seen_at),
            "expires_at": iso(self.expires_at),
        }


@dataclass(slots=True)  # not frozen: one per job on the hot path, and a frozen __init__ is slow
class Settlement:
    """How one attempt ended, to be written fenced on its claim."""

    job_id: str
    worker_id: str
    claims: int
    outcome: Outcome
    result: str | None = None  # JSON text, for "done"
    error: str | None = None  # JSON text {type, message, traceback}
    delay: float = 0.0  # seconds until the retry is due
    progress: str | None = None  # JSON text: a progress report not yet written, flushed by the settle
    reason: str | None = None  # "interrupted": why it was handed back (kept in jobs.handed_back)


@dataclass(frozen=True)
class StepFence:
    """The claim a step write names: it lands only while this worker still holds this claim."""

    job_id: str
    worker_id: str
    claims: int


StepState = Literal["done", "failed", "sleeping", "waiting"]


@dataclass(frozen=True)
class StepRecord:
    """One recorded step of a job, as a run hydrates it. ``result`` is decoded JSON."""

    name: str
    seq: int
    state: str
    result: Any
    error: dict[str, Any] | None
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    wake_at: datetime | None = None
    event: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class StepAnswer:
    """What a sleep or wait statement decided. ``state`` 'done': carry on with ``result`` (a wait's
    event payload, None on timeout); 'sleeping'/'waiting': the job is already suspended until ``wake_at``."""

    state: str
    result: Any = None
    wake_at: datetime | None = None
    matched: bool = False


@dataclass(frozen=True)
class PublishedEvent:
    """What ``publish_event`` answers: the stored event and how many suspended runs it woke."""

    id: str
    name: str
    key: str | None
    published_at: datetime
    expires_at: datetime
    woken: int


def shown_step(
    *,
    name: str,
    seq: int,
    state: str,
    attempt: int,
    started_at: datetime | None,
    finished_at: datetime | None,
    wake_at: datetime | None,
    event: str | None,
    key: str | None,
    result: Any,
    preview: str | None,
    error_type: str | None,
    error_message: str | None,
) -> dict[str, Any]:
    """One step as ``show`` lists it (``Job.steps``), from what ``steps.LIST_SHOWN`` answers.
    Both drivers build it here, so ``show --json`` prints the same keys on each."""

    def iso(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat().replace("+00:00", "Z")

    shown: dict[str, Any] = {
        "name": name,
        "position": seq,
        "state": state,
        "attempt": attempt,
        "started_at": iso(started_at),
        "finished_at": iso(finished_at),
        "result": preview + "…" if preview is not None else result,
        "result_trimmed": preview is not None,
        "error": None
        if error_type is None and error_message is None
        else {"type": error_type, "message": error_message},
    }
    if state in ("sleeping", "waiting") or wake_at is not None:
        shown["wake_at"] = iso(wake_at)
    if event is not None:
        shown["event"] = event
        shown["key"] = key
    return shown


@dataclass(frozen=True)
class ListFilter:
    """What ``list`` narrows by; None means any. ``state`` is the REPORTED state (a due delayed or
    suspended row is 'ready'). ``id_prefix`` is lowercase hex, dashes removed (1 to 32 digits);
    ``short_id`` an id's short form, 12 lowercase hex digits (``workhorse.ids.short_id``), looked up alone.
    ``name_part``: that name, or the last dotted part of a name (``send_receipt`` matches
    ``shop.jobs.send_receipt``). ``created_from`` is inclusive, ``created_to`` exclusive.

    The searches, ``payload`` (a JSON object the payload contains, as jsonb's ``@>``) and
    ``error`` (text the last error's type or message contains, case-insensitive), are read on a
    bounded walk: at most SEARCH_SCAN rows a page (``Page.scanned``)."""

    queue: str | None = None
    name: str | None = None
    name_part: str | None = None
    state: str | None = None
    tenant: str | None = None
    id_prefix: str | None = None
    short_id: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    payload: dict[str, Any] | None = None
    error: str | None = None

    @property
    def searches(self) -> bool:
        return self.payload is not None or self.error is not None


@dataclass(frozen=True)
class Page:
    """One page, newest first. ``next``: pass as ``after`` for older rows (None on the last page).
    ``prev``: pass as ``before`` for newer rows (None on the first page). ``scanned``: with a
    search, how many rows this page examined (at most SEARCH_SCAN; ``next`` then continues after
    the last one examined, whether or not it matched); None without one."""

    jobs: list[Job]
    next: str | None
    prev: str | None = None
    scanned: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jobs": [j.to_dict(with_steps=False) for j in self.jobs], "next": self.next}
        out["prev"] = self.prev
        if self.scanned is not None:
            out["scanned"] = self.scanned
        return out


BulkVerb = Literal["requeue", "remove", "promote", "cancel"]
MAX_BULK = 1_000  # rows one bulk call moves at most
ERRORS_KEPT = 10  # attempts' errors a job keeps (Job.errors)
# Which REPORTED states each bulk verb may be asked for.
BULK_STATES: dict[str, frozenset[str]] = {
    "requeue": FINISHED_STATES,
    "remove": frozenset(ALL_STATES) - {"running"},
    "promote": frozenset({"delayed", "ready"}),
    "cancel": LIVE_STATES | {"pending"},
}


@dataclass(frozen=True)
class BulkFilter:
    """The rows a bulk verb considers: one REPORTED state, optionally narrowed."""

    state: str
    queue: str | None = None
    name: str | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class BulkResult:
    """What a bulk verb answers. ``affected``: rows this call moved (with ``dry_run``: would move).
    ``remaining``: rows a further call could still move, so "call until zero" ends."""

    verb: str
    affected: int
    remaining: int
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"verb": self.verb, "affected": self.affected, "remaining": self.remaining, "dry_run": self.dry_run}


@dataclass(frozen=True)
class QueuePause:
    """A paused queue: the claim takes nothing from it until it is resumed."""

    queue: str
    paused_at: datetime
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "paused_at": self.paused_at.isoformat().replace("+00:00", "Z"),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class StateCount:
    """How many jobs of one (queue, name) are in one REPORTED state. ``oldest_run_at`` is the
    smallest run_at among them (for 'ready': how long the oldest due job has waited). A running
    job whose lease lapsed is counted apart, as ``state`` 'lapsed', and its ``oldest_run_at`` is
    the earliest lapse (the smallest lease_expires_at): how long the oldest has waited for rescue."""

    queue: str
    name: str
    state: str
    count: int
    oldest_run_at: datetime | None


@dataclass(frozen=True)
class CounterSum:
    """Attempt outcomes of one (queue, name), summed over counter buckets. ``completed``: done;
    ``retried``: failed and will run again; ``failed``: failed for good without a dead-letter queue;
    ``dead``: dead-lettered (a lease that lapsed on the final attempt included); ``lapsed``: a lease
    that lapsed and was taken back by a claim (its worker died or stalled)."""

    queue: str
    name: str
    completed: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    lapsed: int = 0


@dataclass(frozen=True)
class Snapshot:
    """What ``stats`` and the metrics endpoint read, in one driver call.

    ``states`` covers the live states and 'dead' and 'failed' (never 'done' or 'cancelled': those
    are history, counted by ``counters``). ``counters`` sums every bucket from ``since`` seconds
    ago (None: all time, every tier). ``workers``: live registry rows."""

    now: datetime
    states: list[StateCount]
    counters: list[CounterSum]
    paused: list[QueuePause]
    workers: int


PURGE_TARGETS: tuple[str, ...] = ("done", "cancelled", "failed", "dead", "events", "workers", "flow_starts", "counters")


@dataclass(frozen=True)
class PurgePolicy:
    """What a purge removes (``workhorse.retention`` builds it): per target, the age in seconds
    past which its rows go; a target not named is kept. ``batch``: rows per statement."""

    ages: dict[str, float]
    batch: int = 500


@dataclass(frozen=True)
class Purged:
    """What a purge removed (or, dry, would remove), per target; ``steps`` went with their jobs."""

    removed: dict[str, int]
    steps: int = 0
