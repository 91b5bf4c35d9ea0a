"""The dashboard in a real browser (headless Chromium): overview → filter → job → requeue a dead
job and see it run; pause and resume; hostile values that never execute; the token refusal; and
a screenshot of every page (into docs/ with WORKHORSE_SCREENSHOTS=docs).

Skipped, with how to install them, when Chromium or Playwright is missing."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import Served, browser_page, need_browser
from dashkit import HOSTILE, declare

from workhorse import App
from workhorse.ids import short_id

TOKEN = "browser-token-42"
DOCS = Path(__file__).parents[2] / "docs"


@pytest.fixture
def served(database_url: str, schema: str) -> Iterator[tuple[Served, dict[str, Any]]]:
    need_browser()
    app = App(database_url, schema=schema)
    state = declare(app)
    app.migrate_sync()
    server = Served(app, refresh_seconds=1).start()
    try:
        yield server, state
    finally:
        server.stop()


def dead_job(server: Served, state: dict[str, Any], **payload: Any) -> str:
    ref = server.call(state["work"].enqueue({"fail": True, "message": "provider down", **payload}))

    async def is_dead() -> bool:
        job = await server.app.admin.get(ref.id)
        return job is not None and job.state == "dead"

    server.wait_for(is_dead)
    return str(ref.id)


def test_overview_filter_job_requeue_and_see_it_run(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    job_id = dead_job(server, state)
    with browser_page() as page:
        page.goto(server.url + "/")
        headers = page.locator("table.queues thead th").all_inner_texts()
        assert {"ready", "running", "dead"} <= set(headers)
        assert page.locator("table.queues tbody tr", has_text="emails").count() == 1
        page.get_by_role("link", name="Jobs", exact=True).click()
        page.wait_for_url(re.compile(r"/jobs$"))
        page.select_option("select[name=state]", "dead")
        page.fill("input[name=queue]", "emails")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(r"/jobs\?state=dead&queue=emails"))
        rows = page.locator("table.jobs tbody tr")
        assert rows.count() == 1
        rows.first.get_by_role("link", name=short_id(job_id)).click()  # the short id links to the whole one
        page.wait_for_url(re.compile(f"/jobs/{job_id}$"))
        assert "provider down" in page.locator(".attempt").first.inner_text()
        assert "TerminalError" in page.locator("pre.trace").first.inner_text()
        state["healed"] = True  # the provider is back
        page.get_by_role("button", name="Requeue").click()
        page.wait_for_url(re.compile(r"notice=requeued"))
        assert page.dialogs and page.dialogs[0].startswith("confirm:")  # type: ignore[attr-defined]

        async def is_done() -> bool:
            job = await server.app.admin.get(job_id)
            return job is not None and job.state == "done"

        server.wait_for(is_done)
        page.reload()
        assert page.locator(".card-head .state").first.inner_text() == "done"
        assert '"ok": true' in page.locator("pre.json").nth(1).inner_text()


def test_without_script_an_action_is_confirmed_on_a_page(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    job_id = dead_job(server, state)
    with browser_page(javascript=False) as page:
        page.goto(server.url + f"/jobs/{job_id}")
        page.get_by_role("button", name="Remove").click()
        page.wait_for_url(re.compile(f"/jobs/{job_id}/remove$"))
        assert "Remove job" in page.locator(".question").inner_text()
        assert server.call(server.app.admin.get(job_id)) is not None  # asked, not done
        page.get_by_role("button", name="Remove").click()
        page.wait_for_url(re.compile(r"/jobs\?notice=removed"))
        assert server.call(server.app.admin.get(job_id)) is None
        assert page.dialogs == []  # type: ignore[attr-defined]


def test_bulk_requeue_shows_what_remains(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    dead_job(server, state)
    dead_job(server, state)
    state["healed"] = True
    with browser_page() as page:
        page.goto(server.url + "/jobs?state=dead")
        page.get_by_role("button", name="Requeue all matching").click()
        page.wait_for_url(re.compile(r"notice=bulk"))
        assert "Requeued 2 jobs; 0 remaining" in page.locator(".notice").inner_text()


def test_pause_and_resume_and_the_live_refresh(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    server.call(state["steps"].enqueue({"cool_down": "1h"}))
    with browser_page() as page:
        page.goto(server.url + "/")
        row = page.locator("table.queues tbody tr", has_text="reports")
        row.get_by_role("button", name="Pause").click()
        page.wait_for_url(re.compile(r"notice=paused"))
        assert page.locator("table.queues tbody tr", has_text="reports").locator(".tag-paused").count() == 1
        assert [p.queue for p in server.call(server.app.admin.pauses())] == ["reports"]
        # Paused, a new job waits; the overview shows it without a reload.
        server.call(state["steps"].enqueue({}))
        ready = page.locator("table.queues tbody tr", has_text="reports").locator("a.n-ready")
        ready.wait_for(timeout=20_000)
        assert ready.inner_text() == "1"
        assert page.locator("#live").get_attribute("data-refreshed") is not None
        page.locator("table.queues tbody tr", has_text="reports").get_by_role("button", name="Resume").click()
        page.wait_for_url(re.compile(r"notice=resumed"))
        assert server.call(server.app.admin.pauses()) == []
        assert page.locator(".tag-paused").count() == 0


def test_hostile_values_never_execute_and_the_layout_holds(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    job_id = dead_job(server, state, message=HOSTILE, org=HOSTILE, note=HOSTILE)
    keyed = server.call(state["work"].enqueue({"message": "fine", "org": HOSTILE}, key=HOSTILE, delay="1h"))
    server.call(server.app.admin.pause(HOSTILE, reason=HOSTILE))
    pages = ["/", "/jobs", f"/jobs?tenant={HOSTILE}", f"/jobs/{job_id}", f"/jobs/{keyed.id}", "/workers", "/tasks"]
    with browser_page() as page:
        for path in pages:
            page.goto(server.url + path)
            assert page.evaluate("window.__xss") == 0, path
            assert page.locator("#pwn").count() == 0, path
            assert page.locator("img[src=x]").count() == 0, path
            assert page.dialogs == [], path  # type: ignore[attr-defined]
            assert page.get_by_role("link", name="Jobs", exact=True).is_visible(), path
            assert page.locator("main .card").count() >= 1, path
        page.goto(server.url + f"/jobs/{job_id}")
        assert json.dumps(HOSTILE) in page.locator("pre.json").first.inner_text()  # shown as text, whole
        assert HOSTILE in page.locator(".attempt").first.inner_text()
        page.goto(server.url + f"/jobs/{keyed.id}")
        assert HOSTILE in page.locator(".facts").inner_text()  # the key and the tenant
        page.goto(server.url + "/")
        assert page.locator("table.queues tbody tr", has_text="script").locator(".tag-paused").count() == 1
        assert page.evaluate("window.__xss") == 0


def test_a_token_is_refused_until_given(database_url: str, schema: str) -> None:
    need_browser()
    app = App(database_url, schema=schema)
    declare(app)
    app.migrate_sync()
    server = Served(app, worker=False, token=TOKEN).start()
    try:
        with browser_page() as page:
            answer = page.goto(server.url + "/jobs")
            assert answer is not None and answer.status == 401
            assert page.locator(".refusal-code").inner_text() == "DASHBOARD_UNAUTHORIZED"
            assert page.goto(server.url + "/?token=wrong-token-1") is not None
            assert page.locator(".refusal-code").inner_text() == "DASHBOARD_UNAUTHORIZED"
            page.goto(server.url + f"/?token={TOKEN}")
            assert page.url == server.url + "/"  # the token left the address bar
            page.get_by_role("link", name="Jobs", exact=True).click()
            page.wait_for_url(re.compile(r"/jobs$"))
            assert page.locator("h1", has_text="Jobs").count() == 1
    finally:
        server.stop()


def test_screenshots_of_every_page(served: tuple[Served, dict[str, Any]], tmp_path: Path) -> None:
    """Each page, seeded to look like a working day. WORKHORSE_SCREENSHOTS=docs writes docs/*.png."""
    server, state = served
    out = DOCS if os.environ.get("WORKHORSE_SCREENSHOTS") == "docs" else tmp_path
    seeded = server.call(seed_a_day(server.app, state))
    shots = {
        "dashboard-overview.png": "/",
        "dashboard-jobs.png": "/jobs",
        "dashboard-job.png": f"/jobs/{seeded['dead']}",
        "dashboard-steps.png": f"/jobs/{seeded['steps']}",
        "dashboard-workers.png": "/workers",
        "dashboard-tasks.png": "/tasks",
    }
    with browser_page() as page:
        page.set_viewport_size({"width": 1360, "height": 560})  # full_page grows it to the content
        for name, path in shots.items():
            page.goto(server.url + path)
            page.locator("body").screenshot(path=str(out / name))  # the content's height, no blank below
            assert (out / name).stat().st_size > 10_000, name


async def seed_a_day(app: App, state: dict[str, Any]) -> dict[str, str]:
    """Jobs in every state on four queues, and an hour of minute counters to chart."""
    import random

    import psycopg

    work, steps = state["work"], state["steps"]
    dead = ""
    for i in range(3):
        ref = await work.enqueue({"fail": True, "message": f"SMTP 421 mailbox busy (try {i})", "org": "acme"})
        dead = str(ref.id)
    steps_ref = await steps.enqueue({"cool_down": "2h"})
    await wait_state(app, dead, "dead")
    await wait_state(app, str(steps_ref.id), "suspended")
    await app.admin.pause("reports", reason="quarterly close")
    await steps.enqueue_many([{"n": i} for i in range(6)])
    await work.enqueue_many([{"message": "later", "org": "globex"} for _ in range(3)], delay="30m")
    rng = random.Random(7)
    rows = []
    for minute in range(60):
        for queue, base, fail in (("emails", 40, 0.04), ("reports", 9, 0.0), ("billing", 22, 0.12)):
            rows.append(
                (
                    minute,
                    queue,
                    max(0, int(base + rng.gauss(0, base / 4))),
                    int(rng.random() < fail * 10) * rng.randint(0, 4),
                )
            )
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute(
            f"insert into {app.schema}.counters as c "
            "(tier, bucket, queue, name, completed, retried, failed, dead, lapsed) "
            "select 'minute', date_trunc('minute', now(), 'UTC') - (59 - m) * interval '1 minute', "
            "q, 'seed', ok, bad, 0, 0, 0 "
            "from unnest(%(m)s::int[], %(q)s::text[], %(ok)s::int[], %(bad)s::int[]) as u(m, q, ok, bad) "
            "on conflict (tier, bucket, queue, name) do update set completed = c.completed + excluded.completed",
            {
                "m": [r[0] for r in rows],
                "q": [r[1] for r in rows],
                "ok": [r[2] for r in rows],
                "bad": [r[3] for r in rows],
            },
        )
    return {"dead": dead, "steps": str(steps_ref.id)}


async def wait_state(app: App, job_id: str, wanted: str) -> None:
    import asyncio

    for _ in range(300):
        job = await app.admin.get(job_id)
        if job is not None and job.state == wanted:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {wanted}")
