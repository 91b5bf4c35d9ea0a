"""What a backfill declares: its function, its options, its checksum; and the environment.

``@app.backfill(name, *, tenant, batch_size, environments, requires, count)`` over
``async def fn(conn, cursor, limit)``. The declarations of an app are kept here, by app, so
``app.py`` holds no state of ours.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import textwrap
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workhorse.backfill.errors import cursor_invalid
from workhorse.durations import Duration, to_seconds
from workhorse.errors import ConfigurationError

ENV_VAR = "WORKHORSE_ENV"
DEFAULT_ENVIRONMENT = "development"
JOB_NAME = "workhorse.backfill"  # the built-in job a pass runs as
MAX_BATCH_SIZE = 100_000
STATUSES = ("running", "completed", "failed", "stalled")

BackfillFn = Callable[[Any, Any, int], Awaitable[Any]]
CountFn = Callable[[Any], Awaitable[int]]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_OURS = re.compile(r"^workhorse:(\d{1,4})$")


def environment() -> str:
    """The environment this process runs in: ``WORKHORSE_ENV``, ``development`` when unset or empty."""
    return os.environ.get(ENV_VAR, "").strip() or DEFAULT_ENVIRONMENT


@dataclass(frozen=True)
class Batch:
    """What a backfill's function may return instead of a bare cursor: the next cursor (None: the
    sweep is finished) and how many rows this batch changed, as the function counts them (e.g. the
    ``rowcount`` of its UPDATE). For a bare cursor the pass counts the rows the batch's transaction
    wrote in your tables (inserted, updated or deleted; ``pg_stat_xact_user_tables``), or, where the
    server keeps no counts, records them as not reported. The ledger's ``rows`` is the sum;
    ``batches`` counts every committed batch either way."""

    cursor: Any
    rows: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 0:
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"Batch(rows=...) expected a whole number >= 0, got {self.rows!r}",
                fix="return Batch(last_id, rows=cur.rowcount)",
            )


@dataclass(frozen=True, init=False)
class AppMigration:
    """A migration of the app's own, as a row its migration tool records: ``requires=`` is met when
    ``table`` has a row with these column values. ``AppMigration.django("shop", "0042_slug")`` reads
    ``django_migrations``; ``AppMigration.alembic("ae10...")`` reads ``alembic_version``, which holds
    only the current head (so a later revision no longer matches: name the head you deploy with)."""

    table: str
    match: tuple[tuple[str, str], ...]

    def __init__(self, table: str, **match: str) -> None:
        parts = table.split(".") if isinstance(table, str) else []
        if not 1 <= len(parts) <= 2 or not all(_IDENTIFIER.match(p) for p in parts):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"AppMigration table expected a table name or schema.table, got {table!r}",
                fix="AppMigration('django_migrations', app='shop', name='0042_slug')",
            )
        if not match or not all(_IDENTIFIER.match(c) and isinstance(v, str) for c, v in match.items()):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"AppMigration({table!r}) expected column=value pairs of strings, got {match!r}",
                fix="AppMigration('schema_migrations', version='20261201120000')",
            )
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "match", tuple(sorted(match.items())))

    @classmethod
    def django(cls, app_label: str, name: str) -> AppMigration:
        return cls("django_migrations", app=app_label, name=name)

    @classmethod
    def alembic(cls, revision: str) -> AppMigration:
        return cls("alembic_version", version_num=revision)

    def __str__(self) -> str:
        return f"{self.table}({', '.join(f'{c}={v}' for c, v in self.match)})"


Requires = str | AppMigration


def _check_requires(name: str, requires: Any) -> Requires | None:
    if requires is None or isinstance(requires, AppMigration):
        return requires
    if isinstance(requires, str) and _OURS.match(requires):
        return requires
    raise ConfigurationError(
        code="BACKFILL_INVALID",
        cause=f"backfill {name!r}: requires expected 'workhorse:N' (a migration of workhorse's schema), an "
        f"AppMigration (one of your app's), or None; got {requires!r}",
        fix="requires=AppMigration.django('shop', '0042_add_slug')   # or requires='workhorse:13'",
    )


def our_migration(requires: str) -> int:
    match = _OURS.match(requires)
    assert match is not None
    return int(match.group(1))


def _source(fn: Callable[..., Any] | None) -> str:
    if fn is None:
        return ""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):  # no source file (a REPL, a C function): its code object instead
        code = getattr(fn, "__code__", None)
        return code.co_code.hex() if code is not None else repr(fn)


class Backfill:
    """One declared backfill. ``checksum`` covers its name, its options and the source of its
    function and of its count: a pass records it, and a pass whose declaration changed since says so."""

    def __init__(
        self,
        fn: BackfillFn,
        *,
        name: str,
        tenant: str,
        batch_size: int,
        environments: Sequence[str] | None,
        requires: Any,
        count: CountFn | None,
        pause: Duration | None,
        rows_per_second: float | None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill name expected 1 to 200 letters, digits or _.:- (a letter or digit first), "
                f"got {name!r}",
                fix="@app.backfill('fill-slugs', tenant='none')",
            )
        if not inspect.iscoroutinefunction(fn):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill {name!r}: its function must be an async def fn(conn, cursor, limit)",
                fix="async def fill_slugs(conn, cursor, limit): ...",
            )
        if tenant != "none":
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill {name!r}: tenant expected 'none', got {tenant!r}; a pass sweeps its rows across "
                "tenants as the built-in job workhorse.backfill, which belongs to no tenant (required, so the "
                "declaration says so)",
                fix=f"@app.backfill({name!r}, tenant='none')",
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill {name!r}: batch_size expected a whole number from 1 to {MAX_BATCH_SIZE:,}, "
                f"got {batch_size!r}",
                fix=f"@app.backfill({name!r}, tenant='none', batch_size=500)",
            )
        if environments is not None:
            if isinstance(environments, str) or not all(isinstance(e, str) and e for e in environments):
                raise ConfigurationError(
                    code="BACKFILL_INVALID",
                    cause=f"backfill {name!r}: environments expected a tuple of names (or None: every "
                    f"environment), got {environments!r}",
                    fix=f"@app.backfill({name!r}, tenant='none', environments=('production', 'staging'))",
                )
            environments = tuple(environments) or None  # empty: every environment
        if count is not None and not inspect.iscoroutinefunction(count):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill {name!r}: count must be an async def count(conn) -> int",
                fix="async def count_missing(conn): ...   # the rows the function has still to change",
            )
        if rows_per_second is not None and (
            isinstance(rows_per_second, bool)
            or not isinstance(rows_per_second, int | float)
            or not 0 < rows_per_second < float("inf")
        ):
            raise ConfigurationError(
                code="BACKFILL_INVALID",
                cause=f"backfill {name!r}: rows_per_second expected a positive number, got {rows_per_second!r}",
                fix=f"@app.backfill({name!r}, tenant='none', rows_per_second=5000)",
            )
        self.fn = fn
        self.name = name
        self.tenant = tenant
        self.batch_size = batch_size
        self.environments: tuple[str, ...] | None = environments
        self.requires = _check_requires(name, requires)
        self.count = count
        self.pause = 0.0 if pause is None else to_seconds(pause, what=f"backfill {name!r} pause")
        self.rows_per_second = None if rows_per_second is None else float(rows_per_second)
        self.checksum = self._checksum()

    def options(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "batch_size": self.batch_size,
            "environments": None if self.environments is None else list(self.environments),
            "requires": None if self.requires is None else str(self.requires),
            "count": self.count is not None,
            "pause": self.pause,
            "rows_per_second": self.rows_per_second,
        }

    def _checksum(self) -> str:
        document = {"name": self.name, **self.options(), "fn": _source(self.fn), "count_fn": _source(self.count)}
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]

    def allowed_in(self, env: str) -> bool:
        return self.environments is None or env in self.environments

    def step(self, result: Any) -> tuple[Any, int | None]:
        """What one call of the function answered: (next cursor or None, rows it reports; None for
        a bare cursor, which reports none)."""
        cursor, rows = (result.cursor, result.rows) if isinstance(result, Batch) else (result, None)
        if cursor is not None:
            try:
                json.dumps(cursor, allow_nan=False)
            except (TypeError, ValueError):
                raise cursor_invalid(self.name, cursor) from None
        return cursor, rows


_REGISTRIES: weakref.WeakKeyDictionary[object, dict[str, Backfill]] = weakref.WeakKeyDictionary()


def registry(app: object) -> dict[str, Backfill]:
    """The backfills declared on ``app``, by name (a new dict the first time)."""
    found = _REGISTRIES.get(app)
    if found is None:
        found = _REGISTRIES[app] = {}
    return found
