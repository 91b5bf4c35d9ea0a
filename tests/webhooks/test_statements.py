"""Every named statement of ``webhooks/queries.py`` is parsed, planned and type-checked by the
server (PREPARE); each is also run by the delivery and CLI tests. Migration 014 runs twice harmlessly."""

from __future__ import annotations

import re

import psycopg
import pytest

import workhorse.webhooks.queries as sql
from workhorse import App
from workhorse._db.migrate import available

NAMES = sorted(name for name, value in vars(sql).items() if name.isupper() and not name.startswith("_"))


@pytest.mark.parametrize("name", NAMES)
def test_each_statement_prepares(name: str, database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    text = getattr(sql, name).replace("{schema}", schema)
    params: dict[str, int] = {}
    text = re.sub(r"%\((\w+)\)s", lambda m: f"${params.setdefault(m.group(1), len(params) + 1)}", text)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"prepare check_stmt as {text}")  # type: ignore[arg-type]
        conn.execute("deallocate check_stmt")


def test_the_migration_runs_again_harmlessly(database_url: str, schema: str) -> None:
    App(database_url, schema=schema).migrate_sync()
    [migration] = [m for m in available() if m.version == 14]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(migration.statement(schema))  # type: ignore[arg-type]
        assert conn.execute(f"select count(*) from {schema}.webhook_deliveries").fetchone() == (0,)  # type: ignore[arg-type]
