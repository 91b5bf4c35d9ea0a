"""Crash recovery whatever the app declares (issue 26): a worker SIGKILLed mid-body, and the job is
recovered within one visibility timeout plus one rescue interval, then done on attempt 2.

One test per scenario of rescueapp.py, in real `workhorse worker` subprocesses on PostgreSQL: no
flow control, a job cap, a keyed cap, ``per_tenant`` with a ``tenant="none"`` job, ``per_queue``,
``total``, a rate, a paused queue resumed later, and a name the live worker does not know. The
killed job is one no cap counts (``total`` excepted): before the rescuer, the flow claim looked
only at running rows some cap counts, and every claim only at its own queues, names and unpaused
queues, so such a job stayed ``running`` for as long as anyone watched.

"Recovered" is what the claim path does: the attempt spent, and the job back ``ready`` (a paused
queue's, or one no live worker knows) or re-taken at once by a live worker that may run it. The
bound is VISIBILITY plus the worker's rescue interval (``rescue_interval``), plus SLACK for a
worker process to start on a loaded machine.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from processkit import HERE, ledger, wait_for

from workhorse import App
from workhorse.leader.rescue import rescue_interval
from workhorse.types import Job

pytestmark = pytest.mark.process

VISIBILITY = 2.0
BOUND = VISIBILITY + rescue_interval(VISIBILITY)
SLACK = 8.0  # a worker process starting (imports, schema check) on a loaded 2-core machine
WORKER = ("--visibility-timeout", f"{VISIBILITY:g}s", "--no-scheduler")  # the workers' own rescuer only

Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def start(proc_env: dict[str, str], tmp_path: Path) -> Iterator[Start]:
    """``start(scenario, app, *args)``: `workhorse --app rescueapp:<app> worker ARGS` with
    RESCUE_SCENARIO set, logging to a file of its own; every one still running is killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(scenario: str, app: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "--app", f"rescueapp:{app}", "worker", *args],
            env={**proc_env, "RESCUE_SCENARIO": scenario},
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def the_app(schema: str) -> App:
    """An app of the test's own on the schema, to read the job and pause its queue."""
    import rescueapp

    return App(rescueapp.URL, schema=schema)


def read(app: App, job_id: str) -> Job:
    async def get() -> Job:
        job = await app.get_job(job_id)
        await app.close()
        assert job is not None
        return job

    return asyncio.run(get())


def enqueue_victim(schema: str) -> str:
    import rescueapp

    async def put() -> str:
        app = rescueapp.app
        app.schema = schema
        ref = await rescueapp.victim.enqueue({"sleep": 60})
        await app.close()
        return ref.id

    return asyncio.run(put())


def admin(app: App, verb: str, queue: str) -> None:
    async def run() -> None:
        await getattr(app.admin, verb)(queue)
        await app.close()

    asyncio.run(run())


def kill_mid_body(start: Start, scenario: str, database_url: str, schema: str) -> tuple[str, float]:
    """The victim enqueued, its first attempt running in a worker, that worker SIGKILLed: the
    victim's id and the moment of the kill (monotonic)."""
    job_id = enqueue_victim(schema)
    first = start(scenario, "app", *WORKER)
    wait_for(lambda: [r[3] for r in ledger(database_url, schema)] == ["start"], 30, "the first attempt to start")
    first.send_signal(signal.SIGKILL)
    first.wait()
    return job_id, time.monotonic()


def recovered(job: Job) -> bool:
    """The lapsed attempt is spent and the claim is no longer the dead worker's."""
    return job.attempt >= 2 or job.state != "running"


@pytest.mark.parametrize("scenario", ["none", "job_cap", "keyed_cap", "per_tenant", "per_queue", "total", "rate"])
def test_a_killed_workers_job_is_recovered_whatever_caps_are_declared(
    start: Start, database_url: str, schema: str, scenario: str
) -> None:
    app = the_app(schema)
    job_id, killed = kill_mid_body(start, scenario, database_url, schema)
    start(scenario, "app", *WORKER)
    wait_for(lambda: recovered(read(app, job_id)), BOUND + SLACK, f"the job to be recovered ({scenario})")
    took = time.monotonic() - killed
    wait_for(lambda: read(app, job_id).state == "done", 30, "the job to finish")
    job = read(app, job_id)
    assert (job.state, job.attempt, job.result) == ("done", 2, 2)
    assert [(r[1], r[3]) for r in ledger(database_url, schema)] == [(1, "start"), (2, "start"), (2, "end")]
    assert took <= BOUND + SLACK, took


def test_a_paused_queues_killed_job_is_rescued_during_the_pause_and_runs_once_resumed(
    start: Start, database_url: str, schema: str
) -> None:
    app = the_app(schema)
    job_id, _ = kill_mid_body(start, "paused", database_url, schema)
    admin(app, "pause", "default")
    start("paused", "app", *WORKER)
    wait_for(lambda: read(app, job_id).state == "ready", BOUND + SLACK, "the rescuer to hand the job back")
    job = read(app, job_id)
    assert (job.attempt, job.lease_lapsed, job.worker_id) == (1, False, None)  # spent; no claim of a paused queue
    time.sleep(1.0)
    assert read(app, job_id).state == "ready", "a paused queue's job is not claimed"
    admin(app, "resume", "default")
    wait_for(lambda: read(app, job_id).state == "done", 30, "the job to finish once resumed")
    assert read(app, job_id).attempt == 2
    assert [(r[1], r[3]) for r in ledger(database_url, schema)] == [(1, "start"), (2, "start"), (2, "end")]


def test_a_job_no_live_worker_knows_is_rescued_and_runs_when_one_does(
    start: Start, database_url: str, schema: str
) -> None:
    app = the_app(schema)
    job_id, _ = kill_mid_body(start, "unknown_name", database_url, schema)
    start("unknown_name", "partial", *WORKER)  # serves the queue, does not declare `victim`
    wait_for(lambda: read(app, job_id).state == "ready", BOUND + SLACK, "the rescuer to hand the job back")
    assert read(app, job_id).attempt == 1
    start("unknown_name", "app", *WORKER)
    wait_for(lambda: read(app, job_id).state == "done", 30, "a worker that knows it to finish it")
    job = read(app, job_id)
    assert (job.state, job.attempt) == ("done", 2)
    assert [(r[1], r[3]) for r in ledger(database_url, schema)] == [(1, "start"), (2, "start"), (2, "end")]
