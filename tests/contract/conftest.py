"""The contract suite: what the memory driver keeps (``workhorse.drivers.memory``), run on it and on
PostgreSQL side by side, so the test double cannot drift from the one real implementation. Every
other storage test runs on PostgreSQL alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from schemapool import SchemaPool, pooled_app
from workhorse import App


@pytest.fixture(params=["memory", "postgres"])
async def app(request: pytest.FixtureRequest, database_url: str, schema_pool: SchemaPool) -> AsyncIterator[App]:
    if request.param == "memory":
        yield App(driver="memory")
        return
    async with pooled_app(database_url, schema_pool) as instance:
        yield instance
