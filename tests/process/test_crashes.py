"""Real worker processes, killed for real: SIGKILL mid-job, a poison job, SIGTERM drains."""

from __future__ import annotations

import signal
import time

import pytest
from processkit import Spawn, job_state, ledger, wait_for

pytestmark = pytest.mark.process


def test_sigkill_mid_job_the_next_worker_finishes_it_on_attempt_2(spawn: Spawn, database_url: str, schema: str) -> None:
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
