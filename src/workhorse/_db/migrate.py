"""Ordered, forward-only migrations: ``migrations/NNN_name.sql``, recorded in ``{schema}.migrations``.

Design: docs/reference/schema.md
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, LiteralString

import psycopg

from workhorse._db.queries import migrations as sql
from workhorse.errors import SchemaError

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    def statement(self, schema: str) -> LiteralString:
        return self.text.replace("{schema}", schema)


def available(folder_name: str = "migrations") -> list[Migration]:
    """The numbered files of ``_db/<folder_name>/`` in order: the queue's schema, or (with
    ``"outbox_migrations"``) the staging table a source database gets (``workhorse.outbox``)."""
    folder = resources.files("workhorse._db").joinpath(folder_name)
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def latest_version() -> int:
    return max((m.version for m in available()), default=0)


def _q(statement: str, schema: str) -> LiteralString:
    return statement.replace("{schema}", schema)


def script(schema: str) -> str:
    """Every migration as one SQL script, for a DBA who applies schema changes by hand."""
    parts = [_q(sql.CREATE_SCHEMA, schema) + ";", _q(sql.CREATE_LEDGER, schema).strip() + ";"]
    for m in available():
        parts.append(f"-- {m.version:03d}_{m.name}\n{m.statement(schema).strip()}")
        parts.append(sql.RECORD_LITERAL.format(schema=schema, version=m.version, name=m.name))
    return "\n\n".join(parts) + "\n"


async def apply(conn: psycopg.AsyncConnection[Any], schema: str) -> list[int]:
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(sql.LOCK, {"schema": schema})
        await conn.execute(_q(sql.CREATE_SCHEMA, schema))
        await conn.execute(_q(sql.CREATE_LEDGER, schema))
        cur = await conn.execute(_q(sql.APPLIED, schema))
        done = {row[0] if isinstance(row, tuple) else row["version"] for row in await cur.fetchall()}
        newest_known = latest_version()
        if done and max(done) > newest_known:
            raise _too_new(schema, max(done), newest_known)
        for m in available():
            if m.version in done:
                continue
            await conn.execute(m.statement(schema))
            await conn.execute(_q(sql.RECORD, schema), {"version": m.version, "name": m.name})
            applied_now.append(m.version)
    return applied_now


async def check(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    cur = await conn.execute(sql.LEDGER_EXISTS, {"ledger": f"{schema}.migrations"})
    row = await cur.fetchone()
    present = row[0] if isinstance(row, tuple) else (row or {}).get("present")
    newest_known = latest_version()
    if not present:
        raise SchemaError(
            cause=f"schema {schema!r} has no workhorse tables in this database",
            fix="workhorse migrate   # or: await app.migrate()",
        )
    cur = await conn.execute(_q(sql.CURRENT_VERSION, schema))
    row = await cur.fetchone()
    version = int(row[0] if isinstance(row, tuple) else (row or {}).get("version", 0))
    if version > newest_known:
        raise _too_new(schema, version, newest_known)
    if version < newest_known:
        raise SchemaError(
            code="SCHEMA_BEHIND",
            cause=f"schema {schema!r} is at version {version}; this code needs {newest_known}",
            fix="workhorse migrate   # applies the pending migrations",
        )


def _too_new(schema: str, found: int, known: int) -> SchemaError:
    return SchemaError(
        code="SCHEMA_TOO_NEW",
        cause=f"schema {schema!r} is at version {found}, newer than this code knows ({known}): "
        "a newer workhorse migrated it",
        fix="deploy the newer workhorse version here too (pip install -U workhorse)",
    )
