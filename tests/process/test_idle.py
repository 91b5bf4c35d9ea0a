"""What an idle worker costs the database: statements per minute, counted by the server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import psycopg
import pytest
from processkit import HERE

pytestmark = pytest.mark.process
SETTLE = 2.0  # seconds after the worker registered and its scheduler took the lease: start-up is over
WINDOW = 60.0  # seconds measured: one whole minute, so every periodic statement is seen at its rate
BUDGET_PER_MINUTE = 12  # the worker with its scheduler role (issue 3); measured: 6 + 4


def statements(admin_url: str, name: str, seconds: float) -> dict[str, int]:
    """Statements the workhorse connections issued on database ``name`` during ``seconds``, by role.

    Sampled from pg_stat_activity every 50 ms: each statement moves its backend's query_start.
    (pg_stat_database's transaction counter would also count autovacuum's work on the database,
    and backends flush it lazily.) An idle worker's statements are seconds apart, so none is missed.
    One statement sent with the extended protocol is three messages (Parse, Bind, Execute), each
    stamping query_start anew; on a loaded machine a sample can catch Parse and the next Execute.
    So a new query_start on a backend last seen *active* on the same statement, within 200 ms and
    without an idle sample between, is that statement again (the rule of the scheduler's test).
    """
    seen: set[tuple[int, object]] = set()
    active: dict[int, tuple[datetime, str]] = {}  # pid -> (query_start, query) last seen running
    per_role: dict[str, int] = {}
    with psycopg.connect(admin_url, autocommit=True) as conn:
        first = True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rows = conn.execute(
                "select pid, application_name, query_start, state, query from pg_stat_activity "
                "where datname = %s and application_name like 'workhorse:%%' and query_start is not null",
                (name,),
            ).fetchall()
            for pid, role, started, state, query in rows:
                running = active.get(pid)
                if state == "active":
                    active[pid] = (started, query)
                else:
                    active.pop(pid, None)
                if (pid, started) in seen:
                    continue
                seen.add((pid, started))
                if running is not None and running[1] == query and started - running[0] < timedelta(seconds=0.2):
                    continue  # a later protocol message of a statement already counted
                if not first:
                    per_role[role] = per_role.get(role, 0) + 1
            first = False
            time.sleep(0.05)
    return per_role


def wait_until_started(admin_url: str, name: str, timeout: float = 60.0) -> None:
    """Until the worker's registry row and the scheduler's lease exist: a loaded machine can take
    seconds to start the process, and start-up statements must not fall into the window."""
    info = psycopg.conninfo.conninfo_to_dict(admin_url)
    info["dbname"] = name
    deadline = time.monotonic() + timeout
    with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:  # type: ignore[arg-type]
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):  # the tables may not exist yet
                row = conn.execute(
                    "select (select count(*) from workhorse.workers), "
                    "(select count(*) from workhorse.leaders where expires_at > now())"
                ).fetchone()
                if row is not None and row[0] >= 1 and row[1] >= 1:
                    return
            time.sleep(0.1)
    raise AssertionError("the idle worker did not register and lead within a minute")


def test_an_idle_worker_with_its_scheduler_role_stays_within_budget(database_url: str, dedicated_database: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dedicated_database)["dbname"]
    env = {
        **os.environ,
        "WORKHORSE_DATABASE_URL": dedicated_database,
        "WORKHORSE_TEST_SCHEMA": "workhorse",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(
        [sys.executable, "-m", "workhorse", "--app", "procapp:app", "migrate"],
        env=env,
        cwd=HERE,
        check=True,
        capture_output=True,
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "--app", "idleapp:app", "worker"],
        env=env,
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_started(database_url, name)
        time.sleep(SETTLE)
        per_role = statements(database_url, name, WINDOW)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    per_minute = sum(per_role.values()) * 60 / WINDOW
    print(f"idle worker: {per_role} in {WINDOW:.0f} s = {per_minute:.1f} statements per minute")
    assert per_role, "no statement seen at all: the sampling is broken"
    assert per_minute <= BUDGET_PER_MINUTE, f"{per_minute:.1f} statements per idle minute: {per_role}"
