"""The pages over HTTP on a real PostgreSQL: what one job shows (steps as a timeline, a wait for an
event, progress, every attempt's error), the jobs list's keyset pages both ways, a bulk requeue
with what remains, a requeue from a step, and the workers and tasks pages."""

from __future__ import annotations

import re
from typing import Any

from dashkit import ORIGIN, client, csrf_of, declare, refusal_code

from workhorse import App
from workhorse.dashboard import make_asgi_app
from workhorse.ids import short_id

POST = {"origin": ORIGIN}


def ids_on(html: str) -> list[str]:
    """The whole ids the rows link to; each row shows the short id (issue 29)."""
    found = re.findall(
        r'<td class="left mono"><a href="/jobs/([0-9a-f-]{36})" title="[0-9a-f-]{36}">([0-9a-f]{12})</a>', html
    )
    assert all(short_id(whole) == short for whole, short in found)
    return [whole for whole, _ in found]


async def test_one_job_shows_its_steps_wait_progress_and_errors(pg_app: App) -> None:
    state = declare(pg_app)
    waiting = await state["steps"].enqueue({"wait_for": "payment.settled", "key": "order-7"})
    dead = await state["work"].enqueue({"fail": True, "message": "provider down", "org": "acme"})
    await pg_app.worker(concurrency=2).run(burst=True)
    async with client(make_asgi_app(pg_app)) as http:
        page = (await http.get(f"/jobs/{waiting.id}")).text
        assert page.count('class="t-name"') == 3  # fetch, render, approval
        assert "waiting for event &#39;payment.settled&#39; with key &#39;order-7&#39;" in page
        # The last report the worker wrote (it writes at most one a second: the first, here).
        assert re.search(r'<progress max="1" value="0\.(3|6)[0-9]*"></progress>\s*<span>[12]/3 ', page), page
        assert ">suspended</span>" in page and ">Cancel</button>" in page and ">Requeue</button>" not in page
        page = (await http.get(f"/jobs/{dead.id}")).text
        assert "TerminalError: provider down" in page and "Traceback (most recent call last)" in page
        assert ">Requeue</button>" in page and ">Remove</button>" in page and ">Cancel</button>" not in page
        # The short id `ls` and the list print goes to the job (issue 29), as a unique prefix does;
        # a prefix nobody has is JOB_NOT_FOUND.
        short = await http.get(f"/jobs/{short_id(dead.id)}")
        assert short.status_code == 303 and short.headers["location"] == f"/jobs/{dead.id}"
        short = await http.get(f"/jobs/{dead.id[:13]}")
        assert short.status_code == 303 and short.headers["location"] == f"/jobs/{dead.id}"
        missing = await http.get("/jobs/0000ffff")
        assert missing.status_code == 404 and refusal_code(missing.text) == "JOB_NOT_FOUND"


async def test_the_jobs_list_pages_both_ways_with_its_filters(pg_app: App) -> None:
    state = declare(pg_app)
    refs = await state["work"].enqueue_many([{"message": f"m{i}", "org": "acme"} for i in range(7)])
    await state["work"].enqueue_many([{"message": "other", "org": "globex"} for _ in range(2)])
    newest_first = [r.id for r in reversed(refs)]
    async with client(make_asgi_app(pg_app)) as http:
        first = await http.get("/jobs", params={"tenant": "acme", "limit": "3"})
        assert ids_on(first.text) == newest_first[:3] and 'rel="prev"' not in first.text
        older = re.search(r'rel="next" href="([^"]+)"', first.text)
        assert older is not None and "tenant=acme" in older[1] and "limit=3" in older[1]
        second = await http.get(older[1].replace("&amp;", "&"))
        assert ids_on(second.text) == newest_first[3:6]
        newer = re.search(r'rel="prev" href="([^"]+)"', second.text)
        assert newer is not None
        assert ids_on((await http.get(newer[1].replace("&amp;", "&"))).text) == newest_first[:3]
        refused = await http.get("/jobs", params={"limit": "500"})
        assert refused.status_code == 400 and refusal_code(refused.text) == "PAGE_LIMIT_INVALID"
        assert ids_on((await http.get("/jobs", params={"id_prefix": refs[0].id[:18]})).text) == [refs[0].id]


async def test_a_bulk_requeue_says_what_remains_and_a_requeue_from_a_step(pg_app: App) -> None:
    state = declare(pg_app)
    await state["work"].enqueue_many([{"fail": True, "org": "acme"} for _ in range(3)])
    ran = await state["steps"].enqueue({})
    await pg_app.worker(concurrency=4).run(burst=True)
    async with client(make_asgi_app(pg_app)) as http:
        csrf = csrf_of((await http.get("/jobs?state=dead")).text)
        ask = await http.post("/bulk/requeue", data={"csrf": csrf, "state": "dead", "queue": "emails"}, headers=POST)
        assert ask.status_code == 200 and "Requeue 3 dead jobs (queue &#39;emails&#39;)" in ask.text
        done = await http.post(
            "/bulk/requeue", data={"csrf": csrf, "state": "dead", "queue": "emails", "confirm": "yes"}, headers=POST
        )
        assert done.status_code == 303
        landed = await http.get(done.headers["location"])
        assert "Requeued 3 jobs; 0 remaining" in landed.text
        assert len((await pg_app.admin.list(state="ready")).jobs) == 3
        wrong = await http.post(
            "/bulk/requeue", data={"csrf": csrf, "state": "running", "confirm": "yes"}, headers=POST
        )
        assert wrong.status_code == 400 and refusal_code(wrong.text) == "BULK_STATE_INVALID"

        form = {"csrf": csrf, "confirm": "yes", "from_step": "render"}
        unknown = await http.post(f"/jobs/{ran.id}/requeue", data={**form, "from_step": "nope"}, headers=POST)
        assert unknown.status_code == 409 and refusal_code(unknown.text) == "STEP_UNKNOWN"
        again = await http.post(f"/jobs/{ran.id}/requeue", data=form, headers=POST)
        assert again.status_code == 303 and again.headers["location"] == f"/jobs/{ran.id}?notice=requeued"
        job: Any = await pg_app.admin.get(ran.id)
        assert job.state == "ready" and [s["name"] for s in job.steps] == ["fetch"]
        twice = await http.post(f"/jobs/{ran.id}/requeue", data=form, headers=POST)
        assert twice.status_code == 409 and refusal_code(twice.text) == "JOB_NOT_REQUEUEABLE"


async def test_workers_and_tasks_pages(pg_app: App) -> None:
    declare(pg_app)
    async with client(make_asgi_app(pg_app)) as http:
        workers = await http.get("/workers")
        assert workers.status_code == 200 and "No live worker" in workers.text and "No scheduler" in workers.text
        tasks = await http.get("/tasks")
        assert tasks.status_code == 200 and "reports.nightly" in tasks.text and "cron 0 2 * * *" in tasks.text
        assert "emails.digest" in tasks.text and "not registered" in tasks.text
