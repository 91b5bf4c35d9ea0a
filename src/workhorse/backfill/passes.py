"""A pass: the built-in job ``workhorse.backfill`` that applies a declared backfill batch by batch.

Each batch is one transaction on the pass's own connection to the app's database:

1. lock the pass's ledger row (``FOR UPDATE``) and read the cursor committed there;
2. call ``fn(conn, cursor, limit)``, which changes up to ``limit`` rows after ``cursor``;
3. write the cursor it answered, the rows it reported (for a bare cursor: the rows the transaction
   wrote, as the server counts them) and one more batch to the same row; when it
   answered ``None`` (the sweep is over) also ask ``count`` and end the row ``completed``, or
   ``stalled`` while the count still answers rows;
4. commit: the batch's writes and its checkpoint become durable together, or neither does.

So a worker killed anywhere in a batch leaves the batch wholly unapplied and the cursor where the
last commit put it; the next claim of the job resumes from there. Two runners of one pass (a worker
frozen past its lease, and the one that claimed the job after it) queue on the row lock and each
reads the cursor the other committed: no batch is applied twice, none is skipped.

Between batches the pass reports ``ctx.progress``, hands itself back when its worker drains
(``ctx.hand_back()``: ready again, attempt unspent), and waits out ``pause`` / ``rows_per_second``.
An operator's cancel or a lapsed lease cancels the body at its next await; an unfinished batch
rolls back with its connection.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from workhorse.backfill.declaration import JOB_NAME, Backfill, environment, our_migration, registry
from workhorse.backfill.errors import (
    BackfillError,
    batch_failed,
    migration_pending,
    stalled,
    unknown,
    wrong_environment,
)
from workhorse.backfill.postgres import PassLedger, open_ledger
from workhorse.context import HandBack, JobContext
from workhorse.errors import TerminalError
from workhorse.retry import Retry

PACE_SLICE = 0.2  # seconds: a pause between batches is slept in slices, each ending with a drain check
PASS_RETRY = Retry(attempts=5, base="5s")


class BackfillApp(Protocol):
    """What a pass needs of an ``App``."""

    @property
    def database_url(self) -> str: ...

    schema: str

    @property
    def is_memory(self) -> bool: ...


@dataclass
class BatchResult:
    """One batch as applied (or, in a dry run, as it would be)."""

    rows: int | None  # None: not reported and not counted (the server keeps no counts)
    cursor: Any
    status: str  # running (more to do), completed, stalled; "ended" when the row was no longer running
    remaining: int | None = None
    total_rows: int | None = 0  # None once a batch's rows were unknown
    batches: int = 0


@dataclass
class DryRun:
    """What ``workhorse backfill run NAME`` (no ``--write``) saw: batches run and rolled back."""

    name: str
    environment: str
    batches: list[dict[str, Any]] = field(default_factory=list)
    rows: int | None = 0  # None once a batch's rows were unknown
    finished: bool = False  # the function ended the sweep within the batches tried
    stopped: str | None = None  # why it stopped before the sweep's end
    remaining: int | None = None  # what count answered before the first batch

    def to_dict(self) -> dict[str, Any]:
        return {
            "backfill": self.name,
            "dry_run": True,
            "environment": self.environment,
            "batches": self.batches,
            "rows": self.rows,
            "finished": self.finished,
            "stopped": self.stopped,
            "count": self.remaining,
            "written": False,
        }


async def check_gates(ledger: PassLedger, backfill: Backfill, env: str) -> None:
    """The environment, then ``requires``: raise the refusal that applies, else return."""
    if not backfill.allowed_in(env):
        assert backfill.environments is not None
        raise wrong_environment(backfill.name, env, backfill.environments)
    requires = backfill.requires
    if requires is None:
        return
    if isinstance(requires, str):
        done = await ledger.our_migration_applied(our_migration(requires))
    else:
        done = await ledger.app_migration_applied(requires.table, requires.match)
    if not done:
        raise migration_pending(backfill.name, str(requires))


async def apply_batch(ledger: PassLedger, backfill: Backfill, pass_id: int) -> BatchResult:
    """One batch of a pass, in one transaction with its checkpoint (see the module's docstring)."""
    async with ledger.transaction():
        row = await ledger.lock_pass(pass_id)
        if row is None or row["status"] != "running":
            return BatchResult(0, None, "ended")
        before = await ledger.rows_written()
        cursor, rows = backfill.step(await backfill.fn(ledger.conn, row["cursor"], backfill.batch_size))
        if rows is None:  # a bare cursor: what the function wrote in the batch's transaction
            rows = await _written_since(ledger, before)
        total = None if row["rows"] is None or rows is None else int(row["rows"]) + rows
        batches = int(row["batches"]) + 1
        status, remaining, error = "running", None, None
        if cursor is None:
            remaining = int(await backfill.count(ledger.conn)) if backfill.count is not None else 0
            status = "stalled" if remaining > 0 else "completed"
            if remaining > 0:
                error = str(stalled(backfill.name, remaining, total))
        await ledger.checkpoint(pass_id, cursor=cursor, rows=rows, status=status, remaining=remaining, error=error)
    return BatchResult(rows, cursor, status, remaining, total, batches)


async def _written_since(ledger: PassLedger, before: int | None) -> int | None:
    """Rows the batch's transaction wrote since ``before`` was read (None: the server counts none)."""
    after = await ledger.rows_written()
    return None if before is None or after is None else after - before


async def dry_run(app: BackfillApp, backfill: Backfill, *, batches: int) -> DryRun:
    """Up to ``batches`` batches from the start, each in a transaction that is rolled back. The
    ledger is read by nobody and written by nobody. A function whose cursor does not move would see
    the same rows again (its last batch was undone), so the dry run stops there and says so."""
    env = environment()
    report = DryRun(backfill.name, env)
    async with open_ledger(app.database_url, app.schema) as ledger:
        await check_gates(ledger, backfill, env)
        if backfill.count is not None:
            async with ledger.transaction(rollback=True):
                report.remaining = int(await backfill.count(ledger.conn))
        cursor: Any = None
        for n in range(1, batches + 1):
            try:
                async with ledger.transaction(rollback=True):
                    before = await ledger.rows_written()
                    started = time.monotonic()
                    next_cursor, rows = backfill.step(await backfill.fn(ledger.conn, cursor, backfill.batch_size))
                    took = time.monotonic() - started
                    if rows is None:  # a bare cursor: what the (rolled back) batch wrote
                        rows = await _written_since(ledger, before)
            except BackfillError:
                raise
            except Exception as error:
                raise batch_failed(backfill.name, n, error) from error
            report.batches.append({"batch": n, "rows": rows, "cursor": next_cursor, "seconds": round(took, 4)})
            report.rows = None if report.rows is None or rows is None else report.rows + rows
            if next_cursor is None:
                report.finished = True
                break
            if next_cursor == cursor:
                report.stopped = "the function answered the cursor it was given: with its batch rolled back it "
                "would see the same rows again"
                break
            cursor = next_cursor
        else:
            report.stopped = f"stopped after {batches} batches (--batches)"
    return report


async def _pace(ctx: JobContext, backfill: Backfill, rows: int | None, took: float) -> None:
    wait = backfill.pause
    if backfill.rows_per_second is not None:  # rows unknown: paced as a full batch
        wait = max(wait, (backfill.batch_size if rows is None else rows) / backfill.rows_per_second - took)
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        if ctx.draining:
            ctx.hand_back()
        await asyncio.sleep(min(left, PACE_SLICE))


def _progress(ctx: JobContext, done: int | None, total: int | None, batches: int) -> None:
    if done is None:  # never a false 0: the server keeps no counts, and the function reports none
        ctx.progress(0.0, f"{batches:,} batches (rows: not reported)")
        return
    message = f"{done:,} rows in {batches:,} batches"
    if total is None:
        ctx.progress(0.0, message + " (no count declared: total unknown)")
    else:
        ctx.progress((done, max(total, done, 1)), message)


async def run_pass(app: BackfillApp, ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The body of ``workhorse.backfill``: payload ``{"backfill": name, "pass": ledger row id}``."""
    name, pass_id = str(payload["backfill"]), int(payload["pass"])
    found = registry(app).get(name)
    async with open_ledger(app.database_url, app.schema) as ledger:
        if found is None:  # a worker running older code than the one that started the pass
            error = unknown(name, list(registry(app)))
            if ctx.is_final_attempt:
                await ledger.fail(pass_id, str(error))
            raise error
        backfill = found
        try:  # the gates admitted the pass at its start; a deploy since (a new Alembic head, a worker
            await check_gates(ledger, backfill, environment())  # of another WORKHORSE_ENV) must not
        except BackfillError as refusal:  # fail it halfway: say so, and go on from the cursor
            ctx.logger.warning("backfill %s pass %d resumes though its gates now refuse: %s", name, pass_id, refusal)
        await ledger.ran_as(pass_id, backfill.checksum)
        state = await ledger.read(pass_id)
        if state is None or state["status"] != "running":
            return _summary(name, pass_id, state)
        if state["checksum"] != backfill.checksum:
            ctx.logger.warning(
                "backfill %s pass %d: its declaration changed since the pass began (checksum %s, now %s)",
                name, pass_id, state["checksum"], backfill.checksum,
            )  # fmt: skip
        done = None if state["rows"] is None else int(state["rows"])
        batches = int(state["batches"])
        total = None
        try:
            if backfill.count is not None:
                async with ledger.transaction():
                    total = (done or 0) + int(await backfill.count(ledger.conn))
            _progress(ctx, done, total, batches)
            while True:
                started = time.monotonic()
                result = await apply_batch(ledger, backfill, pass_id)
                if result.status == "ended":
                    break
                done, batches = result.total_rows, result.batches
                _progress(ctx, done, total, batches)
                if result.status == "stalled":
                    assert result.remaining is not None
                    raise TerminalError(str(stalled(name, result.remaining, done)))
                if result.status == "completed":
                    break
                if ctx.draining:
                    ctx.hand_back()
                await _pace(ctx, backfill, result.rows, time.monotonic() - started)
        except (TerminalError, HandBack, asyncio.CancelledError):
            raise
        except BackfillError as error:  # the function answered what no retry changes (a cursor not JSON)
            await ledger.fail(pass_id, str(error))
            raise TerminalError(str(error)) from error
        except Exception as error:
            if ctx.is_final_attempt and not ctx.draining and not ctx.cancelled:
                await ledger.fail(pass_id, f"{type(error).__name__}: {error}")
            raise
        return _summary(name, pass_id, await ledger.read(pass_id))


def _summary(name: str, pass_id: int, state: dict[str, Any] | None) -> dict[str, Any]:
    if state is None:
        return {"backfill": name, "pass": pass_id, "status": "missing"}
    return {
        "backfill": name,
        "pass": pass_id,
        "status": state["status"],
        "rows": None if state["rows"] is None else int(state["rows"]),
        "batches": int(state["batches"]),
    }


def declare_pass_job(app: Any) -> None:
    """Register ``workhorse.backfill`` on ``app`` (once): a pass runs on the app's normal workers."""
    if JOB_NAME in app.jobs:
        return

    async def workhorse_backfill(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        return await run_pass(app, ctx, payload)

    app.job(name=JOB_NAME, tenant="none", retry=PASS_RETRY)(workhorse_backfill)
