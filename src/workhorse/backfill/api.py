"""The library's face of backfills: declare, start a pass, dry-run, list, the deploy gate.

``start`` writes the pass's ledger row and enqueues its job in one transaction, under a lock on
the backfill's name: two starts of one name serialise, and the second finds the first live
(``BACKFILL_RUNNING``). A running row whose job is no longer live (cancelled, dead, removed) is
ended ``failed`` there, so the name is free again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workhorse.backfill.declaration import (
    JOB_NAME,
    Backfill,
    BackfillFn,
    CountFn,
    environment,
    registry,
)
from workhorse.backfill.errors import applied, pending, postgres_only, running, unknown
from workhorse.backfill.passes import BackfillApp, DryRun, check_gates, declare_pass_job
from workhorse.backfill.passes import dry_run as _dry_run
from workhorse.backfill.postgres import open_ledger
from workhorse.durations import Duration
from workhorse.errors import ConfigurationError

LIVE_STATES = ("ready", "delayed", "running", "suspended")
DRY_RUN_BATCHES = 10


def declare(
    app: Any,
    name: str,
    fn: BackfillFn,
    *,
    tenant: str,
    batch_size: int,
    environments: Sequence[str] | None,
    requires: Any,
    count: CountFn | None,
    pause: Duration | None,
    rows_per_second: float | None,
) -> Backfill:
    backfill = Backfill(
        fn,
        name=name,
        tenant=tenant,
        batch_size=batch_size,
        environments=environments,
        requires=requires,
        count=count,
        pause=pause,
        rows_per_second=rows_per_second,
    )
    declared = registry(app)
    existing = declared.get(name)
    if existing is not None and existing.fn is not fn:
        raise ConfigurationError(
            code="BACKFILL_INVALID",
            cause=f"two backfills are declared under the name {name!r}",
            fix="give each backfill its own name",
        )
    declare_pass_job(app)
    declared[name] = backfill
    return backfill


def lookup(app: Any, name: str) -> Backfill:
    found = registry(app).get(name)
    if found is None:
        raise unknown(name, list(registry(app)))
    return found


@dataclass(frozen=True)
class PassStarted:
    backfill: str
    pass_id: int
    job_id: str
    forced: bool
    checksum: str
    environment: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "backfill": self.backfill,
            "pass": self.pass_id,
            "job_id": self.job_id,
            "forced": self.forced,
            "checksum": self.checksum,
            "environment": self.environment,
        }


def _postgres(app: BackfillApp) -> None:
    if app.is_memory:
        raise postgres_only()


async def start(app: Any, name: str, *, force: bool = False) -> PassStarted:
    """Start a pass of ``name`` as a job on the workers. Refusals: ``BACKFILL_UNKNOWN``,
    ``BACKFILL_ENVIRONMENT``, ``BACKFILL_MIGRATION_PENDING``, ``BACKFILL_RUNNING``,
    ``BACKFILL_APPLIED`` (unless ``force``: a new ledger row)."""
    _postgres(app)
    backfill = lookup(app, name)
    env = environment()
    handle = app.jobs[JOB_NAME]
    async with open_ledger(app.database_url, app.schema) as ledger:
        await check_gates(ledger, backfill, env)
        async with ledger.transaction():
            await ledger.lock_name(name)
            live = await ledger.running(name)
            if live is not None:
                if live["job_state"] in LIVE_STATES:
                    raise running(name, int(live["id"]), live["job_id"])
                await ledger.fail(
                    int(live["id"]), f"its job ended {live['job_state'] or 'removed'} before the pass finished"
                )
            if not force:
                done = await ledger.completed(name, env)
                if done is not None:
                    raise applied(name, int(done["id"]), done["finished_at"], env)
            pass_id = await ledger.insert(name, backfill.checksum, env, force)
            ref = await handle.enqueue({"backfill": name, "pass": pass_id}, conn=ledger.conn)
            await ledger.set_job(pass_id, ref.id)
    return PassStarted(name, pass_id, ref.id, force, backfill.checksum, env)


async def dry_run(app: Any, name: str, *, batches: int = DRY_RUN_BATCHES) -> DryRun:
    """Run up to ``batches`` batches of ``name`` in transactions that are rolled back; write nothing."""
    _postgres(app)
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ConfigurationError(
            code="BACKFILL_INVALID",
            cause=f"a dry run's batches expected a whole number >= 1, got {batches!r}",
            fix=f"workhorse backfill run {name} --batches 10",
        )
    return await _dry_run(app, lookup(app, name), batches=batches)


@dataclass(frozen=True)
class BackfillStatus:
    """One declared backfill and its newest pass, as ``workhorse backfill ls`` shows it."""

    backfill: Backfill
    environment: str
    latest: dict[str, Any] | None  # the newest ledger row (any environment), with its job's state
    completed: bool  # a completed pass exists in this environment

    @property
    def applies_here(self) -> bool:
        return self.backfill.allowed_in(self.environment)

    @property
    def pending(self) -> bool:
        return self.applies_here and not self.completed

    @property
    def changed(self) -> bool:
        """The declaration's checksum differs from the one its newest pass ran under."""
        return self.latest is not None and self.latest["checksum"] != self.backfill.checksum

    def to_dict(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "name": self.backfill.name,
            "checksum": self.backfill.checksum,
            "options": self.backfill.options(),
            "applies_here": self.applies_here,
            "completed": self.completed,
            "pending": self.pending,
            "changed": self.changed,
            "latest": None if latest is None else _pass_document(latest),
        }


def _pass_document(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "status", "environment", "checksum", "ran_as", "forced", "job_id", "job_state", "cursor")
    document = {key: row.get(key) for key in keys}
    document.update(
        rows=None if row["rows"] is None else int(row["rows"]),  # None: not reported (migration 018)
        batches=int(row["batches"]),
        remaining=row["remaining"],
        error=row["error"],
        progress=row.get("progress"),
        started_at=row["started_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
    )
    return document


async def status(app: Any) -> list[BackfillStatus]:
    """Every declared backfill with its newest pass, by name."""
    _postgres(app)
    declared = registry(app)
    names = sorted(declared)
    env = environment()
    if not names:
        return []
    async with open_ledger(app.database_url, app.schema) as ledger:
        latest = await ledger.latest(names)
        done = await ledger.completed_names(names, env)
    return [BackfillStatus(declared[n], env, latest.get(n), n in done) for n in names]


async def check_pending(app: Any) -> list[BackfillStatus]:
    """The deploy gate: raise ``BACKFILL_PENDING`` while a backfill declared for this environment has
    no completed pass in it; else answer every status."""
    found = await status(app)
    waiting = [s.backfill.name for s in found if s.pending]
    if waiting:
        raise pending(waiting, environment())
    return found


async def read_pass(app: Any, pass_id: int) -> dict[str, Any] | None:
    """One ledger row by id (with its job's state and progress), as a JSON-ready document."""
    _postgres(app)
    async with open_ledger(app.database_url, app.schema) as ledger:
        row = await ledger.read(pass_id)
    return None if row is None else {"backfill": row["name"], **_pass_document(row)}
