"""WORKHORSE_POOL_SIZE caps the connections of the app's pool (issue 31, part 5)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from workhorse import App
from workhorse.errors import ConfigurationError

HELD = "select count(*) from pg_stat_activity where datname = %s and application_name = 'workhorse:app'"


async def test_the_pool_size_caps_the_apps_connections(
    dedicated_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKHORSE_POOL_SIZE", "2")
    app = App(dedicated_database)
    name = psycopg.conninfo.conninfo_to_dict(dedicated_database)["dbname"]
    reads = asyncio.gather(*(app.driver.fetch("select pg_sleep(0.3)") for _ in range(12)))  # type: ignore[attr-defined]
    await asyncio.sleep(0.4)
    with psycopg.connect(dedicated_database) as conn:
        row = conn.execute(HELD, (name,)).fetchone()
    await reads
    await app.close()
    assert row is not None and row[0] == 2


@pytest.mark.parametrize("raw", ["0", "-1", "ten", "1001"])
def test_a_bad_pool_size_is_refused(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKHORSE_POOL_SIZE", raw)
    with pytest.raises(ConfigurationError) as refused:
        App("postgresql://postgres@127.0.0.1:5432/postgres").postgres_driver("app")
    assert refused.value.code == "POOL_SIZE_INVALID"
