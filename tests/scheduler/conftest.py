"""Fixtures for the scheduler tests: `workhorse scheduler` / `worker` subprocesses on schedapp.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedkit import HERE, Spawn

from workhorse import App


@pytest.fixture
def sched_env(database_url: str, schema: str) -> dict[str, str]:
    """The environment a subprocess running ``--app schedapp:app`` needs, on a migrated schema."""
    App(database_url, schema=schema).migrate_sync()
    return {
        **os.environ,
        "WORKHORSE_DATABASE_URL": database_url,
        "WORKHORSE_TEST_SCHEMA": schema,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture
def spawn(sched_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    """Start ``workhorse --app schedapp:app ARGS...``; every process is killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, mode: str = "tick") -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"proc-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", "schedapp:app", *args],
            env={**sched_env, "SCHEDAPP_MODE": mode},
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        proc.log_path = tmp_path / f"proc-{len(procs)}.log"  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a frozen process would otherwise hold its lease row
            proc.kill()
        proc.wait()
