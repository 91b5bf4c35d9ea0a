"""Shared fixtures: a real PostgreSQL (WORKHORSE_DATABASE_URL, else the embedded server) and a
schema of its own per test, so tests run in parallel without seeing each other's rows.

Migrating a schema costs about half a second; emptying one costs about ten milliseconds. So the
migrated schemas of ``app`` and ``pg_app`` come from a pool made once per test session (per xdist
worker, each its own process): a test takes one, and hands it back emptied when it ends (every row
deleted, every sequence restarted). A schema that cannot be emptied at once (a lock held), or whose
shape the test changed, is dropped instead and the pool migrates a new one when it next needs it.
``schema`` is still a fresh, unmigrated name, for the tests that migrate (or break) it themselves.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from schemapool import SchemaPool, _drop, pooled_app
from workhorse import App


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("WORKHORSE_DATABASE_URL")
    if url:
        return url
    from workhorse.embedded import ensure_started

    return ensure_started()


@pytest.fixture(scope="session")
def schema_pool(database_url: str) -> Iterator[SchemaPool]:
    pool = SchemaPool(database_url)
    yield pool
    pool.close()


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    """A fresh schema name, nothing in it yet: the test migrates it (or not) itself."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    _drop(database_url, name)


@pytest.fixture
def migrated_schema(schema_pool: SchemaPool) -> Iterator[str]:
    """A migrated, empty schema from the session's pool."""
    name = schema_pool.take()
    yield name
    schema_pool.give_back(name)


@pytest.fixture
def dedicated_database(database_url: str) -> Iterator[str]:
    """A database nobody else uses, so every statement or connection seen on it is the test's."""
    name = f"wh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create database {name}")  # type: ignore[arg-type]
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        conn.execute(f"drop database if exists {name}")  # type: ignore[arg-type]


@pytest.fixture
async def pg_app(database_url: str, schema_pool: SchemaPool) -> AsyncIterator[App]:
    """An App on a migrated, empty schema of the pool."""
    async with pooled_app(database_url, schema_pool) as app:
        yield app


@pytest.fixture
async def app(database_url: str, schema_pool: SchemaPool) -> AsyncIterator[App]:
    """The storage tests' App: PostgreSQL, on a migrated, empty schema of the pool. (The contract
    suite, ``tests/contract``, runs its ``app`` on the memory driver too.)"""
    async with pooled_app(database_url, schema_pool) as instance:
        yield instance


@pytest.fixture
async def memory_app() -> App:
    return App(driver="memory")
