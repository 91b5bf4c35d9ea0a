"""Backfills: batched data migrations declared in code, resumable, gated, ledgered.
Modules: ``declaration``, ``errors``, ``passes`` (the pass job), ``api``, ``queries`` and
``postgres`` (the ledger). PostgreSQL only (``POSTGRES_ONLY`` on the memory driver).

Design: docs/guides/backfills.md
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
