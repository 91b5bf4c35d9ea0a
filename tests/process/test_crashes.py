"""Real worker processes, killed for real: SIGKILL mid-job, a poison job, SIGTERM drains."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse import App

HERE = Path(__file__).parent
pytestmark = pytest.mark.process


@pytest.fixture
def proc_env(database_url: str, schema: str) -> Iterator[dict[str, str]]:
    os.environ["WORKHORSE_TEST_SCHEMA"] = schema
    os.environ["WORKHORSE_DATABASE_URL"] = database_url
    sys.path.insert(0, str(HERE))
    import procapp

    procapp.app.schema = schema
    procapp.SCHEMA = schema
    procapp.app.migrate_sync()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"create table {schema}.ledger (job_id uuid, attempt int, pid int, event text, "  # type: ignore[arg-type]
            "at timestamptz default clock_timestamp())"
        )
    env = {**os.environ, "WORKHORSE_TEST_SCHEMA": schema, "WORKHORSE_DATABASE_URL": database_url,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    yield env
    sys.path.remove(str(HERE))


Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(proc_env: dict[str, str], tmp_path: Path) -> Iterator[Spawn]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", "procapp:app", "worker", *args],
            env=proc_env, cwd=HERE, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def ledger(url: str, schema: str) -> list[tuple[str, int, int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(  # type: ignore[return-value]
            f"select job_id::text, attempt, pid, event from {schema}.ledger order by at"  # type: ignore[arg-type]
        ).fetchall()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_state(app: App, job_id: str) -> tuple[str, int]:
    import asyncio

    async def read() -> tuple[str, int]:
        job = await app.get_job(job_id)
        await app.close()
        assert job is not None
        return job.state, job.attempt

    return asyncio.run(read())


def test_sigkill_mid_job_the_next_worker_finishes_it_on_attempt_2(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    ref = procapp.slow_first_attempt.enqueue_sync({"sleep": 60})
    first = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the first attempt to start")
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "done", 20, "the job to finish")
    state, attempt = job_state(procapp.app, ref.id)
    assert (state, attempt) == ("done", 2)
    rows = ledger(database_url, schema)
    assert [(r[1], r[3]) for r in rows] == [(1, "start"), (2, "start"), (2, "end")]
    assert rows[0][2] == first.pid and rows[1][2] == second.pid


def test_a_poison_job_is_buried_after_its_attempts_and_others_keep_flowing(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    ref = procapp.poison.enqueue_sync(None)
    for expected in (1, 2):
        proc = spawn("--visibility-timeout", "1s", "--no-scheduler")
        proc.wait(timeout=30)  # the job SIGKILLs its own worker
        assert proc.returncode == -signal.SIGKILL
        assert len(ledger(database_url, schema)) == expected
    survivor = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "dead", 20, "the poison job to be buried")
    ok = procapp.noop.enqueue_sync(7)
    wait_for(lambda: job_state(procapp.app, ok.id)[0] == "done", 20, "an ordinary job after the burial")
    assert survivor.poll() is None
    assert job_state(procapp.app, ref.id) == ("dead", 2)
    assert len([r for r in ledger(database_url, schema) if r[0] == ref.id]) == 2


def test_sigterm_lets_the_running_job_finish_and_exits_0(spawn: Spawn, database_url: str, schema: str) -> None:
    import procapp

    ref = procapp.sleeper.enqueue_sync({"sleep": 1.5})
    worker = spawn("--no-scheduler")
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the job to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert job_state(procapp.app, ref.id) == ("done", 1)


def test_drain_cut_off_hands_the_job_back_with_its_attempt_unspent(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    ref = procapp.sleeper.enqueue_sync({"sleep": 60})
    worker = spawn("--no-scheduler", "--drain-timeout", "500ms")
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the job to start")
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert time.monotonic() - began < 10
    assert job_state(procapp.app, ref.id) == ("ready", 0)


def test_a_second_signal_cuts_the_drain_off_at_once(spawn: Spawn, database_url: str, schema: str) -> None:
    import procapp

    ref = procapp.sleeper.enqueue_sync({"sleep": 60})
    worker = spawn("--no-scheduler", "--drain-timeout", "60s")
    wait_for(lambda: len(ledger(database_url, schema)) == 1, 20, "the job to start")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert worker.poll() is None  # still draining
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=15) == 0
    assert job_state(procapp.app, ref.id) == ("ready", 0)
