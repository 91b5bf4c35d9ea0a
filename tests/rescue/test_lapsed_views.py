"""Every view tells the truth about a running job whose lease lapsed (issue 26): until a claim or
the rescuer recovers it, ``show`` (JSON and text), ``ls``, ``stats`` (JSON and text) and the
dashboard's overview and job page count it apart from healthy running jobs, with how long ago its
lease lapsed. (The Prometheus gauges: tests/metrics.)"""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result

from workhorse import App, JobContext, Retry
from workhorse.cli import cli
from workhorse.dashboard import make_asgi_app
from workhorse.ids import short_id

LAPSE = 0.3


def invoke(database_url: str, schema: str, *args: str) -> Result:
    result = CliRunner().invoke(
        cli, ["--database-url", database_url, "--schema", schema, *args], env={"COLUMNS": "200"}, color=False
    )
    assert result.exit_code == 0, result.output
    return result


async def run(database_url: str, schema: str, *args: str) -> Result:
    """The command line, off the test's loop (it runs one of its own)."""
    return await asyncio.to_thread(invoke, database_url, schema, *args)


async def one_lapsed_one_live(app: App) -> tuple[str, str]:
    """Two running jobs of one name: one whose worker died (its lease lapsed 1 s ago or more), one
    whose worker lives (a 60 s lease)."""

    @app.job(name="report", queue="reports", tenant="none", retry=Retry(attempts=3, base=0))
    async def report(ctx: JobContext, payload: int) -> None:
        return None

    dead_ref = await report.enqueue(1)
    taken = await app.driver.claim(
        worker_id="w-dead", wants={"reports": 1}, names=["report"], visibility=LAPSE, sweep=False
    )
    assert [c.id for c in taken.claimed] == [dead_ref.id]
    live_ref = await report.enqueue(2)
    taken = await app.driver.claim(worker_id="w-live", wants={"reports": 1}, names=["report"], visibility=60)
    assert [c.id for c in taken.claimed] == [live_ref.id]
    await asyncio.sleep(LAPSE + 1.0)
    return dead_ref.id, live_ref.id


async def test_show_ls_and_stats_count_a_lapsed_lease_apart(pg_app: App, database_url: str) -> None:
    lapsed, live = await one_lapsed_one_live(pg_app)
    schema = pg_app.schema

    shown = json.loads((await run(database_url, schema, "show", lapsed, "--json")).stdout)
    assert (shown["state"], shown["lease_lapsed"], shown["worker_id"]) == ("running", True, "w-dead")
    assert json.loads((await run(database_url, schema, "show", live, "--json")).stdout)["lease_lapsed"] is False
    text = (await run(database_url, schema, "show", lapsed)).stdout
    assert "lapsed" in text and "ago" in text and "w-dead stopped renewing it" in text
    assert "lease until" not in text
    assert "lease until" in (await run(database_url, schema, "show", live)).stdout

    page = json.loads((await run(database_url, schema, "ls", "--json")).stdout)
    assert {j["id"]: j["lease_lapsed"] for j in page["jobs"]} == {lapsed: True, live: False}
    listing = (await run(database_url, schema, "ls")).stdout
    [dead_line] = [line for line in listing.splitlines() if short_id(lapsed) in line]
    [live_line] = [line for line in listing.splitlines() if short_id(live) in line]
    assert "(lease lapsed " in dead_line and "ago)" in dead_line and "lapsed" not in live_line

    stats = json.loads((await run(database_url, schema, "stats", "--json")).stdout)
    [queue] = stats["queues"]
    assert (queue["running"], queue["lease_lapsed"]) == (1, 1)
    assert 1.0 <= queue["oldest_lapse_age"] < 60
    [name] = stats["names"]
    assert (name["running"], name["lease_lapsed"]) == (1, 1)
    table = (await run(database_url, schema, "stats")).stdout
    assert "lease lapsed" in table
    rows = [line for line in table.splitlines() if line.startswith("reports ")]
    assert len(rows) == 2  # the queue's row and its job name's
    assert all(" 1, " in row and "s ago" in row for row in rows), table  # how many, how long ago the oldest


async def test_the_dashboard_shows_a_lapsed_lease_on_the_overview_and_the_job_page(pg_app: App) -> None:
    import httpx

    lapsed, live = await one_lapsed_one_live(pg_app)
    transport = httpx.ASGITransport(app=make_asgi_app(pg_app))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        overview = (await http.get("/overview/live")).text
        assert 'class="tag tag-lapsed"' in overview and "1 lease lapsed, " in overview
        assert '<span class="label">lease lapsed</span>' in overview
        page = (await http.get(f"/jobs/{lapsed}")).text
        assert "<dt>lease lapsed</dt>" in page and 'class="notice bad"' in page
        assert "<dt>lease until</dt>" not in page
        healthy = (await http.get(f"/jobs/{live}")).text
        assert "<dt>lease until</dt>" in healthy and "lease lapsed" not in healthy
