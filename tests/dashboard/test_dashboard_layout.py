"""The dashboard as a 3 a.m. operator sees it (issue 29), in headless Chromium at 1,400 and 800 px:
the jobs table stays inside its card and keeps the last error; "Requeue all matching" asks with the
count (script on); the dead-jobs card is a link; a job that succeeded after a retry shows no red
error; the dead list says when each job died; a drain's hand-back shows on the job's page.

Skipped, with how to install them, when Chromium or Playwright is missing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from browserkit import Served, browser_page, need_browser
from dashkit import declare

from workhorse import App, JobContext, Retry, TerminalError
from workhorse.ids import short_id

LONG_NAME = "accounting.nightly_invoice_export_for_every_region"
LONG_ERROR = "the invoice service refused the export: " + "customer record incomplete; " * 12
WIDTHS = (1400, 800)


@pytest.fixture
def served(database_url: str, schema: str) -> Iterator[tuple[Served, dict[str, Any]]]:
    need_browser()
    app = App(database_url, schema=schema)
    state = declare(app)

    @app.job(LONG_NAME, queue="billing", tenant=lambda p: p["org"], retry=Retry(attempts=2, base=0, jitter=False))
    async def export(ctx: JobContext, payload: dict[str, Any]) -> str:
        ctx.progress((ctx.attempt, 2), "exporting region after region, slowly and carefully")
        if payload.get("flaky") and ctx.attempt == 1:
            raise RuntimeError("the invoice service timed out")
        if payload.get("doomed"):
            raise TerminalError(LONG_ERROR)
        return "exported"

    state["export"] = export
    app.migrate_sync()
    server = Served(app, refresh_seconds=1).start()
    try:
        yield server, state
    finally:
        server.stop()


def settled(server: Served, job_id: str, wanted: str) -> None:
    async def reached() -> bool:
        job = await server.app.admin.get(job_id)
        return job is not None and job.state == wanted

    server.wait_for(reached)


def seed(server: Served, state: dict[str, Any]) -> dict[str, str]:
    org = "acme-corporation-international-holdings"
    dead = server.call(state["export"].enqueue({"doomed": True, "org": org}))
    retried = server.call(state["export"].enqueue({"flaky": True, "org": org}))
    settled(server, dead.id, "dead")
    settled(server, retried.id, "done")
    server.call(state["work"].enqueue({"fail": True, "message": "provider down", "org": org}))
    return {"dead": dead.id, "retried": retried.id}


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return dict(found)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_jobs_table_fits_its_card_and_keeps_the_last_error(
    served: tuple[Served, dict[str, Any]], width: int
) -> None:
    server, state = served
    ids = seed(server, state)
    with browser_page() as page:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(server.url + "/jobs")
        card, table = box(page, "main section.card"), box(page, "table.jobs")
        assert table["x"] + table["width"] <= card["x"] + card["width"] + 0.5, (table, card)
        fits = page.evaluate(
            "() => { const w = document.querySelector('.table-wrap');"
            " return [w.scrollWidth <= w.clientWidth + 1, document.documentElement.scrollWidth <= innerWidth]; }"
        )
        assert fits == [True, True]  # no scroll inside the card, none across the page
        header = page.locator("table.jobs th", has_text="last error")
        assert header.is_visible()
        assert box(page, "table.jobs th:last-child")["x"] + 10 < width
        dead_row = page.locator("table.jobs tbody tr", has_text=short_id(ids["dead"]))
        assert dead_row.locator("td", has_text=LONG_NAME).count() == 1  # the whole name, wrapped if it must
        error = dead_row.locator(".clip.err")
        assert error.is_visible() and error.inner_text().startswith("TerminalError: the invoice service refused")
        assert dead_row.get_by_role("link", name=short_id(ids["dead"])).get_attribute("href", timeout=5000) == (
            f"/jobs/{ids['dead']}"
        )
        note = page.locator(".narrow-note")
        assert note.is_visible() is (width == 800)  # the columns left out are said to be left out
        if width == 1400:
            assert page.locator("table.jobs th", has_text="created").is_visible()


def test_a_job_that_succeeded_after_a_retry_shows_no_red_error(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    ids = seed(server, state)
    with browser_page() as page:
        page.goto(server.url + "/jobs")
        row = page.locator("table.jobs tbody tr", has_text=short_id(ids["retried"]))
        assert row.locator(".s-done").count() == 1
        cell = row.locator("td.fill .clip")
        assert "timed out" in cell.inner_text() and row.locator(".clip.err").count() == 0
        dead = page.locator("table.jobs tbody tr", has_text=short_id(ids["dead"])).locator("td.fill .clip")
        colours = [c.evaluate("el => getComputedStyle(el).color") for c in (cell, dead)]
        assert colours[0] != colours[1], colours  # the dead job's error is red; the done one's is not


def test_the_dead_card_leads_to_the_dead_list_which_says_when_each_died(
    served: tuple[Served, dict[str, Any]],
) -> None:
    server, state = served
    ids = seed(server, state)
    dead = server.call(server.app.admin.get(ids["dead"]))
    assert dead is not None and dead.finished_at is not None
    with browser_page() as page:
        page.goto(server.url + "/")
        page.get_by_role("link", name=re.compile("dead jobs")).click()
        page.wait_for_url(re.compile(r"/jobs\?state=dead$"))
        headers = page.locator("table.jobs thead th").all_inner_texts()
        assert "died" in headers and "created" not in headers and "run at" not in headers
        row = page.locator("table.jobs tbody tr", has_text=short_id(ids["dead"]))
        died = row.locator("td[title]").first.get_attribute("title")
        assert died == dead.finished_at.strftime("%Y-%m-%d %H:%M:%SZ")


def test_requeue_all_matching_asks_with_the_count_with_script_on(served: tuple[Served, dict[str, Any]]) -> None:
    server, state = served
    seed(server, state)
    with browser_page() as page:
        page.goto(server.url + "/jobs?state=dead")
        page.get_by_role("button", name="Requeue all matching").click()
        page.wait_for_url(re.compile(r"notice=bulk"))
        asked = page.dialogs  # type: ignore[attr-defined]
        assert len(asked) == 1 and asked[0].startswith("confirm: Requeue 2 dead jobs (every queue)?"), asked
        assert "Requeued 2 jobs; 0 remaining" in page.locator(".notice").inner_text()
        # narrowed by queue, the count follows the filter
        server.wait_for(lambda: _dead_again(server))
        page.goto(server.url + "/jobs?state=dead&queue=billing")
        page.get_by_role("button", name="Requeue all matching").click()
        page.wait_for_url(re.compile(r"notice=bulk"))
        assert asked[1].startswith("confirm: Requeue 1 dead jobs (queue 'billing')?"), asked


async def _dead_again(server: Served) -> bool:
    page = await server.app.admin.list(state="dead")
    return len(page.jobs) == 2  # both requeued jobs fail again (the provider and the invoice are still down)


def test_the_job_page_says_a_drain_handed_it_back(served: tuple[Served, dict[str, Any]]) -> None:
    server, _ = served
    app = server.app

    async def handed_back() -> str:
        @app.job("reports.longrun", queue="slow", tenant="none")
        async def longrun(ctx: JobContext, payload: None) -> None:
            import asyncio

            ctx.progress((3, 10), "section 3 of 10")
            while not ctx.draining:
                await asyncio.sleep(0.01)
            ctx.hand_back()

        ref = await longrun.enqueue(None)
        worker = app.worker(queues=["slow"], handle_signals=False)
        import asyncio

        task = asyncio.create_task(worker.run())
        while (job := await app.admin.get(ref.id)) is None or job.progress is None:
            await asyncio.sleep(0.05)
        await worker.stop()
        await task
        return str(ref.id)

    job_id = server.call(handed_back())
    with browser_page() as page:
        page.goto(server.url + f"/jobs/{job_id}")
        notice = page.locator(".notice.handed").inner_text()
        assert "Handed back" in notice and "by worker w-" in notice and "attempt 1 unspent" in notice
        assert "the body handed itself back (ctx.hand_back())" in notice
        assert "reported before it" in notice
        assert "(ran once; a suspension or hand-back spends no attempt)" in page.locator(".facts").inner_text()
        assert short_id(job_id) in page.locator(".card-head").first.inner_text()


@pytest.mark.parametrize("width", WIDTHS)
def test_search_by_a_payload_field_or_an_errors_text(served: tuple[Served, dict[str, Any]], width: int) -> None:
    server, state = served
    ids = seed(server, state)
    wanted = server.call(state["export"].enqueue({"org": "globex", "invoice": {"number": 4242}}))
    settled(server, wanted.id, "done")
    with browser_page() as page:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(server.url + "/jobs")
        page.fill("input[name=payload]", "invoice.number=4242")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(r"payload=invoice.number%3D4242"))
        rows = page.locator("table.jobs tbody tr")
        assert rows.count() == 1 and short_id(wanted.id) in rows.first.inner_text()
        assert "Searched" in page.locator(".searched").inner_text()
        page.goto(server.url + "/jobs")
        page.fill("input[name=error]", "REFUSED THE EXPORT")  # any case
        page.get_by_role("button", name="Filter").click()
        rows = page.locator("table.jobs tbody tr")
        assert rows.count() == 1 and short_id(ids["dead"]) in rows.first.inner_text()
        assert rows.first.locator("td.fill .clip.err").is_visible()
        page.goto(server.url + "/jobs?payload=nonsense")
        assert page.locator(".refusal-code").inner_text() == "SEARCH_INVALID"
