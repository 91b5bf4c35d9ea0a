"""Backfills: batched data migrations declared in code, resumable, gated, ledgered.

::

    @app.backfill("fill-slugs", tenant="none", batch_size=500,
                  environments=("production", "staging"), requires=None, count=count_missing)
    async def fill_slugs(conn, cursor, limit):     # conn: psycopg AsyncConnection, in a transaction
        ...                                         # change up to `limit` rows after `cursor`
        return Batch(last_id, rows=n)               # or a bare cursor; None when the sweep is done

The modules: ``declaration`` (Backfill, Batch, AppMigration, the checksum, ``WORKHORSE_ENV``),
``errors`` (the refusals), ``passes`` (the pass job, its batches, the dry run), ``api`` (start,
dry_run, status, check_pending). The ledger's SQL is ``backfill/queries.py``, run by
``backfill/postgres.py``. PostgreSQL only: on the memory driver every call but the
declaration is refused (``POSTGRES_ONLY``).
"""

from workhorse.backfill.api import (
    BackfillStatus,
    PassStarted,
    check_pending,
    declare,
    dry_run,
    lookup,
    read_pass,
    start,
    status,
)
from workhorse.backfill.declaration import (
    DEFAULT_ENVIRONMENT,
    ENV_VAR,
    JOB_NAME,
    AppMigration,
    Backfill,
    Batch,
    environment,
    registry,
)
from workhorse.backfill.errors import BackfillError
from workhorse.backfill.passes import DryRun

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "ENV_VAR",
    "JOB_NAME",
    "AppMigration",
    "Backfill",
    "BackfillError",
    "BackfillStatus",
    "Batch",
    "DryRun",
    "PassStarted",
    "check_pending",
    "declare",
    "dry_run",
    "environment",
    "lookup",
    "read_pass",
    "registry",
    "start",
    "status",
]
