"""Real worker subprocesses running a pass: SIGKILL in the middle of a batch, and a SIGTERM drain
that hands the pass back between two batches.

Why a SIGKILL between a batch's apply and its checkpoint cannot leave one without the other: both
are statements of the same transaction, so the kill (the connection dropping) rolls both back.
At any instant the rows applied are exactly the rows the ledger counts."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bfkit import ROWS, items, passes

from conftest import Spawn
from workhorse import backfill as bf


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def applied(url: str, schema: str) -> tuple[int, int]:
    """(rows applied once, rows applied more than once) in the user's table."""
    hits = [h for _, _, h in items(url, schema)]
    return sum(1 for h in hits if h == 1), sum(1 for h in hits if h > 1)


def start_pass(bfapp: ModuleType) -> bf.PassStarted:
    async def go() -> bf.PassStarted:
        try:
            return await bf.start(bfapp.app, "fill-slugs")
        finally:
            await bfapp.app.close()

    return asyncio.run(go())


def test_sigkill_mid_batch_resumes_after_the_last_committed_batch(
    bfapp: ModuleType, worker: Spawn, database_url: str, schema: str
) -> None:
    started = start_pass(bfapp)
    # Each batch sleeps 0.3 s inside its transaction, after its update: a kill lands mid-batch.
    first = worker("--visibility-timeout", "1s", env={"BF_SLEEP": "0.3"})
    wait_for(lambda: passes(database_url, schema)[0]["batches"] >= 3, 60, "three committed batches")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    [row] = passes(database_url, schema)
    once, twice = applied(database_url, schema)
    assert row["status"] == "running" and 3 <= row["batches"] < ROWS // 10
    assert once == row["rows"] == row["batches"] * 10 and twice == 0  # the killed batch left nothing
    assert row["cursor"] == row["rows"]
    worker("--visibility-timeout", "1s")
    wait_for(lambda: passes(database_url, schema)[0]["status"] != "running", 60, "the pass to end")
    [row] = passes(database_url, schema)
    assert row["status"] == "completed" and row["rows"] == ROWS and row["batches"] == ROWS // 10 + 1
    assert applied(database_url, schema) == (ROWS, 0)  # resumed after the kill: a restart would hit rows twice
    # The ledger says completed in the last batch's transaction; the job settles a moment later.
    wait_for(lambda: bf_job(bfapp, started.job_id)["state"] == "done", 30, "the job to settle")
    assert bf_job(bfapp, started.job_id)["attempt"] == 2


def bf_job(bfapp: ModuleType, job_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        try:
            job = await bfapp.app.get_job(job_id)
            assert job is not None
            return {"state": job.state, "attempt": job.attempt}
        finally:
            await bfapp.app.close()

    return asyncio.run(read())


def test_a_drain_hands_the_pass_back_between_batches(
    bfapp: ModuleType, worker: Spawn, database_url: str, schema: str, tmp_path: Path
) -> None:
    started = start_pass(bfapp)
    # A second between batches; a drain's cut-off a minute away: only the hand-back ends it soon.
    first = worker("--drain-timeout", "60s", env={"BF_PAUSE": "1s"})
    wait_for(lambda: passes(database_url, schema)[0]["batches"] >= 2, 60, "two committed batches")
    first.send_signal(signal.SIGTERM)
    assert first.wait(20) == 0  # well before the 60 s cut-off: handed back after the batch in flight
    [row] = passes(database_url, schema)
    assert row["status"] == "running" and row["batches"] < ROWS // 10
    assert applied(database_url, schema) == (row["rows"], 0)
    job = bf_job(bfapp, started.job_id)
    assert job["state"] == "ready"
    assert "handed back unspent by the drain" in (tmp_path / "worker-0.log").read_text()
    worker()
    wait_for(lambda: passes(database_url, schema)[0]["status"] != "running", 60, "the pass to end")
    [row] = passes(database_url, schema)
    assert row["status"] == "completed" and applied(database_url, schema) == (ROWS, 0)
    wait_for(lambda: bf_job(bfapp, started.job_id)["state"] == "done", 30, "the job to settle")
