"""conn= takes the caller's transaction from the tool that opened it: psycopg 3, SQLAlchemy 2
(Connection, Session, AsyncConnection, AsyncSession) and Django, each for real on PostgreSQL:
commit -> the job exists; rollback -> it does not. Anything else is refused, naming what it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from workhorse import App, ConfigurationError


def count(url: str, schema: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"select count(*) from {schema}.jobs").fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])


@pytest.fixture
def app(database_url: str, schema: str) -> Iterator[App]:  # a sync fixture: Django's calls must not run in a loop
    instance = App(database_url, schema=schema)
    instance.migrate_sync()
    yield instance
    asyncio.run(instance.close())


def declare(app: App) -> Any:
    @app.job(name="stack.mail", tenant="none")
    def mail(ctx: Any, payload: dict[str, int]) -> None:
        return None

    return mail


def test_sqlalchemy_connection_and_session(app: App, database_url: str, schema: str) -> None:
    mail = declare(app)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(database_url))
    try:
        with engine.connect() as conn, conn.begin() as tx:
            mail.enqueue_sync({"n": 1}, conn=conn)
            tx.rollback()
        assert count(database_url, schema) == 0
        with engine.begin() as conn:
            mail.enqueue_sync({"n": 2}, conn=conn)
            conn.execute(text("select 1"))
        assert count(database_url, schema) == 1
        with Session(engine) as session:
            mail.enqueue_sync({"n": 3}, conn=session)
            session.rollback()
        assert count(database_url, schema) == 1
        with Session(engine) as session, session.begin():
            mail.enqueue_sync({"n": 4}, conn=session)
        assert count(database_url, schema) == 2
        with Session(engine) as session:  # an async enqueue may join a sync session's transaction too
            asyncio.run(mail.enqueue({"n": 5}, conn=session))
            session.commit()
        assert count(database_url, schema) == 3
        with engine.connect() as conn:  # commit as you go: the enqueue is the first thing it does
            mail.enqueue_sync({"n": 6}, conn=conn)
            conn.commit()
        assert count(database_url, schema) == 4
        with engine.connect() as conn:  # closed uncommitted: SQLAlchemy rolls back, the job goes with it
            mail.enqueue_sync({"n": 7}, conn=conn)
        assert count(database_url, schema) == 4
    finally:
        engine.dispose()


async def test_sqlalchemy_async_connection_and_session(database_url: str, schema: str) -> None:
    app = App(database_url, schema=schema)
    await app.migrate()
    mail = declare(app)
    engine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(database_url)
    )
    try:
        async with engine.connect() as conn:
            await mail.enqueue({"n": 1}, conn=conn)
            await conn.rollback()
        assert await asyncio.to_thread(count, database_url, schema) == 0
        async with engine.begin() as conn:
            await mail.enqueue_many([{"n": 2}, {"n": 3}], conn=conn)
        assert await asyncio.to_thread(count, database_url, schema) == 2
        async with AsyncSession(engine) as session:
            await mail.enqueue({"n": 4}, conn=session)
            await session.rollback()
        async with AsyncSession(engine) as session, session.begin():
            await mail.enqueue({"n": 5}, conn=session)
        assert await asyncio.to_thread(count, database_url, schema) == 3
        async with engine.connect() as conn:  # commit as you go, the enqueue first
            await mail.enqueue({"n": 7}, conn=conn)
            await conn.commit()
        assert await asyncio.to_thread(count, database_url, schema) == 4
        async with AsyncSession(engine) as session:
            with pytest.raises(ConfigurationError) as caught:
                mail.enqueue_sync({"n": 6}, conn=session)
            assert caught.value.code == "CONN_INVALID" and "AsyncSession" in caught.value.cause
    finally:
        await engine.dispose()
        await app.close()


def test_a_sqlalchemy_engine_on_another_driver_is_refused_naming_it(app: App) -> None:
    mail = declare(app)
    engine = create_engine("sqlite://")  # the sqlite3 driver: not psycopg 3
    try:
        with engine.connect() as conn, pytest.raises(ConfigurationError) as caught:
            mail.enqueue_sync({"n": 1}, conn=conn)
    finally:
        engine.dispose()
    assert caught.value.code == "CONN_INVALID"
    assert "sqlite3" in caught.value.cause and "postgresql+psycopg" in caught.value.fix


@pytest.mark.parametrize("given", [object(), "postgresql://x", 5])
def test_anything_else_is_refused_naming_what_was_given(app: App, given: Any) -> None:
    mail = declare(app)
    with pytest.raises(ConfigurationError) as caught:
        mail.enqueue_sync({"n": 1}, conn=given)
    assert caught.value.code == "CONN_INVALID"
    assert type(given).__qualname__ in caught.value.cause and "SQLAlchemy" in caught.value.cause
    with pytest.raises(ConfigurationError, match="CONN_INVALID"):
        asyncio.run(mail.enqueue({"n": 1}, conn=given))


DJANGO_SETTINGS = """
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", **DB}}
INSTALLED_APPS = ["workhorse.contrib.django"]
WORKHORSE_APP = "djjobs:app"
USE_TZ = True
"""

DJANGO_JOBS = """
import os
from django.db import connection
from workhorse import App

app = App(os.environ["URL"], schema=os.environ["SCHEMA"])
ran = []

@app.job(name="dj.mail", tenant="none")
def mail(ctx, payload):
    with connection.cursor() as cur:  # the body's own thread reaches the ORM's connection
        cur.execute("select %s::int", [payload["n"]])
        return cur.fetchone()[0]
"""

DJANGO_SCRIPT = """
import django
django.setup()
from django.db import connection, transaction
from djjobs import app, mail
import psycopg

app.migrate_sync()
with transaction.atomic():
    mail.enqueue_sync({"n": 1}, conn=connection)
    transaction.set_rollback(True)
with transaction.atomic():
    kept = mail.enqueue_sync({"n": 2}, conn=connection)
assert connection.connection is not None
with psycopg.connect(app.database_url) as c:
    rows = c.execute(f"select payload from {app.schema}.jobs").fetchall()
print("rows", [r[0]["n"] for r in rows])
from workhorse.contrib.django import close_old_connections
close_old_connections(app)
close_old_connections(app)  # twice wraps once
assert getattr(mail.fn, "__workhorse_django_closing__") and mail.fn.__wrapped__.__name__ == "mail"
assert not hasattr(mail.fn.__wrapped__, "__wrapped__")
assert mail.fn(None, {"n": 3}) == 3
"""


def test_django_connection_in_atomic_and_the_worker_command(tmp_path: Path, database_url: str, schema: str) -> None:
    info = conninfo_to_dict(database_url)
    db = {"NAME": info.get("dbname", "postgres"), "USER": info.get("user", "postgres"),
          "HOST": info.get("host", "127.0.0.1"), "PORT": str(info.get("port", "5432")),
          "PASSWORD": info.get("password", "")}  # fmt: skip
    (tmp_path / "djsettings.py").write_text(f"DB = {db!r}\n" + textwrap.dedent(DJANGO_SETTINGS))
    (tmp_path / "djjobs.py").write_text(textwrap.dedent(DJANGO_JOBS))
    (tmp_path / "run.py").write_text(textwrap.dedent(DJANGO_SCRIPT))
    env = {"URL": database_url, "SCHEMA": schema, "PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin",
           "DJANGO_SETTINGS_MODULE": "djsettings"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert "rows [2]" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(  # what `python manage.py workhorse_worker --burst` runs
        [sys.executable, "-m", "django", "workhorse_worker", "--burst", "--no-scheduler", "--concurrency", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f"select state, result from {schema}.jobs").fetchall()  # type: ignore[arg-type]
    assert rows == [("done", 2)], done.stdout + done.stderr


def test_sqlalchemy_and_django_are_never_imported_by_workhorse() -> None:
    script = (
        "import asyncio, sys\n"
        "from workhorse.connections import driver_connection, driver_connection_sync\n"
        "for call in (lambda: asyncio.run(driver_connection(object())), lambda: driver_connection_sync(object())):\n"
        "    try:\n"
        "        call()\n"
        "    except Exception as e:\n"
        "        assert e.code == 'CONN_INVALID', e\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'django', 'pydantic')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
