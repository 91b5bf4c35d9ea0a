"""Database health as ``app.admin.health()``, ``workhorse stats`` and the dashboard say it, against
a real PostgreSQL (autovacuum is off on the tests' server)."""

from __future__ import annotations

import asyncio
import json

import httpx
import psycopg
from click.testing import CliRunner, Result
from healthkit import declare, jobs_with_dead_rows

from workhorse import App
from workhorse.cli import cli
from workhorse.dashboard import make_asgi_app


async def stats(url: str, schema: str, *args: str) -> Result:
    """``workhorse stats`` on a thread of its own (the CLI runs its own event loop)."""
    command = ["--database-url", url, "--schema", schema, "stats", *args]
    return await asyncio.to_thread(CliRunner().invoke, cli, command, env={"COLUMNS": "200"}, color=False)


async def test_a_long_snapshot_is_named_while_it_is_held(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url) as reader:
        reader.execute("set transaction isolation level repeatable read")
        reader.execute("select count(*) from pg_class")  # the snapshot is taken: the horizon is pinned
        pid = reader.info.backend_pid
        await asyncio.sleep(1.2)
        report = await pg_app.admin.health(pinned_after="1s")
        assert report is not None
        mine = [w for w in report.warnings if w.subject == f"pid {pid}"]
        assert len(mine) == 1, report.warnings
        warning = mine[0]
        assert warning.code == "VACUUM_HORIZON_PINNED"
        assert "idle in transaction" in warning.cause and "last query started" in warning.cause
        assert f"pg_terminate_backend({pid})" in warning.fix
        holder = next(h for h in report.holders if h.pid == pid)
        assert holder.kind == "session" and holder.age is not None and holder.age >= 1
        assert report.to_dict()["horizon"][report.holders.index(holder)]["pid"] == pid
        reader.commit()  # the snapshot is released
    report = await pg_app.admin.health(pinned_after="1s")
    assert report is not None
    assert not [w for w in report.warnings if w.subject == f"pid {pid}"]


async def test_a_short_transaction_is_not_named(pg_app: App, database_url: str) -> None:
    with psycopg.connect(database_url) as reader:
        reader.execute("set transaction isolation level repeatable read")
        reader.execute("select 1")
        report = await pg_app.admin.health()  # held for less than the default 5 minutes
        assert report is not None
        assert reader.info.backend_pid not in {h.pid for h in report.holders}
        reader.rollback()


async def test_the_memory_driver_has_no_health(memory_app: App) -> None:
    assert await memory_app.admin.health() is None


async def test_dead_rows_show_in_stats_and_on_the_dashboard(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)
    await app.migrate()
    declare(app)
    result = await stats(database_url, schema, "--json")
    assert result.exit_code == 0, result.output
    database = json.loads(result.stdout)["database"]
    assert set(database) == {"autovacuum", "warnings", "tables", "horizon"}
    assert database["autovacuum"] is False  # the tests' server
    assert not [w for w in database["warnings"] if w["code"] == "DEAD_ROWS_HIGH"]
    jobs = next(t for t in database["tables"] if t["table"] == "jobs")
    assert set(jobs) == {"table", "live", "dead", "threshold", "vacuumed_ago"}

    await jobs_with_dead_rows(app, jobs=2000, updates=6)  # 12,000 dead: past 10,000 + 5% of 2,000
    result = await stats(database_url, schema, "--json")
    database = json.loads(result.stdout)["database"]
    high = [w for w in database["warnings"] if w["code"] == "DEAD_ROWS_HIGH"]
    assert [w["subject"] for w in high] == [f"{schema}.jobs"]
    assert high[0]["fix"].startswith(f"VACUUM (ANALYZE) {schema}.jobs;")
    assert "autovacuum is off" in high[0]["cause"]

    text = await stats(database_url, schema)
    assert "DEAD_ROWS_HIGH" in text.stdout and f"fix: VACUUM (ANALYZE) {schema}.jobs;" in text.stdout

    transport = httpx.ASGITransport(app=make_asgi_app(app, token="t" * 32))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        page = await http.get("/", headers={"authorization": "Bearer " + "t" * 32})
    assert page.status_code == 200
    assert 'class="notice bad health"' in page.text and "DEAD_ROWS_HIGH" in page.text

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"vacuum (analyze) {schema}.jobs")  # type: ignore[arg-type]
    report = await app.admin.health()
    assert report is not None and not [w for w in report.warnings if w.code == "DEAD_ROWS_HIGH"]
    await app.close()
