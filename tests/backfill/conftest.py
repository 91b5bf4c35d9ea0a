"""Fixtures for the backfill tests: ``bfapp`` imported fresh on this test's schema (migrated), with
its ``items`` table of 100 rows, and the environment a shell would have."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from bfkit import ROWS

HERE = Path(__file__).parent


@pytest.fixture
def bf_env(monkeypatch: pytest.MonkeyPatch, database_url: str, schema: str, tmp_path: Path) -> dict[str, str]:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.setenv("WORKHORSE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKHORSE_APP", raising=False)
    monkeypatch.delenv("WORKHORSE_ENV", raising=False)
    for knob in ("BF_SLEEP", "BF_PAUSE", "BF_BATCH"):
        monkeypatch.delenv(knob, raising=False)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture
def bfapp(bf_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delitem(sys.modules, "bfapp", raising=False)
    module = importlib.import_module("bfapp")
    module.app.migrate_sync()
    with psycopg.connect(database_url, autocommit=True) as conn:
        module.create_items(conn, ROWS)
    yield module
    asyncio.run(module.app.close())
