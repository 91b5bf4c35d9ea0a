"""The pytest plugin (entry point ``workhorse``), run as a user's project would run it: a separate
pytest process in a project of its own, whose App is declared at import time on PostgreSQL and
named by ``workhorse_app`` in its ini. (This repository's own conftest defines ``app`` and
``pg_app`` too, and those win here, so the plugin's are exercised only in that subprocess.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg

from workhorse import App

JOBS = """
from pydantic import BaseModel
from workhorse import App, JobContext, Retry

app = App(schema="myproject")  # resolved lazily: declaring jobs connects to nothing


class Welcome(BaseModel):
    user_id: int


@app.job(name="myproject.welcome", tenant="none", retry=Retry(attempts=3, base="10m", jitter=False))
async def welcome(ctx: JobContext, payload: Welcome) -> str:
    if ctx.attempt == 1:
        raise RuntimeError("flaky mail server")
    return f"sent to {payload.user_id}"
"""

TESTS = """
import time
from myjobs import Welcome, app as declared, welcome
from workhorse.testing import drain, enqueued, run_job


async def test_app_is_my_app_on_memory(app, workhorse_clock):
    assert app is declared and app.is_memory
    ref = await welcome.enqueue(Welcome(user_id=7))
    began, start = time.monotonic(), workhorse_clock.now
    await drain(app)
    assert time.monotonic() - began < 20 and (workhorse_clock.now - start).total_seconds() >= 600
    (job,) = await enqueued(app, welcome)
    assert (job.id, job.state, job.attempt, job.result) == (ref.id, "done", 2, "sent to 7")


async def test_run_job(app):
    assert await run_job(welcome, {"user_id": 1}, attempt=2) == "sent to 1"


async def test_pg_app_is_a_fresh_schema(pg_app):
    assert pg_app is declared and not pg_app.is_memory and pg_app.schema.startswith("wh_test_")
    ref = await welcome.enqueue(Welcome(user_id=8))
    assert [j.id for j in await enqueued(pg_app)] == [ref.id]
    await pg_app.worker().run(burst=True)
    job = await pg_app.get_job(ref.id)
    assert job.state == "delayed" and job.attempt == 1


def test_the_app_is_put_back():
    assert not declared.is_memory and declared.schema == "myproject"
"""

INI = """
[pytest]
workhorse_app = myjobs:app
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def test_the_plugin_fixtures_in_a_users_project(tmp_path: Path, database_url: str) -> None:
    (tmp_path / "myjobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "test_jobs.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "pytest.ini").write_text(textwrap.dedent(INI))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "WORKHORSE_DATABASE_URL": database_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


UNBOUND_TESTS = """
import pytest
from myjobs import Welcome, app as declared, welcome
from workhorse import WorkhorseError
from workhorse.testing import enqueued


async def test_a_handle_of_my_real_app_is_refused(app):
    assert app is not declared and app.is_memory  # no workhorse_app in the ini: a fresh App
    with pytest.raises(WorkhorseError) as caught:
        await welcome.enqueue(Welcome(user_id=7))
    print("REFUSED", caught.value.code, "|", caught.value.cause, "|", caught.value.fix)
    assert await enqueued(app) == []


def test_the_sync_enqueue_too(app):
    with pytest.raises(WorkhorseError) as caught:
        welcome.enqueue_sync(Welcome(user_id=8))
    assert caught.value.code == "TEST_APP_UNBOUND"


async def test_pg_app_still_reaches_its_schema(app, pg_app):
    assert pg_app is not declared
    assert await enqueued(pg_app) == []


def test_after_the_fixture_the_real_app_is_mine_again():
    assert not declared.is_memory
"""


def test_the_app_fixture_refuses_a_handle_of_another_app(tmp_path: Path, database_url: str, schema: str) -> None:
    """Issue 29: without `workhorse_app` in the ini, a test on the `app` fixture that enqueues
    through the module's real App is refused (TEST_APP_UNBOUND, naming the ini line to add) and
    writes nothing to the real database (which, migrated, would have taken the job)."""
    (tmp_path / "myjobs.py").write_text(textwrap.dedent(JOBS).replace('schema="myproject"', f'schema="{schema}"'))
    (tmp_path / "test_jobs.py").write_text(textwrap.dedent(UNBOUND_TESTS))
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    App(database_url, schema=schema).migrate_sync()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "WORKHORSE_DATABASE_URL": database_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
    refusal = next(line for line in done.stdout.splitlines() if "REFUSED" in line)
    assert "REFUSED TEST_APP_UNBOUND | " in refusal
    assert "declared at myjobs:app" in refusal and "workhorse_app = myjobs:app" in refusal
    with psycopg.connect(database_url) as conn:
        assert conn.execute(f"select count(*) from {schema}.jobs").fetchone() == (0,)  # type: ignore[arg-type]
