"""Migrated schemas made once per test session and reused (``SchemaPool``), and an App on one
(``pooled_app``): the fixtures of ``tests/conftest.py`` and ``tests/contract/conftest.py``."""

from __future__ import annotations

import asyncio
import uuid

import psycopg

from workhorse import App

_SHAPE = """
select (select count(*) from pg_class where relnamespace = %(schema)s::regnamespace)
     + (select count(*) from pg_proc where pronamespace = %(schema)s::regnamespace) * 1000,
       (select max(version) from {schema}.migrations)
"""
_FOREIGN_KEYS = """
select child.relname, parent.relname
from pg_constraint c
join pg_class child on child.oid = c.conrelid
join pg_class parent on parent.oid = c.confrelid
where c.contype = 'f' and c.connamespace = %(schema)s::regnamespace
"""
_TABLES = "select tablename from pg_tables where schemaname = %(schema)s and tablename <> 'migrations'"
_SEQUENCES = "select sequencename from pg_sequences where schemaname = %(schema)s"


class SchemaPool:
    """Migrated schemas for this session: ``take`` one (migrating a new one when none is free),
    ``give_back`` it emptied, ``close`` drops them all."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.free: list[str] = []
        self.made: set[str] = set()
        self.shape: tuple[int, int] | None = None
        self.empty: str | None = None  # the statements that empty a schema, in foreign-key order

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = f"t_{uuid.uuid4().hex[:12]}"
        App(self.url, schema=name).migrate_sync()
        self.made.add(name)
        with psycopg.connect(self.url, autocommit=True) as conn:
            if self.empty is None:
                self.empty = _emptying(conn, name)
            if self.shape is None:
                self.shape = _shape(conn, name)
        return name

    def give_back(self, name: str) -> None:
        assert self.empty is not None
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                if _shape(conn, name) != self.shape:
                    raise LookupError(f"the test changed the shape of schema {name}")
                with conn.transaction():
                    conn.execute("set local lock_timeout = '2s'")
                    conn.execute(self.empty.replace("{schema}", name))  # type: ignore[arg-type]
        except (psycopg.Error, LookupError):
            self.drop(name)
            return
        self.free.append(name)

    def drop(self, name: str) -> None:
        self.made.discard(name)
        _drop(self.url, name)

    def close(self) -> None:
        for name in list(self.made):
            self.drop(name)


def _shape(conn: psycopg.Connection[tuple[object, ...]], name: str) -> tuple[int, int]:
    row = conn.execute(_SHAPE.replace("{schema}", name), {"schema": name}).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0]), int(row[1])  # type: ignore[call-overload]


def _emptying(conn: psycopg.Connection[tuple[object, ...]], name: str) -> str:
    """One script that deletes every row (children before their parents) and restarts every sequence."""
    tables = {str(row[0]) for row in conn.execute(_TABLES, {"schema": name})}
    parents = [(str(child), str(parent)) for child, parent in conn.execute(_FOREIGN_KEYS, {"schema": name})]
    ordered: list[str] = []
    while tables:
        leaves = sorted(t for t in tables if not any(p == t and c in tables and c != t for c, p in parents))
        ordered += leaves
        tables -= set(leaves)
    sequences = [str(row[0]) for row in conn.execute(_SEQUENCES, {"schema": name})]
    script = [f"delete from {{schema}}.{table};" for table in ordered]
    script += [f"alter sequence {{schema}}.{sequence} restart;" for sequence in sequences]
    return "\n".join(script)


class pooled_app:
    """An App on a schema taken from ``pool``, closed and its schema handed back on exit."""

    def __init__(self, url: str, pool: SchemaPool) -> None:
        self.url, self.pool = url, pool

    async def __aenter__(self) -> App:
        self.name = await asyncio.to_thread(self.pool.take)
        self.app = App(self.url, schema=self.name)
        return self.app

    async def __aexit__(self, *exc: object) -> None:
        await self.app.close()
        await asyncio.to_thread(self.pool.give_back, self.name)


def _drop(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {name} cascade")  # type: ignore[arg-type]
