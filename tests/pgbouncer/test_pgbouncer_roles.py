"""Cron leadership, wake-ups, the CLI and the refusal of an unknown pooler mode, through a
transaction-mode PgBouncer."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from workhorse import App, JobContext
from workhorse.cli import cli
from workhorse.drivers.pooler import pooled
from workhorse.errors import ConfigurationError
from workhorse.leader.scheduler import Scheduler


def test_an_unknown_pooler_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKHORSE_POOLER", "statement")
    with pytest.raises(ConfigurationError) as refused:
        pooled()
    assert refused.value.code == "POOLER_INVALID"


async def test_cron_leadership_through_the_bouncer(
    bouncer_url: str, database_url: str, migrated_schema: str, pooled: None
) -> None:
    app = App(bouncer_url, schema=migrated_schema)

    @app.task(name="tick", every="1s", tenant="none")
    async def tick(ctx: JobContext, payload: Any) -> Any:
        return payload["scheduled_at"]

    scheduler = Scheduler(app, handle_signals=False)
    run = asyncio.create_task(scheduler.run())
    await asyncio.sleep(2.5)
    assert scheduler.leading
    await scheduler.stop()
    stats = await run
    await app.worker(handle_signals=False).run(burst=True)
    await app.close()
    assert stats.fired >= 1 and stats.fenced == 0
    with psycopg.connect(database_url) as conn:
        states = conn.execute(f"select state from {migrated_schema}.jobs").fetchall()  # type: ignore[arg-type]
    assert {s for (s,) in states} == {"done"} and len(states) == stats.fired


async def _pickup(url: str, schema: str) -> float:
    """Seconds from an enqueue to its run starting, with a worker already idle (poll_interval 2s)."""
    app = App(url, schema=schema)
    started: list[float] = []

    @app.job(name="mark", tenant="none")
    async def mark(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append(time.monotonic())

    worker = app.worker(handle_signals=False, poll_interval="2s")
    run = asyncio.create_task(worker.run())
    await asyncio.sleep(1.5)  # idle, its first claims done, the listener (if any) in place
    sent = time.monotonic()
    await mark.enqueue({})
    while not started and time.monotonic() - sent < 10:
        await asyncio.sleep(0.005)
    await worker.stop()
    await run
    await app.close()
    return started[0] - sent


async def test_wakeups_over_the_listen_url(
    bouncer_url: str, database_url: str, migrated_schema: str, pooled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LISTEN over the bouncer is lost (the next transaction runs on another server connection):
    # a worker behind it is woken over WORKHORSE_LISTEN_URL, a direct connection
    monkeypatch.setenv("WORKHORSE_LISTEN_URL", database_url)
    assert await _pickup(bouncer_url, migrated_schema) < 0.5


def test_the_cli_reads_through_the_bouncer(bouncer_url: str, migrated_schema: str, pooled: None) -> None:
    async def enqueue() -> None:
        app = App(bouncer_url, schema=migrated_schema)

        @app.job(name="read.me", tenant="none")
        async def read_me(ctx: JobContext, payload: dict[str, Any]) -> None:
            return None

        await asyncio.gather(*(read_me.enqueue({"n": i}) for i in range(8)))
        await app.close()

    asyncio.run(enqueue())
    base = ["--database-url", bouncer_url, "--schema", migrated_schema]
    for _ in range(6):  # more than psycopg's prepare threshold
        listed = CliRunner().invoke(cli, [*base, "ls", "--json"])
        assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.output)["jobs"]) == 8
    stats = CliRunner().invoke(cli, [*base, "stats", "--json"])
    assert stats.exit_code == 0, stats.output


async def test_times_read_in_utc_whatever_the_sessions_zone(
    bouncer_url: str, migrated_schema: str, pooled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # without `options=-c TimeZone=UTC` the session keeps its own zone (PGTZ here; the server's
    # default in production); the pooled connection sets UTC, which PgBouncer carries per client
    monkeypatch.setenv("PGTZ", "Asia/Kolkata")
    app = App(bouncer_url, schema=migrated_schema)
    paused = [await app.admin.pause("q", reason="r") for _ in range(3)]
    listed = await app.admin.pauses()
    await app.close()
    assert {p.paused_at.utcoffset() for p in [*paused, *listed]} == {timedelta(0)}
