"""``workhorse show`` lists a job's steps; ``workhorse requeue ID --from-step NAME`` re-runs from one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from workhorse import App, JobContext, Retry
from workhorse.cli import cli
from workhorse.ids import short_id


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    monkeypatch.setenv("WORKHORSE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKHORSE_APP", raising=False)


@pytest.fixture
def sync_app(database_url: str, schema: str) -> App:
    app = App(database_url, schema=schema)
    app.migrate_sync()
    return app


def run(app: App, work: Callable[[], Awaitable[Any]]) -> Any:
    """Drive the app from this sync test (the CLI runs its own event loop, so the test cannot)."""

    async def body() -> Any:
        try:
            return await work()
        finally:
            await app.close()

    return asyncio.run(body())


def invoke(app: App, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--database-url", app.database_url, "--schema", app.schema, *args])


def test_show_lists_steps_and_requeue_from_step_reruns_from_there(sync_app: App) -> None:
    pg_app = sync_app
    calls: list[str] = []

    @pg_app.job(name="flow", tenant="none", retry=Retry(attempts=1))
    async def flow(ctx: JobContext, payload: None) -> str:
        await ctx.step.run("charge", lambda: calls.append("charge") or {"id": "ch_1"})
        await ctx.step.run("email", lambda: calls.append("email") or "sent")
        if len(calls) == 2:
            raise RuntimeError("the courier API is down")
        return "shipped"

    ref = run(pg_app, lambda: flow.enqueue(None))
    run(pg_app, lambda: pg_app.worker().run(burst=True))

    shown = invoke(pg_app, "show", ref.id, "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["state"] == "dead"
    assert [(s["name"], s["state"], s["attempt"], s["result"]) for s in document["steps"]] == [
        ("charge", "done", 1, {"id": "ch_1"}),
        ("email", "done", 1, "sent"),
    ]
    assert all(s["started_at"].endswith("Z") and s["finished_at"].endswith("Z") for s in document["steps"])

    human = invoke(pg_app, "show", ref.id)
    assert human.exit_code == 0, human.output
    for text in ("charge", "email", '{"id": "ch_1"}', '"sent"', "done"):
        assert text in human.stdout, human.stdout

    unknown = invoke(pg_app, "requeue", ref.id, "--from-step", "ship", "--json")
    assert unknown.exit_code == 2
    assert json.loads(unknown.stdout)["error"]["code"] == "STEP_UNKNOWN"
    assert "'charge', 'email'" in json.loads(unknown.stdout)["error"]["cause"]

    requeued = invoke(pg_app, "requeue", ref.id, "--from-step", "email")
    assert requeued.exit_code == 0, requeued.output
    assert requeued.stdout.startswith(f"requeued {short_id(ref.id)} (flow) ready, from step email")
    run(pg_app, lambda: pg_app.worker().run(burst=True))
    assert calls == ["charge", "email", "email"]  # the charge replayed; the email ran again
    final = json.loads(invoke(pg_app, "show", ref.id, "--json").stdout)
    assert (final["state"], final["result"]) == ("done", "shipped")


def test_show_says_what_a_suspended_step_waits_for(sync_app: App) -> None:
    pg_app = sync_app

    @pg_app.job(name="waits", tenant="none", retry=Retry(attempts=2, base=0))
    async def waits(ctx: JobContext, payload: None) -> None:
        await ctx.step.run("failing-once", _fails_first)
        await ctx.step.wait_for_event("approval", "order.approved", key="o-9", timeout="1h")

    ref = run(pg_app, lambda: waits.enqueue(None))
    run(pg_app, lambda: pg_app.worker().run(burst=True))
    run(pg_app, lambda: pg_app.worker().run(burst=True))
    human = invoke(pg_app, "show", ref.id)
    assert human.exit_code == 0, human.output
    assert "waiting for order.approved key=o-9" in human.stdout, human.stdout
    assert "suspended" in human.stdout
    requeue_live = invoke(pg_app, "requeue", ref.id, "--from-step", "approval", "--json")
    assert json.loads(requeue_live.stdout)["error"]["code"] == "JOB_NOT_REQUEUEABLE"


_tries = {"n": 0}


def _fails_first() -> int:
    _tries["n"] += 1
    if _tries["n"] == 1:
        raise ValueError("first try fails")
    return _tries["n"]
