"""The admin of workhorse's jobs, through Django's test client: read-only pages with filters, the
last error and step timeline on a job's page, requeue and cancel through the operator API."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from djsite import run


@pytest.fixture
def client(site: dict[str, str]) -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="boss").first() or User.objects.create_superuser("boss", "b@x.io", "pw")
    found = Client()
    found.force_login(user)
    return found


def state_of(site: dict[str, str], job_id: str) -> str:
    with psycopg.connect(site["URL"]) as conn:
        row = conn.execute(f"select state from {site['WHDJ_SCHEMA']}.jobs where id = %s", (job_id,)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return str(row[0])


def act(client: Any, action: str, job_id: str) -> list[str]:
    response = client.post("/admin/workhorse/job/", {"action": action, "_selected_action": [job_id]}, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


def test_the_list_filters_and_nothing_is_editable(site: dict[str, str], client: Any) -> None:
    from shop.jobs import receipt

    mine = receipt.enqueue_sync({"org": 7, "order": 1})
    other = receipt.enqueue_sync({"org": 8, "order": 2}, queue="bulk")
    page = client.get("/admin/workhorse/job/", {"tenant": "org-7", "state": "ready", "name": "shop.receipt"})
    assert page.status_code == 200
    shown = page.content.decode()
    assert mine.id in shown and other.id not in shown
    assert other.id in client.get("/admin/workhorse/job/", {"queue": "bulk"}).content.decode()
    assert client.get("/admin/workhorse/job/add/").status_code == 403
    change = client.get(f"/admin/workhorse/job/{mine.id}/change/")
    assert change.status_code == 200 and b'name="name"' not in change.content  # shown, not a form field
    assert client.post(f"/admin/workhorse/job/{mine.id}/delete/").status_code == 403


def test_cancel_and_requeue_go_through_the_operator_api(site: dict[str, str], client: Any) -> None:
    from shop.jobs import receipt

    job = receipt.enqueue_sync({"org": 1, "order": 3})
    assert act(client, "cancel", job.id) == ["cancelled 1 job"]
    assert state_of(site, job.id) == "cancelled"
    refused = act(client, "cancel", job.id)
    assert len(refused) == 1 and refused[0].startswith(f"{job.id}: JOB_NOT_CANCELLABLE: ")
    assert act(client, "requeue", job.id) == ["requeued 1 job"]
    assert state_of(site, job.id) == "ready"
    refused = act(client, "requeue", job.id)
    assert len(refused) == 1 and "JOB_NOT_REQUEUEABLE" in refused[0]


def test_a_viewer_without_change_permission_gets_no_actions(site: dict[str, str]) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    viewer = User.objects.filter(username="viewer").first() or User.objects.create_user("viewer", password="pw")
    viewer.is_staff = True
    viewer.save()
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    looker = Client()
    looker.force_login(viewer)
    page = looker.get("/admin/workhorse/job/")
    assert page.status_code == 200 and b'value="cancel"' not in page.content


def test_a_jobs_page_shows_its_last_error_and_step_timeline(site: dict[str, str], client: Any) -> None:
    from shop.jobs import checkout

    job = checkout.enqueue_sync({"order": 41})
    done = run(["manage.py", "workhorse_worker", "--burst", "--no-scheduler", "--queues", "default"], site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert state_of(site, job.id) == "dead"
    page = client.get(f"/admin/workhorse/job/{job.id}/change/").content.decode()
    assert "LookupError" in page and "card declined for order 41" in page and "Traceback" in page
    timeline = page[page.lower().index("step timeline") :]
    assert timeline.index("reserve") < timeline.index("charge")
    assert "{&#x27;reserved&#x27;: 41}" in timeline and "failed" in timeline


def test_the_list_reads_the_newest_rows_only(site: dict[str, str], client: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from shop.jobs import receipt

    receipt.enqueue_sync({"org": 99, "order": 5})
    with CaptureQueriesContext(connection) as seen:
        page = client.get("/admin/workhorse/job/")
    assert page.status_code == 200 and "org-99" in page.content.decode()  # offered as a tenant filter
    jobs = [q["sql"] for q in seen.captured_queries if '"jobs"' in q["sql"]]
    assert jobs and not [q for q in jobs if "DISTINCT" in q]  # no scan of the whole table for choices
    assert next(q for q in jobs if "COUNT(*)" in q).endswith("LIMIT 10001) subquery")  # the pager's count, capped
    assert all('."created_at" DESC' not in q for q in jobs)  # newest first by the primary key (UUIDv7)
