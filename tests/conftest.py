"""Shared fixtures: a real PostgreSQL (WORKHORSE_DATABASE_URL, else the embedded server) and a
fresh schema per test, so tests run in parallel without seeing each other's rows."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from workhorse import App


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("WORKHORSE_DATABASE_URL")
    if url:
        return url
    from workhorse.embedded import ensure_started

    return ensure_started()


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {name} cascade")  # type: ignore[arg-type]


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
async def pg_app(database_url: str, schema: str) -> AsyncIterator[App]:
    app = App(database_url, schema=schema)
    await app.migrate()
    yield app
    await app.close()


@pytest.fixture
async def memory_app() -> App:
    return App(driver="memory")


@pytest.fixture(params=["memory", "postgres"])
async def app(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[App]:
    """The parity fixture: every test using it runs on both drivers."""
    if request.param == "memory":
        yield App(driver="memory")
        return
    name = f"t_{uuid.uuid4().hex[:12]}"
    instance = App(database_url, schema=name)
    await instance.migrate()
    try:
        yield instance
    finally:
        await instance.close()
        await asyncio.to_thread(_drop, database_url, name)


def _drop(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {name} cascade")  # type: ignore[arg-type]
