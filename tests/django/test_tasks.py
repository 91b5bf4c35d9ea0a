"""Django's Tasks framework on workhorse: enqueue in the caller's transaction, options mapped onto
the job, a worker process (manage.py workhorse_worker) running the tasks, results read back."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from djsite import run

if importlib.util.find_spec("django.tasks") is None:  # Django before 6: the backport
    pytest.importorskip("django_tasks")


def rows(site: dict[str, str], columns: str = "name, queue, priority, state") -> list[tuple[Any, ...]]:
    with psycopg.connect(site["URL"]) as conn:
        query = f"select {columns} from {site['WHDJ_SCHEMA']}.jobs order by created_at, id"
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


@pytest.fixture
def clean(site: dict[str, str]) -> dict[str, str]:
    with psycopg.connect(site["URL"]) as conn:
        conn.execute(f"delete from {site['WHDJ_SCHEMA']}.jobs")  # type: ignore[arg-type]
    return site


def worker(site: dict[str, str]) -> str:
    done = run(["manage.py", "workhorse_worker", "--burst", "--no-scheduler", "--concurrency", "4"], site)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_enqueue_in_atomic_is_kept_on_commit_and_dropped_on_rollback(clean: dict[str, str]) -> None:
    from django.db import transaction
    from shop.tasks import add

    with transaction.atomic():
        kept = add.enqueue(1, 2)
        assert add.get_result(kept.id).status == "READY"  # read on the block's own connection
        assert rows(clean) == []  # nothing committed yet
    try:
        with transaction.atomic():
            add.enqueue(3, 4)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert rows(clean, "id::text, payload") == [(kept.id, {"args": [1, 2], "kwargs": {}})]


def test_priority_queue_and_run_after_map_onto_the_job(clean: dict[str, str]) -> None:
    from shop.tasks import add, shout

    shout.enqueue("hi")
    later = datetime.now(UTC) + timedelta(hours=1)
    add.using(priority=-7, run_after=later).enqueue(1, 1)
    found = rows(clean, "name, queue, priority, state, run_at")
    assert found[0][:4] == ("shop.tasks.shout", "emails", 5, "ready")
    assert found[1][:4] == ("shop.tasks.add", "default", -7, "delayed") and found[1][4] == later


def test_tenant_from_the_task_arguments_and_aenqueue(clean: dict[str, str]) -> None:
    from shop.tasks import for_org

    async def enqueue_and_read() -> Any:
        result = await for_org.aenqueue(42, amount=3)
        return await for_org.aget_result(result.id)

    found = asyncio.run(enqueue_and_read())
    assert found.status == "READY" and found.kwargs == {"amount": 3}
    assert rows(clean, "tenant") == [("org-42",)]


def test_a_worker_runs_the_tasks_and_get_result_reads_them(clean: dict[str, str], tmp_path: Path) -> None:
    from shop.models import Order
    from shop.tasks import add, async_add, explode, flaky, place_order, shout, which_attempt

    results = {
        "add": add.enqueue(2, 3),
        "shout": shout.enqueue("hi"),
        "order": place_order.enqueue(77),
        "explode": explode.enqueue("boom"),
        "flaky": flaky.enqueue(str(tmp_path / "tries")),
        "context": which_attempt.enqueue("w"),
        "async": async_add.enqueue(3, 4),
    }
    worker(clean)
    for result in results.values():
        result.refresh()
    assert results["add"].status == "SUCCESSFUL" and results["add"].return_value == 5
    assert results["add"].attempts == 1 and results["add"].errors == [] and results["add"].is_finished
    assert results["shout"].return_value == "HI"
    assert Order.objects.get(pk=results["order"].return_value).number == 77
    assert results["async"].return_value == 7
    context = results["context"].return_value
    assert context == {"attempt": 1, "word": "w", "id": results["context"].id}

    failed = results["explode"]
    assert failed.status == "FAILED" and failed.attempts == 1 and len(failed.errors) == 1
    assert failed.errors[0].exception_class is ValueError and "boom" in failed.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        failed.return_value  # noqa: B018

    retried = flaky.get_result(results["flaky"].id)
    assert retried.status == "SUCCESSFUL" and retried.return_value == 3 and retried.attempts == 3
    assert [e.exception_class for e in retried.errors] == [RuntimeError, RuntimeError]
    assert "attempt 2 fails" in retried.errors[-1].traceback


def test_get_result_of_no_such_task_result(site: dict[str, str]) -> None:
    from shop.tasks import add

    from workhorse.contrib.django.tasks import PACKAGE

    exceptions = importlib.import_module(f"{PACKAGE}.exceptions")
    for missing in ("not-a-uuid", "0190f1c2-0000-7000-8000-000000000000"):
        with pytest.raises(exceptions.TaskResultDoesNotExist):
            add.get_result(missing)


def test_each_thread_has_its_backend_and_they_share_the_job(clean: dict[str, str]) -> None:
    import threading

    from shop.tasks import add

    first = add.enqueue(1, 1)  # this thread's backend declares the job
    found: list[Any] = []
    other = threading.Thread(target=lambda: found.append(add.enqueue(2, 2)))  # Django: a backend per thread
    other.start()
    other.join()
    assert len(found) == 1 and found[0].id != first.id
    assert rows(clean, "name") == [("shop.tasks.add",), ("shop.tasks.add",)]


def test_an_app_of_your_own_enqueues_at_once_and_answers_results(clean: dict[str, str]) -> None:
    from django.db import transaction
    from django.test import override_settings
    from shop import plainapp
    from shop.tasks import shout

    with override_settings(WORKHORSE={"SCHEMA": clean["WHDJ_SCHEMA"], "APP": "shop.plainapp:app"}):
        try:
            with transaction.atomic():
                result = shout.enqueue("own")  # a plain App writes on its own connection: not joined
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        assert shout.get_result(result.id).status == "READY"  # read through app.get_job
    assert "shop.tasks.shout" in plainapp.app.jobs
