"""A Django project for real (``site/``: settings, the ``shop`` app with a model, the admin) on a
database of its own per test process: created fresh, migrated by ``manage.py migrate``, dropped at
the end. workhorse's tables go in a schema of their own too. Skipped only when Django is absent."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("django")

SITE = Path(__file__).parent / "site"


def site_env(database_url: str, dbname: str, schema: str) -> dict[str, str]:
    """The environment the test project's settings read (its database, workhorse's schema)."""
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    return {
        "WHDJ_NAME": dbname,
        "WHDJ_USER": str(info.get("user") or "postgres"),
        "WHDJ_PASSWORD": str(info.get("password") or ""),
        "WHDJ_HOST": str(info.get("host") or "127.0.0.1"),
        "WHDJ_PORT": str(info.get("port") or "5432"),
        "WHDJ_SCHEMA": schema,
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
    }


def create_database(database_url: str) -> str:
    name = f"whdj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create database {name}")  # type: ignore[arg-type]
    return name


def drop_database(database_url: str, name: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        conn.execute(f"drop database if exists {name}")  # type: ignore[arg-type]


def url_of(database_url: str, dbname: str) -> str:
    info: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(database_url))
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


@pytest.fixture(scope="session")
def site(database_url: str) -> Iterator[dict[str, str]]:
    """Django set up in this process on a fresh database, after ``migrate`` (workhorse's included)."""
    dbname = create_database(database_url)
    env = site_env(database_url, dbname, f"wh_{uuid.uuid4().hex[:10]}")
    os.environ.update(env)
    sys.path.insert(0, str(SITE))
    from django.core.management import call_command

    import django

    django.setup()
    call_command("migrate", verbosity=0)
    try:
        yield {**env, "URL": url_of(database_url, dbname)}
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(database_url, dbname)
