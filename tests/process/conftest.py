"""Fixtures for tests that run real `workhorse worker` subprocesses against procapp.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from processkit import HERE, Spawn, spawner

from workhorse import embedded


@pytest.fixture
def proc_env(database_url: str, schema: str) -> dict[str, str]:
    os.environ["WORKHORSE_TEST_SCHEMA"] = schema
    os.environ["WORKHORSE_DATABASE_URL"] = database_url
    import procapp

    procapp.app.schema = schema
    procapp.SCHEMA = schema
    procapp.app.migrate_sync()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"create table {schema}.ledger (job_id uuid, attempt int, pid int, event text, "  # type: ignore[arg-type]
            "at timestamptz default clock_timestamp())"
        )
    return {
        **os.environ,
        "WORKHORSE_TEST_SCHEMA": schema,
        "WORKHORSE_DATABASE_URL": database_url,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture
def spawn(proc_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    yield from spawner("procapp:app", proc_env, tmp_path)


@pytest.fixture
def own_server() -> Iterator[tuple[Path, str]]:
    """An embedded server in a home of this test's own, so restarting it disturbs nobody: (home, URL)."""
    base = Path(tempfile.mkdtemp(prefix="workhorse-faults-"))
    base.chmod(0o711)  # as root, the server runs as an unprivileged user who must traverse it
    home = base / "wh"
    try:
        yield home, embedded.ensure_started(home)
    finally:
        embedded.stop(home)
        shutil.rmtree(base, ignore_errors=True)
