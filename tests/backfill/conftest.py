"""Fixtures for the backfill tests: ``bfapp`` imported fresh on this test's schema (migrated), with
its ``items`` table of 100 rows, and the environment a shell would have."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from bfkit import ROWS, Spawn

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


@pytest.fixture
def worker(bf_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    """Start `workhorse --app bfapp:app worker ARGS...` subprocesses (``env`` adds variables), each
    logging to ``tmp_path/worker-N.log``; at the end each one still running is drained, else killed."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", "bfapp:app", "worker", "--no-scheduler", *args],
            env={**bf_env, **(env or {})},
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
