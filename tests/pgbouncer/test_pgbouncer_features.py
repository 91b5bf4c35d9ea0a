"""Steps, flow control, a backfill and the dashboard's reads through a transaction-mode PgBouncer."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from workhorse import App, JobContext, Limits
from workhorse import backfill as bf
from workhorse.dashboard import make_asgi_app

BACKFILL_TESTS = Path(__file__).parent.parent / "backfill"


@pytest.fixture
async def bounced(bouncer_url: str, migrated_schema: str, pooled: None) -> AsyncIterator[App]:
    app = App(bouncer_url, schema=migrated_schema)
    yield app
    await app.close()


async def test_steps_and_events_through_the_bouncer(bounced: App) -> None:
    @bounced.job(name="order", tenant="none")
    async def order(ctx: JobContext, payload: dict[str, Any]) -> str:
        first = await ctx.step.run("charge", lambda: "charged")
        paid = await ctx.step.wait_for_event("paid", "order.paid", key=payload["id"], timeout="1h")
        return f"{first}:{paid['amount']}"

    ref = await order.enqueue({"id": "o-1"})
    await bounced.worker(concurrency=2).run(burst=True)
    waiting = await bounced.get_job(ref.id)
    assert waiting is not None and waiting.state == "suspended"
    await bounced.publish_event("order.paid", {"amount": 12}, key="o-1")
    await bounced.worker(concurrency=2).run(burst=True)
    done = await bounced.get_job(ref.id)
    assert done is not None and done.state == "done" and done.result == "charged:12"


async def test_flow_control_through_the_bouncer(bounced: App) -> None:
    bounced.limits = Limits(per_tenant=2)
    running: dict[str, int] = {}
    most: dict[str, int] = {}

    @bounced.job(name="capped", tenant=lambda p: p["t"])
    async def capped(ctx: JobContext, payload: dict[str, Any]) -> None:
        running[payload["t"]] = running.get(payload["t"], 0) + 1
        most[payload["t"]] = max(most.get(payload["t"], 0), running[payload["t"]])
        await asyncio.sleep(0.02)
        running[payload["t"]] -= 1

    await capped.enqueue_many([{"t": t, "n": n} for n in range(8) for t in "ab"])
    await bounced.worker(concurrency=10).run(burst=True)
    assert most == {"a": 2, "b": 2}


async def test_the_dashboard_reads_through_the_bouncer(bounced: App) -> None:
    @bounced.job(name="shown", tenant="none")
    async def shown(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    ref = await shown.enqueue({"n": 1})
    transport = httpx.ASGITransport(app=make_asgi_app(bounced))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        for path in ("/", "/jobs", f"/jobs/{ref.id}", "/workers", "/tasks", "/jobs", "/", "/jobs"):
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text[:500])


def test_a_backfill_through_the_bouncer_leaves_no_session_state(
    bouncer_url: str, database_url: str, schema: str, pooled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its session-level `SET idle_in_transaction_session_timeout` reached the pool's later clients
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", bouncer_url)
    monkeypatch.setenv("WORKHORSE_TEST_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(BACKFILL_TESTS))
    monkeypatch.delitem(sys.modules, "bfapp", raising=False)
    bfapp = importlib.import_module("bfapp")
    bfapp.app.migrate_sync()
    with psycopg.connect(database_url, autocommit=True) as conn:
        bfapp.create_items(conn, 100)

    async def run() -> None:
        await bf.start(bfapp.app, "fill-slugs")
        await bfapp.app.worker(concurrency=2).run(burst=True)
        await bfapp.app.close()

    asyncio.run(run())
    with psycopg.connect(database_url) as conn:
        missing = conn.execute(f"select count(*) from {schema}.items where slug is null").fetchone()  # type: ignore[arg-type]
        status = conn.execute(f"select status from {schema}.backfill_passes").fetchall()  # type: ignore[arg-type]
    assert missing == (0,) and status == [("completed",)]
    seen = set()
    for _ in range(40):
        with psycopg.connect(bouncer_url, prepare_threshold=None) as conn:
            row = conn.execute("show idle_in_transaction_session_timeout").fetchone()
            seen.add(row[0] if row else None)
    assert seen == {"0"}
