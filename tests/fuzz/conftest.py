"""One migrated schema and one event loop per fuzz module: hypothesis runs many examples, each
small; a schema per example would cost more than the example."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fuzzkit import Loop

from workhorse import App


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    runner = Loop()
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def fuzz_schema(database_url: str) -> Iterator[str]:
    name = f"t_fuzz_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {name} cascade")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fuzz_app(database_url: str, fuzz_schema: str, loop: Loop) -> Iterator[App]:
    app = App(database_url, schema=fuzz_schema)
    loop.run(app.migrate())
    yield app
    loop.run(app.close())
