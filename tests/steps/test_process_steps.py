"""Durable steps in real worker processes, killed for real."""

from __future__ import annotations

import signal

import pytest
from processkit import Spawn, job_state, ledger, wait_for

pytestmark = pytest.mark.process


def test_a_worker_sigkilled_between_two_steps_resumes_after_the_first_without_rerunning_it(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    import procapp

    ref = procapp.two_steps.enqueue_sync({"pause": 60})
    first = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: [r[3] for r in ledger(database_url, schema)] == ["first"], 20, "the first step")
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = spawn("--visibility-timeout", "1s", "--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "done", 20, "the job to finish")
    assert job_state(procapp.app, ref.id) == ("done", 2)
    rows = ledger(database_url, schema)
    assert [(r[1], r[3]) for r in rows] == [(1, "first"), (2, "second")]  # "first" ran exactly once
    assert (rows[0][2], rows[1][2]) == (first.pid, second.pid)


def test_a_run_suspended_in_sleep_survives_a_worker_restart(spawn: Spawn, database_url: str, schema: str) -> None:
    import procapp

    ref = procapp.step_napper.enqueue_sync({"nap": "2s"})
    first = spawn("--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "suspended", 20, "the run to suspend")
    first.send_signal(signal.SIGKILL)  # nothing is running: the suspended row is all there is
    first.wait()
    assert job_state(procapp.app, ref.id) == ("suspended", 0)
    second = spawn("--no-scheduler")
    wait_for(lambda: job_state(procapp.app, ref.id)[0] == "done", 20, "the run to resume and finish")
    assert job_state(procapp.app, ref.id) == ("done", 1)  # one attempt: the sleep spent none
    rows = ledger(database_url, schema)
    assert [(r[1], r[3]) for r in rows] == [(1, "before"), (1, "after")]
    assert (rows[0][2], rows[1][2]) == (first.pid, second.pid)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0
