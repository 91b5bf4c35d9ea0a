"""The backfill refusals. Each answers "why is this sweep not running?" and sends the reader
somewhere different: run it, force it, change environment, migrate first, wait, fix the count, or
fix the name. Every ``fix`` is one line to run or one edit to make."""

from __future__ import annotations

from collections.abc import Sequence

from workhorse.drivers.refusals import POSTGRES_ONLY_FIX
from workhorse.errors import WorkhorseError


class BackfillError(WorkhorseError):
    """A backfill was refused, or a pass ended without completing (``code`` says which)."""

    code = "BACKFILL_ERROR"


def unknown(name: str, known: Sequence[str]) -> BackfillError:
    listed = ", ".join(sorted(known))
    return BackfillError(
        code="BACKFILL_UNKNOWN",
        cause=f"no backfill named {name!r} is declared"
        + (f" (declared: {listed})" if known else ", and this app declares none at all"),
        fix="workhorse backfill ls --json",
    )


def applied(name: str, pass_id: int, finished: object, environment: str) -> BackfillError:
    return BackfillError(
        code="BACKFILL_APPLIED",
        cause=f"backfill {name!r} completed in {environment} as pass {pass_id} at {finished}; a forced re-run "
        "writes a new ledger row and never edits that one",
        fix=f"workhorse backfill run {name} --write --force",
    )


def wrong_environment(name: str, environment: str, declared: Sequence[str]) -> BackfillError:
    return BackfillError(
        code="BACKFILL_ENVIRONMENT",
        cause=f"backfill {name!r} declares environments {', '.join(declared)} and this process runs in "
        f"{environment!r} (WORKHORSE_ENV, 'development' when unset); add {environment!r} to its environments "
        "if it should run here too",
        fix=f"WORKHORSE_ENV={declared[0]} workhorse backfill run {name}",
    )


def migration_pending(name: str, requires: str) -> BackfillError:
    return BackfillError(
        code="BACKFILL_MIGRATION_PENDING",
        cause=f"backfill {name!r} requires migration {requires}, which is not recorded as applied",
        fix="workhorse migrate" if requires.startswith("workhorse:") else "apply your app's migrations, then retry",
    )


def running(name: str, pass_id: int, job_id: str | None) -> BackfillError:
    return BackfillError(
        code="BACKFILL_RUNNING",
        cause=f"backfill {name!r} already has a live pass ({pass_id}, job {job_id}); one name holds one live "
        "pass at a time",
        fix=f"workhorse show {job_id}" if job_id else "workhorse backfill ls",
    )


def stalled(name: str, remaining: int, swept: int | None) -> BackfillError:
    rows = "its rows (not reported)" if swept is None else f"{swept:,} rows"
    return BackfillError(
        code="BACKFILL_STALLED",
        cause=f"backfill {name!r} swept {rows} and its function ended the sweep (returned None) while "
        f"its count still answers {remaining:,} rows: the sweep and the count select different rows",
        fix=f"make count= select exactly the rows the function of backfill {name!r} still has to change",
    )


def pending(names: Sequence[str], environment: str) -> BackfillError:
    first = names[0]
    return BackfillError(
        code="BACKFILL_PENDING",
        cause=f"{len(names)} declared backfill(s) have no completed pass in {environment}: {', '.join(names)}",
        fix=f"workhorse backfill run {first} --write --wait",
    )


def failed(name: str, pass_id: int, status: str, error: str | None) -> BackfillError:
    return BackfillError(
        code="BACKFILL_FAILED",
        cause=f"backfill {name!r} pass {pass_id} ended {status}: {error or 'no error recorded'}",
        fix="workhorse backfill ls   # its job's errors: workhorse show JOB_ID",
    )


def postgres_only() -> BackfillError:
    """``POSTGRES_ONLY``, the memory driver's one refusal (it was ``BACKFILL_POSTGRES_ONLY``)."""
    return BackfillError(
        code="POSTGRES_ONLY",
        cause="backfills run on PostgreSQL only (your SQL, on a psycopg connection to the app's database); this app "
        "uses the memory driver, a test double",
        fix=f"call the backfill function with your own connection, or {POSTGRES_ONLY_FIX}",
    )


def cursor_invalid(name: str, value: object) -> BackfillError:
    return BackfillError(
        code="BACKFILL_CURSOR_INVALID",
        cause=f"backfill {name!r} returned a cursor that is not JSON ({type(value).__name__}: {value!r:.80}); "
        "the cursor is checkpointed in the ledger as JSON",
        fix="return an int, str, list or dict (e.g. the last id the batch changed), or Batch(cursor, rows=n)",
    )


def batch_failed(name: str, batch: int, error: Exception) -> BackfillError:
    return BackfillError(
        code="BACKFILL_BATCH_FAILED",
        cause=f"batch {batch} of backfill {name!r}'s dry run raised {type(error).__name__}: {error} "
        "(it was rolled back, like every dry-run batch)",
        fix=f"fix the function of backfill {name!r}, then: workhorse backfill run {name}",
    )
