"""Issue 16, defect 5: a worker says when ready jobs on its queues carry names it does not know
(they would otherwise wait forever in silence), once per name per WARN_EVERY."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from workhorse import App, JobContext
from workhorse.drivers.memory import MemoryDriver
from workhorse.drivers.postgres_operate import PostgresOperate
from workhorse.types import StateCount
from workhorse.worker import unknown
from workhorse.worker.unknown import UnknownNames, likely_meant, unknown_ready


async def body(ctx: JobContext, payload: object) -> None:
    return None


def pair(enqueuer: App, worker: App) -> None:
    """The script that enqueued under ``__main__.hello``; the worker's app that knows ``script.hello``."""
    enqueuer.job(name="__main__.hello", tenant="none")(body)
    worker.job(name="script.hello", tenant="none")(body)
    worker.job(name="script.other", queue="elsewhere", tenant="none")(body)


def warnings_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "workhorse.worker" and repr(name) in r.getMessage()
    ]


async def stranded_burst(enqueuer: App, worker: App, caplog: pytest.LogCaptureFixture) -> None:
    pair(enqueuer, worker)
    ref = await enqueuer.jobs["__main__.hello"].enqueue({})
    await enqueuer.jobs["__main__.hello"].enqueue({})
    done = await worker.jobs["script.hello"].enqueue({})
    with caplog.at_level(logging.WARNING, logger="workhorse.worker"):
        stats = await worker.worker(handle_signals=False).run(burst=True)
    assert stats.completed == 1
    found = warnings_about(caplog, "__main__.hello")
    assert len(found) == 1, caplog.text
    message = found[0]
    assert "2 ready job(s)" in message and "'default'" in message
    assert "'script.hello'" in message and "__main__" in message and "fix:" in message
    assert not any("named 'script.hello'" in m for m in warnings_about(caplog, "script.hello"))  # known
    job = await worker.get_job(ref.id)
    finished = await worker.get_job(done.id)
    assert job is not None and job.state == "ready"
    assert finished is not None and finished.state == "done"


async def test_a_burst_worker_names_them_on_postgres(
    database_url: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    enqueuer, worker = App(database_url, schema=schema), App(database_url, schema=schema)
    await worker.migrate()
    try:
        await stranded_burst(enqueuer, worker, caplog)
    finally:
        await enqueuer.close()
        await worker.close()


async def test_an_idle_worker_warns_once_per_name_however_often_it_looks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, database_url: str, migrated_schema: str
) -> None:
    monkeypatch.setattr(unknown, "FIRST_CHECK", 0.01)
    monkeypatch.setattr(unknown, "CHECK_EVERY", 0.02)
    enqueuer, app = App(database_url, schema=migrated_schema), App(database_url, schema=migrated_schema)
    pair(enqueuer, app)
    await enqueuer.jobs["__main__.hello"].enqueue({})
    worker = app.worker(handle_signals=False)
    looked = 0
    original = PostgresOperate.snapshot

    async def counted(self: PostgresOperate, since: float | None) -> object:
        nonlocal looked
        looked += 1
        return await original(self, since)

    monkeypatch.setattr(PostgresOperate, "snapshot", counted)
    try:
        with caplog.at_level(logging.WARNING, logger="workhorse.worker"):
            running = asyncio.create_task(worker.run())
            for _ in range(500):
                if looked >= 4:
                    break
                await asyncio.sleep(0.01)
            await worker.stop()
            await running
    finally:
        await enqueuer.close()
        await app.close()
    assert looked >= 4
    assert len(warnings_about(caplog, "__main__.hello")) == 1, caplog.text


def test_each_name_is_warned_about_again_only_after_warn_every(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    watch = UnknownNames(
        worker_id="w-1", queues=["default"], names=["a.b"], source=MemoryDriver(), idle=lambda: True,
        clock=lambda: now[0],
    )  # fmt: skip
    at = datetime(2030, 1, 1, tzinfo=UTC)
    found = [StateCount("default", "x.y", "ready", 3, at), StateCount("default", "x.z", "ready", 1, at)]
    with caplog.at_level(logging.WARNING, logger="workhorse.worker"):
        watch.report(found)
        now[0] += unknown.WARN_EVERY - 1
        watch.report(found)
        assert len(caplog.records) == 2
        now[0] += 1
        watch.report(found[:1])
    assert [r.getMessage().count("'x.y'") > 0 for r in caplog.records] == [True, False, True]


def test_only_ready_rows_on_served_queues_under_unknown_names_count() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    states = [
        StateCount("default", "known", "ready", 1, at),
        StateCount("default", "stray", "ready", 2, at),
        StateCount("default", "stray", "dead", 5, at),
        StateCount("other", "stray", "ready", 7, at),
        StateCount("default", "late", "delayed", 1, at),
    ]
    assert unknown_ready(states, ["default"], ["known"]) == [states[1]]
    assert likely_meant("__main__.hello", ["script.hello", "script.other"]) == "script.hello"
    assert likely_meant("__main__.hello", ["a.hello", "b.hello"]) is None
    assert likely_meant("x.nothing", ["script.hello"]) is None
